// sliced_sim: placement quality (sliced vs first-fit, random, Ray's
// worst-fit scorer, and a max-flow bound for whole-slice batches) and the
// solver's decision latency from 1k to 100k nodes, all in-process.
//
//   sliced_sim [--quick] [--check] --out_dir=DIR
//   sliced_sim --workload=mixed [--quick] [--check] --out_dir=DIR
//   sliced_sim --workload=subslice [--quick] [--check] [--pods=N] --out_dir=DIR
//   sliced_sim --workload=preemption [--quick] [--check] --out_dir=DIR
//
// Writes DIR/sim.json, DIR/quality.svg, and the Markdown sections
// DIR/sim_quality.md and DIR/sim_scaling.md that bench/run.sh splices into
// bench/RESULTS.md. With --workload=mixed it runs only the mixed-trace
// comparison of issue 13 (bench/sim/mixed.h): DIR/mixed.json and
// DIR/sim_mixed.md; with --workload=subslice the sub-slice comparison of
// issue 16 (bench/sim/subslice.h): DIR/subslice.json and
// DIR/sim_subslice.md; with --workload=preemption the victim-choice
// comparison of issue 18 (bench/sim/preemption.h): DIR/preemption.json and
// DIR/sim_preemption.md. Progress goes to stderr when it is a terminal.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/common/json.h"
#include "bench/common/output.h"
#include "bench/common/stats.h"
#include "bench/common/svg.h"
#include "bench/gen/fleet.h"
#include "bench/gen/trace.h"
#include "bench/sim/mixed.h"
#include "bench/sim/preemption.h"
#include "bench/sim/sim.h"
#include "bench/sim/subslice.h"
#include "scheduler/solver.h"

ABSL_FLAG(bool, quick, false, "small fleet and trace, 1k and 10k scaling only");
ABSL_FLAG(int64_t, nodes, 0, "fleet size for the replay (default 10000; quick 2000)");
ABSL_FLAG(int64_t, jobs, 0, "jobs in the trace (default 20000; quick 3000)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the fleet, the trace and random ties");
ABSL_FLAG(double, load, 0.9, "offered TPU load relative to the fleet's chips");
ABSL_FLAG(double, batch_oversubscription, 1.3,
          "whole-slice batch: slices asked / slices in the fleet");
ABSL_FLAG(int, replay_seeds, 0,
          "traces replayed (seeds seed, seed+1, ...; default 3; quick 1); the "
          "first gets the detailed tables and the plot");
ABSL_FLAG(int, batch_seeds, 0, "whole-slice batches to compare (default 7; quick 3)");
ABSL_FLAG(std::string, scaling_nodes, "",
          "fleet sizes for solver latency (default 1000,10000,100000; quick "
          "1000,10000)");
ABSL_FLAG(std::string, out_dir, ".", "where the JSON, SVG and Markdown go");
ABSL_FLAG(
    std::string, workload, "default",
    "default: the replay, batches and solver scaling; mixed: the mixed "
    "trace (multi-host slices, single-host TPU jobs, CPU gangs) against "
    "the tuned tiered-first-fit (defaults: 2000 nodes, 6000 jobs, 5 seeds, "
    "quick 2); subslice: sub-slices of v5p/v7x 4x4x4 pods against "
    "first-fit carving (defaults: 64 pods, 4000 jobs, 3 seeds; quick 16, "
    "800, 1); preemption: victim choice against a topology-blind "
    "baseline (defaults: 48 slices, 24 preemptors, 5 seeds; quick 16, "
    "12, 2)");
ABSL_FLAG(double, cpu_load, 1.5,
          "mixed: offered CPU-gang load / CPU of the CPU-only nodes");
ABSL_FLAG(int, tune_seeds, 3,
          "mixed: fleets and traces (seeds 1000 + seed, ...) on which "
          "tiered-first-fit's knobs are tuned");
ABSL_FLAG(int64_t, pods, 0,
          "--workload=subslice: 4x4x4 pods per seed (default 64; quick 16)");
ABSL_FLAG(
    int64_t, slices, 0,
    "--workload=preemption: v6e-16 slices per seed (default 48; quick 16)");
ABSL_FLAG(int64_t, preemptors, 0,
          "--workload=preemption: production requests per seed (default 24; "
          "quick 12)");
