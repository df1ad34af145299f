// Trace generator; see trace.h.
#include "bench/gen/trace.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/rng.h"

namespace sliced::bench {
namespace {

using scheduler::kResourceScale;

scheduler::LabelSelector Selector(absl::string_view key, absl::string_view value) {
  auto s = scheduler::ParseLabelSelector({{std::string(key), std::string(value)}});
  if (!s.ok()) std::abort();  // constant keys and values
  return *std::move(s);
}

// Picks a shape weighted by the chips the fleet has of it; multi-slice jobs
// only among shapes with at least two slices.
const FleetShape& PickShape(const Fleet& fleet, Rng& rng, bool multi) {
  std::vector<double> w;
  for (const FleetShape& s : fleet.shapes) {
    w.push_back(multi && s.slices < 2 ? 0.0 : double(s.slices * s.shape.chips));
  }
  return fleet.shapes[rng.Weighted(w)];
}

void MakeSliceJob(const Fleet& fleet, Rng& rng, bool multi, Job& job) {
  const FleetShape& fs = PickShape(fleet, rng, multi);
  scheduler::SliceRequirement slice;
  slice.generation = fs.shape.generation;
  slice.topology = fs.shape.topology;
  slice.num_slices =
      multi ? static_cast<int>(rng.Int(2, std::min<int64_t>(4, std::max<int64_t>(2, fs.slices / 4))))
            : 1;
  if (rng.Bernoulli(0.2)) {
    slice.selector = Selector(scheduler::kLabelZone, kZones[rng.Int(0, 1)]);
  }
  job.kind = multi ? JobKind::kMultiSlice : JobKind::kSlice;
  job.chips = fs.shape.chips * slice.num_slices;
  job.shape = absl::StrCat(fs.shape.pod_type, " x", slice.num_slices);
  job.request.slice = std::move(slice);
}

double Hours(double h) { return h * 3600; }

// A shape of the fleet with one host (`single`) or several, weighted by the
// chips the fleet has of it; with `multi`, only shapes with two slices.
const FleetShape& PickByHosts(const Fleet& fleet, Rng& rng, bool single, bool multi) {
  std::vector<double> w;
  for (const FleetShape& s : fleet.shapes) {
    const bool ok = (s.shape.hosts == 1) == single && (!multi || s.slices >= 2);
    w.push_back(ok ? double(s.slices * s.shape.chips) : 0.0);
  }
  return fleet.shapes[rng.Weighted(w)];
}

// One job of the mixed trace (kind, request, chips, shape, duration).
void MakeMixedJob(const Fleet& fleet, Rng& rng, Job& job) {
  const double u = rng.Uniform();
  if (u < 0.45) {  // CPU gang: 1-8 bundles of 4-32 CPUs
    const int64_t n = int64_t{1} << rng.Int(0, 3), cpu = int64_t{4} << rng.Int(0, 3);
    for (int64_t b = 0; b < n; ++b) {
      job.request.bundles.push_back({{{"CPU", cpu * kResourceScale}}, {}, ""});
    }
    job.request.strategy =
        rng.Bernoulli(0.5) ? scheduler::Strategy::kPack : scheduler::Strategy::kSpread;
    job.kind = JobKind::kCpu;
    job.shape = absl::StrCat(n, " x {CPU: ", cpu, "}");
    job.duration_s = rng.LogNormal(1200, 1.0);
    return;
  }
  if (u < 0.50) {  // generic TPU bundles, PACK: 1-2 x {TPU: 4, CPU: 8}
    const int64_t n = rng.Int(1, 2);
    for (int64_t b = 0; b < n; ++b) {
      job.request.bundles.push_back(
          {{{"TPU", 4 * kResourceScale}, {"CPU", 8 * kResourceScale}}, {}, ""});
    }
    job.request.strategy = scheduler::Strategy::kPack;
    job.kind = JobKind::kTpuBundles;
    job.chips = 4 * n;
    job.shape = absl::StrCat(n, " x {TPU: 4, CPU: 8}");
    job.duration_s = rng.LogNormal(2400, 1.0);
    return;
  }
  const bool single = u < 0.75, multi = u >= 0.97;
  const FleetShape& fs = PickByHosts(fleet, rng, single, multi);
  scheduler::SliceRequirement slice;
  slice.generation = fs.shape.generation;
  slice.topology = fs.shape.topology;
  slice.num_slices = multi ? 2 : 1;
  job.kind = single ? JobKind::kSingleHost : (multi ? JobKind::kMultiSlice : JobKind::kSlice);
  job.chips = fs.shape.chips * slice.num_slices;
  job.shape = absl::StrCat(fs.shape.pod_type, " x", slice.num_slices);
  job.request.slice = std::move(slice);
  job.duration_s = single ? rng.LogNormal(Hours(1), 1.0)
                          : rng.LogNormal(Hours(multi ? 3 : 2), 0.8);
}

}  // namespace

const char* JobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kCpu: return "cpu";
    case JobKind::kTpuBundles: return "tpu-bundles";
    case JobKind::kSlice: return "slice";
    case JobKind::kMultiSlice: return "multi-slice";
    case JobKind::kSingleHost: return "single-host";
  }
  return "?";
}

