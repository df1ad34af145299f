// Placement-quality simulator; see sim.h.
#include "bench/sim/sim.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <set>
#include <tuple>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "bench/common/stats.h"
#include "bench/sim/sim_util.h"
#include "scheduler/solver.h"

namespace sliced::bench {
namespace {

using scheduler::InventorySnapshot;
using scheduler::LabelSelector;
using scheduler::ResourceSet;

using sim_util::Die;
using sim_util::Get;

std::shared_ptr<const InventorySnapshot> BuildEmpty(const Fleet& fleet) {
  auto snap = InventorySnapshot::Build(fleet.nodes, {});
  if (!snap.ok()) Die(snap.status().ToString());
  return *std::move(snap);
}

std::string PgId(const Job& job) { return absl::StrCat("job-", job.id); }

// Jobs with equal signatures make identical requests.
std::string Signature(const Job& job) {
  return absl::StrCat(job.shape, "|", job.compute_class, "|",
                      static_cast<int>(job.request.strategy), "|",
                      job.request.slice ? SelectorToString(job.request.slice->selector) : "");
}

// Applies a placement; dies on an engine error (a policy bug).
std::shared_ptr<const InventorySnapshot> Commit(
    const InventorySnapshot& snap, const Job& job, const Placement& p) {
  scheduler::SnapshotDelta delta;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    delta.add_allocations.push_back({PgId(job), static_cast<int>(i),
                                     snap.node(p.nodes[i]).node.node_id,
                                     p.resources[i]});
  }
  auto next = snap.Apply(delta);
  if (!next.ok()) Die(absl::StrCat("job ", job.id, ": ", next.status().ToString()));
  return *std::move(next);
}

// TPU chips held on the hosts of slice `s`.
int64_t TpuHeld(const InventorySnapshot& snap, int32_t s) {
  int64_t held = 0;
  for (uint32_t h : snap.HostIndexes(snap.slice(s))) {
    held += Get(snap.node(h).node.resources, "TPU") - Get(snap.node(h).free, "TPU");
  }
  return held;
}

}  // namespace

const char* const kCpuBundleClasses[kNumCpuBundleClasses] = {
    "CPU node", "single-host, TPU held", "single-host, CPU work only",
    "free single-host", "multi-host, TPU held", "multi-host, CPU work only",
    "free multi-host"};

int CpuBundleClass(const InventorySnapshot& snap, uint32_t node) {
  const InventorySnapshot::NodeEntry& e = snap.node(node);
  const int32_t s = snap.SliceIndexOf(e);
  if (!e.tpu || s < 0) return 0;
  const int base = e.single_host ? 1 : 4;
  if (snap.slice(s).free()) return base + 2;
  return TpuHeld(snap, s) > 0 ? base : base + 1;
}

namespace {

int64_t Sum(const Placement& p, absl::string_view resource) {
  int64_t total = 0;
  for (const ResourceSet& r : p.resources) total += Get(r, resource);
  return total;
}

// Dinic's max flow on a small graph.
class MaxFlow {
 public:
  explicit MaxFlow(int n) : adj_(n), level_(n), it_(n) {}
  void AddEdge(int from, int to, int64_t cap) {
    adj_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, cap});
    adj_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
  }
  int64_t Run(int s, int t) {
    int64_t flow = 0;
    while (Bfs(s, t)) {
      std::fill(it_.begin(), it_.end(), 0);
      while (int64_t f = Dfs(s, t, INT64_MAX)) flow += f;
    }
    return flow;
  }

 private:
  struct Edge {
    int to;
    int64_t cap;
  };
  bool Bfs(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> q;
    level_[s] = 0;
    q.push(s);
    while (!q.empty()) {
      const int v = q.front();
      q.pop();
      for (int e : adj_[v]) {
        if (edges_[e].cap > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[v] + 1;
          q.push(edges_[e].to);
        }
      }
    }
    return level_[t] >= 0;
  }
  int64_t Dfs(int v, int t, int64_t f) {
    if (v == t) return f;
    for (; it_[v] < static_cast<int>(adj_[v].size()); ++it_[v]) {
      const int e = adj_[v][it_[v]];
      Edge& edge = edges_[e];
      if (edge.cap <= 0 || level_[edge.to] != level_[v] + 1) continue;
      if (int64_t d = Dfs(edge.to, t, std::min(f, edge.cap))) {
        edge.cap -= d;
        edges_[e ^ 1].cap += d;
        return d;
      }
    }
    return 0;
  }
  std::vector<Edge> edges_;
  std::vector<std::vector<int>> adj_;
  std::vector<int> level_, it_;
};

}  // namespace