ABSL_FLAG(bool, check, false,
          "exit 1 unless every policy accepted jobs of every trace and no "
          "batch placed more slices than the max-flow bound");

namespace sliced::bench {
namespace {

std::string Minutes(double s) { return absl::StrFormat("%.1f", s / 60); }
std::string Pct(double x) { return absl::StrFormat("%.1f %%", 100 * x); }

// --- solver latency scaling ---------------------------------------------------

// Per job kind: this thread's CPU time per decision (the solver's own
// cost; wall clock on shared cores includes preemption), all decisions and
// split by outcome, plus the wall-clock p99.
struct KindLatency {
  std::string kind;
  double p50_us = 0, p99_us = 0, wall_p99_us = 0;
  int64_t decisions = 0;
  int64_t placed = 0;
  double placed_p50_us = 0, placed_p99_us = 0;
  double unplaced_p50_us = 0, unplaced_p99_us = 0;
};

double ThreadCpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
struct ScalingPoint {
  int64_t nodes = 0, slices = 0, placed = 0;
  double build_ms = 0, fill = 0;
  std::vector<KindLatency> kinds;
};

// Builds the fleet, fills it to about half its chips with trace jobs placed
// by the solver, then times Solve (without committing) for trace requests.
ScalingPoint MeasureSolver(int64_t nodes, uint64_t seed) {
  using Clock = std::chrono::steady_clock;
  ScalingPoint point;
  point.nodes = nodes;
  Fleet fleet = GenerateFleet({nodes, seed});
  const auto t0 = Clock::now();
  auto built = scheduler::InventorySnapshot::Build(fleet.nodes, {});
  point.build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!built.ok()) std::abort();
  std::shared_ptr<const scheduler::InventorySnapshot> snap = *built;
  point.slices = static_cast<int64_t>(snap->num_slices());
  TraceOptions topts;
  topts.jobs = std::max<int64_t>(4000, nodes / 4);
  topts.seed = seed + 100;
  std::vector<Job> trace = GenerateTrace(fleet, topts);
  int64_t held = 0;
  size_t i = 0;
  for (; i < trace.size() && held < fleet.tpu_chips / 2; ++i) {
    const scheduler::Decision d = scheduler::Solve(*snap, trace[i].request);
    if (d.outcome != scheduler::Decision::kPlaced) continue;
    const std::vector<scheduler::Bundle> bundles = ExpandBundles(trace[i]);
    scheduler::SnapshotDelta delta;
    for (size_t b = 0; b < d.bundle_nodes.size(); ++b) {
      delta.add_allocations.push_back({absl::StrCat("fill-", i), static_cast<int>(b),
                                       d.bundle_nodes[b], bundles[b].resources});
    }
    auto next = snap->Apply(delta);
    if (!next.ok()) std::abort();
    snap = *next;
    held += trace[i].chips;
    ++point.placed;
  }
  point.fill = double(held) / std::max<int64_t>(1, fleet.tpu_chips);
  struct Samples {
    std::vector<double> cpu, wall, placed, unplaced;
  };
  std::map<std::string, Samples> lat;
  const size_t limit = std::min(trace.size(), i + 4000);
  for (size_t k = i; k < limit; ++k) {
    const double c0 = ThreadCpuMicros();
    const auto w0 = Clock::now();
    const scheduler::Decision d = scheduler::Solve(*snap, trace[k].request);
    const double wall = std::chrono::duration<double, std::micro>(Clock::now() - w0).count();
    const double cpu = ThreadCpuMicros() - c0;
    Samples& s = lat[JobKindName(trace[k].kind)];
    s.cpu.push_back(cpu);
    s.wall.push_back(wall);
    (d.outcome == scheduler::Decision::kPlaced ? s.placed : s.unplaced).push_back(cpu);
  }
  for (auto& [kind, s] : lat) {
    KindLatency k;
    k.kind = kind;
    k.decisions = static_cast<int64_t>(s.cpu.size());
    k.placed = static_cast<int64_t>(s.placed.size());
    k.p50_us = Percentile(s.cpu, 0.5);
    k.p99_us = Percentile(s.cpu, 0.99);
    k.wall_p99_us = Percentile(s.wall, 0.99);
    k.placed_p50_us = Percentile(s.placed, 0.5);
    k.placed_p99_us = Percentile(s.placed, 0.99);
    k.unplaced_p50_us = Percentile(s.unplaced, 0.5);
    k.unplaced_p99_us = Percentile(s.unplaced, 0.99);
    point.kinds.push_back(k);
  }
  return point;
}

// Whether the results are sane: every policy accepted some feasible jobs of
// every trace, with utilization and acceptance fractions in (0, 1], and no
// policy placed more slices of a batch than its max-flow bound. Says why on
// stderr when not.
bool Sane(const std::vector<std::vector<SimResult>>& seed_results,
          const std::vector<BatchComparison>& batches) {
  bool sane = true;
  for (const auto& results : seed_results) {
    for (const SimResult& r : results) {
      if (r.accepted <= 0 || !(r.acceptance > 0 && r.acceptance <= 1) ||
          !(r.utilization > 0 && r.utilization <= 1)) {
        std::fprintf(stderr,
                     "sliced_sim: %s: %d of %d feasible jobs accepted, "
                     "utilization %f\n",
                     r.policy.c_str(), static_cast<int>(r.accepted),
                     static_cast<int>(r.feasible), r.utilization);
        sane = false;
      }
    }
  }
  for (const BatchComparison& b : batches) {
    for (const BatchResult& r : b.results) {
      if (r.slices_placed > b.bound_slices) {
        std::fprintf(stderr,
                     "sliced_sim: %s placed %d slices of a batch, over the "
                     "max-flow bound %d\n",
                     r.policy.c_str(), static_cast<int>(r.slices_placed),
                     static_cast<int>(b.bound_slices));
        sane = false;
      }
    }
  }
  return sane;
}

// A size flag's value when given (> 0), else the workload's default for
// --quick or a full run.
template <typename T>
T SizeFlag(const absl::Flag<T>& flag, T quick_default, T full_default) {
  const T given = absl::GetFlag(flag);
  if (given > 0) return given;
  return absl::GetFlag(FLAGS_quick) ? quick_default : full_default;
}

// --workload=mixed: the flags that apply, with that workload's defaults.
int MainMixed() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  MixedOptions o;
  if (absl::GetFlag(FLAGS_nodes) > 0) o.nodes = absl::GetFlag(FLAGS_nodes);
  if (absl::GetFlag(FLAGS_jobs) > 0) o.jobs = absl::GetFlag(FLAGS_jobs);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.seeds = SizeFlag(FLAGS_replay_seeds, 2, 5);
  o.tune_seeds = quick ? 1 : absl::GetFlag(FLAGS_tune_seeds);
  o.load = absl::GetFlag(FLAGS_load);
  o.cpu_load = absl::GetFlag(FLAGS_cpu_load);
  o.out_dir = absl::GetFlag(FLAGS_out_dir);
  o.check = absl::GetFlag(FLAGS_check);
  return RunMixed(o);
}