std::vector<scheduler::LabelSelector> ComputeClassPriorities(
    absl::string_view name) {
  if (name != "cost-optimized") return {};
  std::vector<scheduler::LabelSelector> out;
  for (const char* tier : {"spot", "flex-start", "reserved"}) {
    out.push_back(Selector(scheduler::kLabelCapacityTier, tier));
  }
  return out;
}

std::vector<Job> GenerateTrace(const Fleet& fleet, const TraceOptions& options) {
  Rng rng(options.seed * 0x2545f4914f6cdd1dULL + 7);
  std::vector<Job> jobs(options.jobs);
  double chip_seconds = 0;
  for (int64_t i = 0; i < options.jobs; ++i) {
    Job& job = jobs[i];
    job.id = i;
    const double u = rng.Uniform();
    if (u < 0.35) {  // CPU gang: 1-4 bundles of 1-8 CPUs
      const int64_t n = rng.Int(1, 4), cpu = int64_t{1} << rng.Int(0, 3);
      for (int64_t b = 0; b < n; ++b) {
        job.request.bundles.push_back(
            {{{"CPU", cpu * kResourceScale}}, {}, ""});
      }
      job.request.strategy = rng.Bernoulli(0.5) ? scheduler::Strategy::kPack
                                                : scheduler::Strategy::kSpread;
      job.kind = JobKind::kCpu;
      job.shape = absl::StrCat(n, " x {CPU: ", cpu, "}");
      job.duration_s = rng.LogNormal(600, 1.0);
    } else if (u < 0.50) {  // generic TPU bundles, PACK: 1-8 x {TPU: 1|4}
      const int64_t n = int64_t{1} << rng.Int(0, 3);
      const int64_t tpu = rng.Bernoulli(0.5) ? 1 : 4;
      for (int64_t b = 0; b < n; ++b) {
        job.request.bundles.push_back(
            {{{"TPU", tpu * kResourceScale}, {"CPU", kResourceScale}}, {}, ""});
      }
      job.request.strategy = scheduler::Strategy::kPack;
      job.kind = JobKind::kTpuBundles;
      job.chips = n * tpu;
      job.shape = absl::StrCat(n, " x {TPU: ", tpu, "}");
      job.duration_s = rng.LogNormal(1200, 1.0);
    } else if (u < 0.93) {
      MakeSliceJob(fleet, rng, /*multi=*/false, job);
      job.duration_s = rng.LogNormal(Hours(1), 1.0);
    } else {
      MakeSliceJob(fleet, rng, /*multi=*/true, job);
      job.duration_s = rng.LogNormal(Hours(3), 0.8);
    }
    job.duration_s = std::clamp(job.duration_s, 30.0, Hours(48));
    const double p = rng.Uniform();
    job.priority = p < 0.7 ? 0 : (p < 0.95 ? 1 : 2);
    if (job.kind != JobKind::kCpu && rng.Bernoulli(0.3)) {
      job.compute_class = "cost-optimized";
      job.request.priorities = ComputeClassPriorities(job.compute_class);
    }
    chip_seconds += job.chips * job.duration_s;
  }
  // Poisson arrivals at the rate that offers `load` x the fleet's chips.
  const double mean_gap = chip_seconds / options.jobs /
                          (options.load * std::max<int64_t>(1, fleet.tpu_chips));
  double t = 0;
  for (Job& job : jobs) {
    t += rng.Exponential(mean_gap);
    job.arrival_s = t;
  }
  return jobs;
}