const char* const kSizeClasses[5] = {"0 (CPU)", "1-8 chips", "9-64 chips",
                                     "65-256 chips", ">256 chips"};

const char* SizeClass(const Job& job) {
  if (job.chips == 0) return kSizeClasses[0];
  if (job.chips <= 8) return kSizeClasses[1];
  if (job.chips <= 64) return kSizeClasses[2];
  if (job.chips <= 256) return kSizeClasses[3];
  return kSizeClasses[4];
}

std::vector<bool> FeasibleJobs(const Fleet& fleet, const std::vector<Job>& jobs) {
  auto snap = BuildEmpty(fleet);
  std::vector<bool> out;
  out.reserve(jobs.size());
  for (const Job& job : jobs) {
    out.push_back(scheduler::Solve(*snap, job.request).outcome ==
                  scheduler::Decision::kPlaced);
  }
  return out;
}

SimResult Replay(const Fleet& fleet, const std::vector<Job>& trace,
                 const std::vector<bool>& feasible, PolicyKind kind,
                 const SimOptions& options) {
  auto policy = MakePolicy(kind, options.seed);
  return ReplayWith(fleet, trace, feasible, *policy, PolicyName(kind), options);
}

SimResult ReplayWith(const Fleet& fleet, const std::vector<Job>& trace,
                     const std::vector<bool>& feasible, Policy& policy,
                     absl::string_view name, const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  SimResult result;
  result.policy = std::string(name);
  auto snap = BuildEmpty(fleet);

  int64_t total_cpu = 0;
  for (const auto& n : fleet.nodes) total_cpu += Get(n.resources, "CPU");
  const double total_chips = std::max<int64_t>(1, fleet.tpu_chips) * double(scheduler::kResourceScale);
  int64_t used_chips = 0, used_cpu = 0;

  const double horizon = trace.empty() ? 0 : trace.back().arrival_s;
  const double start = trace.empty() ? 0 : trace.front().arrival_s;
  using QueueKey = std::tuple<int, double, int64_t>;  // -priority, arrival, id
  std::set<QueueKey> queue;
  using Completion = std::pair<double, int64_t>;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> running;
  std::vector<Placement> placed(trace.size());
  std::map<std::string, std::vector<double>> waits, size_waits;
  std::vector<double> window_waits, all_waits;
  double chip_time = 0, cpu_time = 0;
  size_t next_arrival = 0;
  int next_sample = 0;
  bool freed_at_t = false;
  std::vector<bool> arrived(trace.size(), false);
  absl::flat_hash_set<std::string> failed;
  std::vector<std::string> signatures;
  for (const Job& job : trace) signatures.push_back(Signature(job));
  double t = start;

  // Per-shape fragmentation sums over the samples.
  struct FragSum {
    int64_t slices = 0;
    double whole_free = 0, stranded = 0;
  };
  std::map<std::string, FragSum> frag;
  double blocked_sum = 0;  // chips of slices held by CPU-only work alone
  double probe_sum = 0;
  auto sample = [&](double at) {
    SimSample s;
    s.t_s = at - start;
    s.utilization = used_chips / total_chips;
    s.cpu_utilization = total_cpu ? double(used_cpu) / total_cpu : 0;
    s.queued = static_cast<int64_t>(queue.size());
    s.mean_wait_s = Mean(window_waits);
    window_waits.clear();
    result.series.push_back(s);
    if (options.probe) probe_sum += options.probe(*snap);
    std::map<std::string, std::tuple<int64_t, int64_t, int64_t, int64_t>> now;
    for (uint32_t i = 0; i < snap->num_slices(); ++i) {
      const InventorySnapshot::SliceEntry& e = snap->slice(i);
      if (!e.shape_known) continue;
      auto& [slices, whole, free_chips, whole_chips] = now[e.shape.pod_type];
      ++slices;
      int64_t chips = 0;
      for (uint32_t h : snap->HostIndexes(e)) chips += Get(snap->node(h).free, "TPU");
      free_chips += chips;
      if (!e.free() && chips == e.shape.chips * scheduler::kResourceScale) {
        blocked_sum += e.shape.chips;
      }
      if (e.info.intact && e.free()) {
        ++whole;
        whole_chips += chips;
      }
    }
    for (const auto& [shape, v] : now) {
      const auto& [slices, whole, free_chips, whole_chips] = v;
      FragSum& f = frag[shape];
      f.slices = slices;
      f.whole_free += whole;
      f.stranded += free_chips ? 1.0 - double(whole_chips) / free_chips : 0.0;
    }
  };

  while (true) {
    double t_next = std::numeric_limits<double>::infinity();
    if (next_arrival < trace.size()) t_next = trace[next_arrival].arrival_s;
    if (!running.empty()) t_next = std::min(t_next, running.top().first);
    if (!std::isfinite(t_next)) break;
    // Samples fall at evenly spaced times over the arrival window.
    while (next_sample < options.samples &&
           start + (horizon - start) * next_sample / (options.samples - 1) <= t_next) {
      sample(start + (horizon - start) * next_sample / (options.samples - 1));
      ++next_sample;
    }
    const double until = std::min(t_next, horizon);
    if (until > t) {
      chip_time += used_chips * (until - t);
      cpu_time += used_cpu * (until - t);
    }
    t = t_next;
    while (!running.empty() && running.top().first <= t) {
      const Job& job = trace[running.top().second];
      running.pop();
      scheduler::SnapshotDelta delta;
      delta.release_pg_ids.push_back(PgId(job));
      auto next = snap->Apply(delta);
      if (!next.ok()) Die(next.status().ToString());
      snap = *std::move(next);
      used_chips -= Sum(placed[job.id], "TPU");
      used_cpu -= Sum(placed[job.id], "CPU");
      freed_at_t = true;
    }
    bool freed = false;  // set above when a job completed at t
    freed = freed_at_t;
    freed_at_t = false;
    while (next_arrival < trace.size() && trace[next_arrival].arrival_s <= t) {
      const Job& job = trace[next_arrival++];
      if (feasible[job.id]) {
        queue.insert({-job.priority, job.arrival_s, job.id});
        arrived[job.id] = true;
      }
    }
    // Nothing freed: only the newcomers can fit (everyone else already
    // failed on this state). A shape that failed is not tried again in the
    // same pass: placements only take capacity away.
    failed.clear();
    int tries = 0;
    for (auto it = queue.begin(); it != queue.end();) {
      const Job& job = trace[std::get<2>(*it)];
      if (t - job.arrival_s > options.patience_s) {
        it = queue.erase(it);
        continue;
      }
      const bool newcomer = arrived[job.id];
      arrived[job.id] = false;
      if ((!freed && !newcomer) || failed.contains(signatures[job.id]) ||
          (options.scan_limit > 0 && tries >= options.scan_limit)) {
        ++it;
        continue;
      }
      ++tries;
      Placement p = policy.Place(*snap, job);
      if (p.nodes.empty()) {
        failed.insert(signatures[job.id]);
        ++it;
        continue;
      }
      for (size_t b = 0; b < p.nodes.size(); ++b) {
        if (Get(p.resources[b], "TPU") > 0) continue;
        ++result.cpu_bundles[CpuBundleClass(*snap, p.nodes[b])];
      }
      snap = Commit(*snap, job, p);
      used_chips += Sum(p, "TPU");
      used_cpu += Sum(p, "CPU");
      const double wait = t - job.arrival_s;
      waits[JobKindName(job.kind)].push_back(wait);
      size_waits[SizeClass(job)].push_back(wait);
      window_waits.push_back(wait);
      all_waits.push_back(wait);
      running.push({t + job.duration_s, job.id});
      placed[job.id] = std::move(p);
      ++result.accepted;
      it = queue.erase(it);
    }
  }
  while (next_sample < options.samples) {  // an empty trace
    sample(start);
    ++next_sample;
  }
  const double window = std::max(1e-9, horizon - start);
  result.utilization = chip_time / window / total_chips;
  result.chip_hours = chip_time / double(scheduler::kResourceScale) / 3600;
  result.cpu_utilization = total_cpu ? cpu_time / window / total_cpu : 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!feasible[i]) continue;
    ++result.feasible;
    ++result.wait_by_kind[JobKindName(trace[i].kind)].feasible;
    ++result.wait_by_size[SizeClass(trace[i])].feasible;
  }
  result.acceptance = result.feasible ? double(result.accepted) / result.feasible : 0;
  for (auto [by, from] : {std::pair{&result.wait_by_kind, &waits},
                           std::pair{&result.wait_by_size, &size_waits}}) {
    for (auto& [name, w] : *from) {
      WaitStats& s = (*by)[name];
      s.placed = static_cast<int64_t>(w.size());
      s.mean_s = Mean(w);
      s.p99_s = Percentile(w, 0.99);
    }
  }
  result.blocked_chips = blocked_sum / options.samples;
  result.probe_mean = probe_sum / options.samples;
  result.wait_all = {result.accepted, result.feasible, Mean(all_waits),
                     Percentile(all_waits, 0.99)};
  for (const auto& [shape, f] : frag) {
    result.fragmentation.push_back(
        {shape, f.slices, f.whole_free / options.samples, f.stranded / options.samples});
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                wall_start).count();
  return result;
}