// --workload=subslice: the flags that apply, with that workload's defaults.
int MainSubslice() {
  SubsliceOptions o;
  o.pods = SizeFlag<int64_t>(FLAGS_pods, 16, 64);
  o.jobs = SizeFlag<int64_t>(FLAGS_jobs, 800, 4000);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.seeds = SizeFlag(FLAGS_replay_seeds, 1, 3);
  o.load = absl::GetFlag(FLAGS_load);
  o.out_dir = absl::GetFlag(FLAGS_out_dir);
  o.check = absl::GetFlag(FLAGS_check);
  return RunSubslice(o);
}

// --workload=preemption: the flags that apply, with that workload's
// defaults.
int MainPreemption() {
  PreemptionSimOptions o;
  o.slices = SizeFlag<int64_t>(FLAGS_slices, 16, 48);
  o.preemptors = SizeFlag<int64_t>(FLAGS_preemptors, 12, 24);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.seeds = SizeFlag(FLAGS_replay_seeds, 2, 5);
  o.out_dir = absl::GetFlag(FLAGS_out_dir);
  o.check = absl::GetFlag(FLAGS_check);
  return RunPreemptionSim(o);
}

int Main() {
  const std::string workload = absl::GetFlag(FLAGS_workload);
  if (workload == "mixed") return MainMixed();
  if (workload == "subslice") return MainSubslice();
  if (workload == "preemption") return MainPreemption();
  if (workload != "default") {
    std::fprintf(stderr, "sliced_sim: unknown --workload '%s'\n", workload.c_str());
    return 2;
  }
  const bool quick = absl::GetFlag(FLAGS_quick);
  int64_t nodes = absl::GetFlag(FLAGS_nodes);
  if (nodes == 0) nodes = quick ? 2000 : 10000;
  int64_t jobs = absl::GetFlag(FLAGS_jobs);
  if (jobs == 0) jobs = quick ? 3000 : 20000;
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  std::string scaling_flag = absl::GetFlag(FLAGS_scaling_nodes);
  if (scaling_flag.empty()) scaling_flag = quick ? "1000,10000" : "1000,10000,100000";
  std::vector<int64_t> scaling_sizes;
  for (absl::string_view s : absl::StrSplit(scaling_flag, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0) {
      std::fprintf(stderr, "sliced_sim: bad --scaling_nodes entry '%s'\n",
                   std::string(s).c_str());
      return 2;
    }
    scaling_sizes.push_back(n);
  }
  const std::string out_dir = absl::GetFlag(FLAGS_out_dir);

  // 1. Replay the trace under every policy.
  Progress("generating fleet (%d nodes) and trace (%d jobs)", nodes, jobs);
  const Fleet fleet = GenerateFleet({nodes, seed});
  TraceOptions topts;
  topts.jobs = jobs;
  topts.seed = seed;
  topts.load = absl::GetFlag(FLAGS_load);
  const std::vector<Job> trace = GenerateTrace(fleet, topts);
  const std::vector<bool> feasible = FeasibleJobs(fleet, trace);
  SimOptions sopts;
  sopts.seed = seed;
  std::vector<SimResult> results;
  for (PolicyKind kind : kAllPolicies) {
    Progress("replaying under %s", PolicyName(kind));
    results.push_back(Replay(fleet, trace, feasible, kind, sopts));
  }
  // The same comparison on further traces (other seeds): summary only.
  // seed_results[i][p]: trace seed + i, policy p.
  std::vector<std::vector<SimResult>> seed_results = {results};
  const int replay_seeds = absl::GetFlag(FLAGS_replay_seeds) > 0
                               ? absl::GetFlag(FLAGS_replay_seeds)
                               : (quick ? 1 : 3);
  for (int k = 1; k < replay_seeds; ++k) {
    TraceOptions other = topts;
    other.seed = seed + k;
    const std::vector<Job> t = GenerateTrace(fleet, other);
    const std::vector<bool> f = FeasibleJobs(fleet, t);
    SimOptions so = sopts;
    so.seed = seed + k;
    seed_results.emplace_back();
    for (PolicyKind kind : kAllPolicies) {
      Progress("trace seed %d: replaying under %s", seed + k, PolicyName(kind));
      seed_results.back().push_back(Replay(fleet, t, f, kind, so));
    }
  }
  // 2. Whole-slice batch against the max-flow bound.
  std::vector<BatchComparison> batches;
  const int batch_seeds = absl::GetFlag(FLAGS_batch_seeds) > 0
                              ? absl::GetFlag(FLAGS_batch_seeds)
                              : (quick ? 3 : 7);
  for (int b = 0; b < batch_seeds; ++b) {
    Progress("whole-slice batch %d/%d", b + 1, batch_seeds);
    const std::vector<Job> batch = GenerateSliceBatch(
        fleet, seed + b, absl::GetFlag(FLAGS_batch_oversubscription));
    batches.push_back(CompareSliceBatch(fleet, batch, seed + b));
  }
  // 3. Solver latency scaling.
  std::vector<ScalingPoint> scaling;
  for (int64_t n : scaling_sizes) {
    Progress("solver latency at %d nodes", n);
    scaling.push_back(MeasureSolver(n, seed));
  }
  Progress("%s", "");

  int64_t fleet_slices = 0;
  for (const auto& s : fleet.shapes) fleet_slices += s.slices;
  const double horizon_h = trace.empty() ? 0 : (trace.back().arrival_s - trace.front().arrival_s) / 3600;

  // JSON.
  JsonWriter j;
  j.BeginObject();
  j.Key("fleet").BeginObject().Key("nodes").Number(nodes).Key("seed").Number(seed)
      .Key("tpu_chips").Number(fleet.tpu_chips).Key("slices").Number(fleet_slices)
      .Key("cpu_nodes").Number(fleet.cpu_nodes).EndObject();
  j.Key("trace").BeginObject().Key("jobs").Number(jobs).Key("load").Number(topts.load)
      .Key("hours").Number(horizon_h).Key("patience_s").Number(sopts.patience_s)
      .Key("scan_limit").Number(sopts.scan_limit).EndObject();
  j.Key("replay").BeginArray();
  for (const SimResult& r : results) {
    j.BeginObject().Key("policy").String(r.policy).Key("utilization").Number(r.utilization)
        .Key("cpu_utilization").Number(r.cpu_utilization)
        .Key("acceptance").Number(r.acceptance).Key("accepted").Number(r.accepted)
        .Key("feasible").Number(r.feasible).Key("wall_s").Number(r.wall_s);
    for (const auto& [key, by] : {std::pair{"wait_by_kind", &r.wait_by_kind},
                                  std::pair{"wait_by_size", &r.wait_by_size}}) {
      j.Key(key).BeginObject();
      for (const auto& [name, w] : *by) {
        j.Key(name).BeginObject().Key("placed").Number(w.placed).Key("feasible")
            .Number(w.feasible).Key("mean_s").Number(w.mean_s).Key("p99_s")
            .Number(w.p99_s).EndObject();
      }
      j.EndObject();
    }
    j.Key("fragmentation").BeginArray();
    for (const auto& f : r.fragmentation) {
      j.BeginObject().Key("shape").String(f.shape).Key("slices").Number(f.slices)
          .Key("mean_whole_free").Number(f.mean_whole_free)
          .Key("stranded").Number(f.stranded).EndObject();
    }
    j.EndArray().Key("series").BeginArray();
    for (const auto& s : r.series) {
      j.BeginObject().Key("t_s").Number(s.t_s).Key("utilization").Number(s.utilization)
          .Key("queued").Number(s.queued).Key("mean_wait_s").Number(s.mean_wait_s)
          .EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray();
  j.Key("replay_seeds").BeginArray();
  for (size_t k = 0; k < seed_results.size(); ++k) {
    j.BeginObject().Key("trace_seed").Number(seed + k).Key("results").BeginArray();
    for (const SimResult& r : seed_results[k]) {
      j.BeginObject().Key("policy").String(r.policy).Key("utilization").Number(r.utilization)
          .Key("acceptance").Number(r.acceptance).EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray();
  j.Key("slice_batches").BeginArray();
  for (size_t b = 0; b < batches.size(); ++b) {
    const BatchComparison& cmp = batches[b];
    j.BeginObject().Key("seed").Number(seed + b).Key("jobs").Number(cmp.jobs)
        .Key("slices_asked").Number(cmp.slices_asked)
        .Key("bound_slices").Number(cmp.bound_slices)
        .Key("bound_chips").Number(cmp.bound_chips).Key("results").BeginArray();
    for (const auto& r : cmp.results) {
      j.BeginObject().Key("policy").String(r.policy).Key("jobs_placed").Number(r.jobs_placed)
          .Key("slices_placed").Number(r.slices_placed)
          .Key("chips_placed").Number(r.chips_placed).EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray();
  j.Key("solver_scaling").BeginArray();
  for (const auto& p : scaling) {
    j.BeginObject().Key("nodes").Number(p.nodes).Key("slices").Number(p.slices)
        .Key("build_ms").Number(p.build_ms).Key("fill").Number(p.fill)
        .Key("kinds").BeginArray();
    for (const auto& k : p.kinds) {
      j.BeginObject().Key("kind").String(k.kind).Key("p50_us").Number(k.p50_us)
          .Key("p99_us").Number(k.p99_us).Key("wall_p99_us").Number(k.wall_p99_us)
          .Key("decisions").Number(k.decisions).Key("placed").Number(k.placed)
          .Key("placed_p50_us").Number(k.placed_p50_us)
          .Key("placed_p99_us").Number(k.placed_p99_us)
          .Key("unplaced_p50_us").Number(k.unplaced_p50_us)
          .Key("unplaced_p99_us").Number(k.unplaced_p99_us).EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray().EndObject();

  // SVG: utilization and wait over time per policy.
  SvgPanel util{"TPU utilization (%)", {}}, wait{"mean wait of started jobs (min)", {}};
  for (const SimResult& r : results) {
    SvgSeries u{r.policy, {}, {}}, w{r.policy, {}, {}};
    for (const auto& s : r.series) {
      u.x.push_back(s.t_s / 3600);
      u.y.push_back(100 * s.utilization);
      w.x.push_back(s.t_s / 3600);
      w.y.push_back(s.mean_wait_s / 60);
    }
    util.series.push_back(std::move(u));
    wait.series.push_back(std::move(w));
  }
  const std::string svg = RenderSvg(
      absl::StrFormat("Trace replay: %d nodes, %d jobs, seed %d", nodes, jobs, seed),
      "simulated time (h)", {util, wait});

  // Markdown: quality.
  std::string md = absl::StrFormat(
      "Fleet: %d nodes (%d CPU nodes, %d slices, %d TPU chips; v4/v5p/v5e/v6e/v7x, "
      "4 zones, 4 tiers), seed %d. Trace: %d jobs over %.1f simulated hours, "
      "Poisson arrivals at %.0f %% offered TPU load; patience %.0f h; the whole "
      "queue is scanned (priority, then arrival; backfill) after every "
      "completion.\n\n",
      nodes, fleet.cpu_nodes, fleet_slices, fleet.tpu_chips, seed, jobs, horizon_h,
      100 * topts.load, sopts.patience_s / 3600);
  md += "| policy | TPU utilization | CPU utilization | acceptance | accepted / feasible | replay wall time |\n"
        "| --- | --- | --- | --- | --- | --- |\n";
  for (const SimResult& r : results) {
    absl::StrAppendFormat(&md, "| %s | %s | %s | %s | %d / %d | %.1f s |\n", r.policy,
                          Pct(r.utilization), Pct(r.cpu_utilization), Pct(r.acceptance),
                          r.accepted, r.feasible, r.wall_s);
  }
  // Wait tables: per job kind and per job size.
  auto wait_table = [&](const std::string& what, const std::vector<std::string>& columns,
                        auto by) {
    md += "\nWait in minutes of placed jobs (mean / p99) and acceptance, per " + what +
          ":\n\n| policy |";
    for (const auto& c : columns) md += " " + c + " |";
    md += "\n| --- |";
    for (size_t c = 0; c < columns.size(); ++c) md += " --- |";
    md += "\n";
    for (const SimResult& r : results) {
      md += "| " + r.policy + " |";
      for (const auto& c : columns) {
        const auto& m = by(r);
        auto it = m.find(c);
        if (it == m.end()) {
          md += " – |";
          continue;
        }
        const WaitStats& w = it->second;
        absl::StrAppendFormat(&md, " %s / %s (%s) |", Minutes(w.mean_s), Minutes(w.p99_s),
                              Pct(w.feasible ? double(w.placed) / w.feasible : 0));
      }
      md += "\n";
    }
  };
  wait_table("job kind", {"cpu", "tpu-bundles", "slice", "multi-slice"},
             [](const SimResult& r) -> const auto& { return r.wait_by_kind; });
  wait_table("job size (TPU chips)",
             std::vector<std::string>(std::begin(kSizeClasses), std::end(kSizeClasses)),
             [](const SimResult& r) -> const auto& { return r.wait_by_size; });
  md += "\nFragmentation per shape, time averages over the samples: whole free "
        "intact slices, and the Slurm-style cost = free chips outside whole free "
        "slices ÷ free chips of that shape (0 = every free chip is usable by a "
        "whole-slice request):\n\n| shape | slices |";
  for (const SimResult& r : results) md += " whole free " + r.policy + " |";
  for (const SimResult& r : results) md += " cost " + r.policy + " |";
  md += "\n| --- | --- |";
  for (size_t k = 0; k < 2 * results.size(); ++k) md += " --- |";
  md += "\n";
  for (size_t f = 0; f < results[0].fragmentation.size(); ++f) {
    absl::StrAppendFormat(&md, "| %s | %d |", results[0].fragmentation[f].shape,
                          results[0].fragmentation[f].slices);
    for (const SimResult& r : results) {
      absl::StrAppendFormat(&md, " %.1f |", r.fragmentation[f].mean_whole_free);
    }
    for (const SimResult& r : results) {
      absl::StrAppendFormat(&md, " %.3f |", r.fragmentation[f].stranded);
    }
    md += "\n";
  }
  absl::StrAppendFormat(
      &md,
      "\nWhole-slice batches: %d seeds, each a batch of single- and multi-slice "
      "jobs (20 %% with a zone selector, 30 %% cost-optimized) asking for %.1f× "
      "the fleet's slices, all at t = 0, each job tried once in priority order. "
      "The bound is a max flow per shape: jobs → the (tier, zone) pools their "
      "selector and compute class allow → free slices; it relaxes gang "
      "atomicity, so it is an upper bound (exact when every job is one "
      "slice). Gap = 1 − chips placed ÷ bound, per seed; median first.\n\n"
      "| policy | gap to bound (chips) | slices placed / bound, all seeds |\n"
      "| --- | --- | --- |\n",
      static_cast<int>(batches.size()), absl::GetFlag(FLAGS_batch_oversubscription));
  for (size_t p = 0; p < std::size(kAllPolicies); ++p) {
    std::vector<double> gaps;
    std::vector<std::string> each;
    int64_t placed = 0, bound = 0;
    for (const BatchComparison& cmp : batches) {
      const BatchResult& r = cmp.results[p];
      gaps.push_back(cmp.bound_chips ? 1.0 - double(r.chips_placed) / cmp.bound_chips : 0);
      each.push_back(absl::StrFormat("%.1f", 100 * gaps.back()));
      placed += r.slices_placed;
      bound += cmp.bound_slices;
    }
    absl::StrAppendFormat(&md, "| %s | **%s** (%s %%) | %d / %d |\n",
                          PolicyName(kAllPolicies[p]), Pct(Median(gaps)),
                          absl::StrJoin(each, ", "), placed, bound);
  }
  if (seed_results.size() > 1) {
    absl::StrAppendFormat(&md,
                          "\nThe same comparison on %d traces (seeds %d–%d, same fleet): "
                          "TPU utilization and acceptance per trace, median first.\n\n"
                          "| policy | TPU utilization | acceptance |\n| --- | --- | --- |\n",
                          seed_results.size(), seed, seed + seed_results.size() - 1);
    for (size_t p = 0; p < std::size(kAllPolicies); ++p) {
      std::vector<double> u, a;
      std::vector<std::string> us, as;
      for (const auto& per_seed : seed_results) {
        u.push_back(per_seed[p].utilization);
        a.push_back(per_seed[p].acceptance);
        us.push_back(absl::StrFormat("%.1f", 100 * u.back()));
        as.push_back(absl::StrFormat("%.1f", 100 * a.back()));
      }
      absl::StrAppendFormat(&md, "| %s | **%s** (%s %%) | **%s** (%s %%) |\n",
                            PolicyName(kAllPolicies[p]), Pct(Median(u)),
                            absl::StrJoin(us, ", "), Pct(Median(a)), absl::StrJoin(as, ", "));
    }
  }
  md += "\n![utilization and wait over time per policy](results/quality.svg)\n";

  // Markdown: solver scaling.
  std::string sc =
      "Solve() on the generated fleet, filled to about half its chips by trace "
      "jobs the solver placed; then up to 4,000 further trace requests are "
      "decided (not committed). Times are this thread's CPU time per decision "
      "(the solver's own cost; wall-clock p99 on shared cores adds "
      "preemption, shown last). \"Not placed\" decisions (Unschedulable now, "
      "or Infeasible) include building the diagnosis.\n\n"
      "| nodes | slices | Build | kind | decisions (placed) | all p50 / p99 µs | placed p50 / p99 | not placed p50 / p99 | wall p99 |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& p : scaling) {
    for (const auto& k : p.kinds) {
      absl::StrAppendFormat(&sc, "| %d | %d | %.0f ms | %s | %d (%d) | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.0f |\n",
                            p.nodes, p.slices, p.build_ms, k.kind, k.decisions, k.placed,
                            k.p50_us, k.p99_us, k.placed_p50_us, k.placed_p99_us,
                            k.unplaced_p50_us, k.unplaced_p99_us, k.wall_p99_us);
    }
  }

  if (!WriteOutputs(out_dir, {{"sim.json", j.str() + "\n"},
                              {"quality.svg", svg},
                              {"sim_quality.md", md},
                              {"sim_scaling.md", sc}})) {
    return 1;
  }
  std::printf("%s\n%s", md.c_str(), sc.c_str());
  if (absl::GetFlag(FLAGS_check) && !Sane(seed_results, batches)) return 1;
  return 0;
}

}  // namespace
}  // namespace sliced::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return sliced::bench::Main();
}