std::vector<Job> GenerateMixedTrace(const Fleet& fleet, const TraceOptions& options) {
  Rng rng(options.seed * 0x9fb21c651e98df25ULL + 11);
  std::vector<Job> jobs(options.jobs);
  // Offered work per pool: 0 multi-host chips, 1 single-host chips (slices
  // and generic TPU bundles), 2 CPU of the CPU gangs.
  double offered[3] = {0, 0, 0};
  auto pool = [](const Job& job) {
    return job.kind == JobKind::kCpu ? 2
           : (job.kind == JobKind::kSlice || job.kind == JobKind::kMultiSlice) ? 0 : 1;
  };
  for (int64_t i = 0; i < options.jobs; ++i) {
    Job& job = jobs[i];
    job.id = i;
    MakeMixedJob(fleet, rng, job);
    job.duration_s = std::clamp(job.duration_s, 30.0, Hours(48));
    const double p = rng.Uniform();
    job.priority = p < 0.7 ? 0 : (p < 0.95 ? 1 : 2);
    double size = static_cast<double>(job.chips);
    if (job.kind == JobKind::kCpu) {
      size = 0;
      for (const auto& b : job.request.bundles) {
        size += double(b.resources.at("CPU")) / kResourceScale;
      }
    }
    offered[pool(job)] += size * job.duration_s;
  }
  // What each pool holds: chips of multi-host and single-host slices, CPU of
  // the CPU-only nodes.
  double capacity[3] = {0, 0, 0};
  for (const FleetShape& s : fleet.shapes) {
    capacity[s.shape.hosts > 1 ? 0 : 1] += double(s.slices * s.shape.chips);
  }
  for (const scheduler::Node& n : fleet.nodes) {
    if (n.resources.find("TPU") != n.resources.end()) continue;
    auto it = n.resources.find("CPU");
    if (it != n.resources.end()) capacity[2] += double(it->second) / kResourceScale;
  }
  // The arrival rate offers `load` x the multi-host chips; durations of the
  // other pools are scaled to offer `load` x the single-host chips and
  // `cpu_load` x the CPU nodes' CPU.
  const double mean_gap = offered[0] / options.jobs / (options.load * std::max(1.0, capacity[0]));
  const double target[3] = {options.load * capacity[0], options.load * capacity[1],
                            options.cpu_load * capacity[2]};
  double scale[3];
  for (int k = 0; k < 3; ++k) {
    const double rate = offered[k] / (options.jobs * mean_gap);
    scale[k] = rate > 0 ? target[k] / rate : 1;
  }
  double t = 0;
  for (Job& job : jobs) {
    job.duration_s = std::clamp(job.duration_s * scale[pool(job)], 30.0, Hours(48));
    t += rng.Exponential(mean_gap);
    job.arrival_s = t;
  }
  return jobs;
}

std::vector<Job> GenerateSliceBatch(const Fleet& fleet, uint64_t seed,
                                    double oversubscription) {
  Rng rng(seed * 0x9e3779b97f4a7c15ULL + 3);
  int64_t fleet_slices = 0;
  for (const FleetShape& s : fleet.shapes) fleet_slices += s.slices;
  const int64_t target = static_cast<int64_t>(fleet_slices * oversubscription);
  std::vector<Job> jobs;
  int64_t asked = 0;
  while (asked < target) {
    Job job;
    job.id = static_cast<int64_t>(jobs.size());
    MakeSliceJob(fleet, rng, /*multi=*/rng.Bernoulli(0.2), job);
    job.duration_s = Hours(1);
    job.priority = rng.Bernoulli(0.2) ? 1 : 0;
    if (rng.Bernoulli(0.3)) {
      job.compute_class = "cost-optimized";
      job.request.priorities = ComputeClassPriorities(job.compute_class);
    }
    asked += job.request.slice->num_slices;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

uint64_t Fingerprint(const std::vector<Job>& jobs) {
  Fnv fnv;
  auto mix = [&fnv](absl::string_view s) { fnv.Mix(s); };
  for (const Job& j : jobs) {
    mix(absl::StrFormat("%d %.6f %.6f %d %s %s %d", j.id, j.arrival_s,
                        j.duration_s, j.priority, j.compute_class, j.shape,
                        j.request.bundles.size()));
    if (j.request.slice) mix(SelectorToString(j.request.slice->selector));
  }
  return fnv.hash();
}

}  // namespace sliced::bench