BatchComparison CompareSliceBatch(const Fleet& fleet, const std::vector<Job>& batch,
                                  uint64_t seed) {
  BatchComparison out;
  out.jobs = static_cast<int64_t>(batch.size());
  std::vector<const Job*> order;
  for (const Job& j : batch) {
    order.push_back(&j);
    out.slices_asked += j.request.slice->num_slices;
  }
  std::stable_sort(order.begin(), order.end(), [](const Job* a, const Job* b) {
    return a->priority > b->priority;
  });
  const auto empty = BuildEmpty(fleet);
  for (PolicyKind kind : kAllPolicies) {
    auto policy = MakePolicy(kind, seed);
    auto snap = empty;
    BatchResult r;
    r.policy = PolicyName(kind);
    for (const Job* job : order) {
      Placement p = policy->Place(*snap, *job);
      if (p.nodes.empty()) continue;
      snap = Commit(*snap, *job, p);
      ++r.jobs_placed;
      r.slices_placed += job->request.slice->num_slices;
      r.chips_placed += job->chips;
    }
    out.results.push_back(r);
  }
  // The bound: per shape, source -> job (num_slices) -> (tier, zone) pool it
  // may use -> sink (free intact slices of the pool). Gang atomicity is
  // relaxed, so this is an upper bound (exact for single-slice jobs).
  struct Pool {
    int64_t free = 0;
    const scheduler::Labels* labels = nullptr;  // worker 0 of one slice
  };
  std::map<std::pair<scheduler::TpuGeneration, std::string>, std::vector<Pool>> pools;
  for (const auto& [key, slices] : empty->slices_by_key()) {
    Pool pool;
    for (uint32_t s : slices) {
      const auto& e = empty->slice(s);
      if (!e.info.intact || !e.free()) continue;
      ++pool.free;
      pool.labels = &empty->node(empty->HostIndex(e, 0)).node.labels;
    }
    if (pool.free > 0) pools[{key.generation, key.topology}].push_back(pool);
  }
  for (auto& [shape_key, shape_pools] : pools) {
    std::vector<const Job*> jobs;
    for (const Job& j : batch) {
      if (j.request.slice->generation == shape_key.first &&
          j.request.slice->topology == shape_key.second) {
        jobs.push_back(&j);
      }
    }
    if (jobs.empty()) continue;
    const int n_jobs = static_cast<int>(jobs.size());
    const int n_pools = static_cast<int>(shape_pools.size());
    const int source = 0, sink = 1 + n_jobs + n_pools;
    MaxFlow flow(sink + 1);
    for (int j = 0; j < n_jobs; ++j) {
      const Job& job = *jobs[j];
      flow.AddEdge(source, 1 + j, job.request.slice->num_slices);
      std::vector<LabelSelector> priorities = job.request.priorities;
      if (priorities.empty()) priorities.emplace_back();
      for (int p = 0; p < n_pools; ++p) {
        const scheduler::Labels& labels = *shape_pools[p].labels;
        bool ok = false;
        for (const auto& prio : priorities) ok = ok || scheduler::Matches(prio, labels);
        if (ok && scheduler::Matches(job.request.slice->selector, labels)) {
          flow.AddEdge(1 + j, 1 + n_jobs + p, job.request.slice->num_slices);
        }
      }
    }
    for (int p = 0; p < n_pools; ++p) flow.AddEdge(1 + n_jobs + p, sink, shape_pools[p].free);
    const int64_t slices = flow.Run(source, sink);
    auto shape = scheduler::ResolveTpuShape(shape_key.first, shape_key.second);
    out.bound_slices += slices;
    out.bound_chips += slices * (shape.ok() ? shape->chips : 0);
  }
  return out;
}

double FluidServed(const std::vector<std::pair<double, double>>& work,
                   double chips, double end) {
  double backlog = 0, served = 0, t = work.empty() ? end : work.front().first;
  for (const auto& [arrival, amount] : work) {
    const double until = std::min(arrival, end);
    const double done = std::min(backlog, chips * std::max(0.0, until - t));
    served += done;
    backlog -= done;
    t = std::max(t, until);
    backlog += amount;
  }
  return served + std::min(backlog, chips * std::max(0.0, end - t));
}

double ChipHoursBound(const Fleet& fleet, const std::vector<Job>& trace,
                      const std::vector<bool>& feasible) {
  if (trace.empty()) return 0;
  const double end = trace.back().arrival_s;
  absl::btree_map<std::string, std::vector<std::pair<double, double>>> by_shape;
  std::vector<std::pair<double, double>> all;
  double bundles = 0;
  for (const Job& job : trace) {
    if (!feasible[job.id] || job.chips == 0) continue;
    // No schedule holds a job's chips inside the window longer than from
    // its arrival to the window's end.
    const double amount =
        job.chips * std::min(job.duration_s, end - job.arrival_s);
    all.emplace_back(job.arrival_s, amount);
    const auto shape =
        job.request.slice
            ? scheduler::ResolveTpuShape(job.request.slice->generation,
                                         job.request.slice->topology)
            : absl::InvalidArgumentError("not a slice job");
    if (job.kind == JobKind::kTpuBundles || !shape.ok()) {
      bundles += amount;  // no pool of its own: bounded by all chips only
      continue;
    }
    by_shape[shape->pod_type].emplace_back(job.arrival_s, amount);
  }
  double per_shape = bundles, chips = 0;
  for (const FleetShape& s : fleet.shapes) {
    const double pool = double(s.slices) * s.shape.chips;
    chips += pool;
    auto it = by_shape.find(s.shape.pod_type);
    if (it != by_shape.end()) per_shape += FluidServed(it->second, pool, end);
  }
  return std::min(per_shape, FluidServed(all, chips, end)) / 3600;
}

}  // namespace sliced::bench
