// Solver microbenchmarks (DESIGN §7): slice requests and 1,000-bundle
// selector PGs at 1k, 10k and 100k nodes, and the cost of deriving the next
// snapshot. Snapshots are built once per cluster size, outside the timed
// loops. Per-decision latency percentiles are reported as counters p50_us /
// p99_us (measured per iteration with steady_clock).
//
// Run: build-engine/bench/sliced_solver_bench  (see bench/RESULTS.md)
#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "scheduler/preemption.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"

namespace sliced::scheduler {
namespace {

constexpr const char* kZones[] = {"us-east5-a", "us-east5-b", "us-central1-a",
                                  "europe-west4-a"};
constexpr const char* kTiers[] = {"spot", "on-demand", "reserved"};

Node MakeNode(std::string id, std::string zone, std::string tier) {
  Node n;
  n.node_id = std::move(id);
  n.address = n.node_id + ".internal";
  n.labels = {{std::string(kLabelZone), zone},
              {std::string(kLabelCapacityTier), tier},
              {std::string(kLabelNodeId), n.node_id}};
  return n;
}

// A cluster of `nodes` nodes: 80 % hosts of v6e 4x4 slices (4 hosts each),
// 5 % single-host v6e 2x4 nodes, 15 % CPU nodes; at 100k nodes that is 20k
// multi-host + 5k single-host = 25k slices. About half of the multi-host
// slices are held, and a third of the CPU nodes are half used.
struct Cluster {
  std::shared_ptr<const InventorySnapshot> snapshot;
  std::vector<Allocation> allocations;
};

// The 4 hosts of v6e 4x4 slice `name`.
std::vector<Node> SliceHosts(const std::string& name, const char* zone,
                             const char* tier) {
  std::vector<Node> hosts;
  for (int w = 0; w < 4; ++w) {
    Node n = MakeNode(absl::StrCat(name, "-w", w), zone, tier);
    n.labels[std::string(kLabelAcceleratorType)] = "TPU-V6E";
    n.labels[std::string(kLabelTpuTopology)] = "4x4";
    n.labels[std::string(kLabelTpuSliceName)] = name;
    n.labels[std::string(kLabelTpuWorkerId)] = absl::StrCat(w);
    n.labels[std::string(kLabelTpuPodType)] = "v6e-16";
    n.resources = {{"CPU", 180 * kResourceScale},
                   {"TPU", 4 * kResourceScale},
                   {"memory", int64_t{64'000'000'000} * kResourceScale}};
    if (w == 0) n.resources["TPU-v6e-16-head"] = kResourceScale;
    hosts.push_back(std::move(n));
  }
  return hosts;
}

Cluster MakeCluster(int64_t nodes) {
  std::mt19937 rng(42);
  std::vector<Node> list;
  std::vector<Allocation> allocations;
  const int64_t slices = nodes * 80 / 100 / 4;
  for (int64_t s = 0; s < slices; ++s) {
    const std::string name = absl::StrCat("slice-", s);
    const char* zone = kZones[rng() % 4];
    const char* tier = kTiers[rng() % 3];
    const bool held = rng() % 2 == 0;
    std::vector<Node> hosts = SliceHosts(name, zone, tier);
    for (int w = 0; w < 4; ++w) {
      if (held) {
        allocations.push_back({absl::StrCat("pg-", name),
                               w,
                               hosts[w].node_id,
                               {{"TPU", 4 * kResourceScale}}});
      }
      list.push_back(std::move(hosts[w]));
    }
  }
  for (int64_t i = 0; i < nodes * 5 / 100; ++i) {
    Node n = MakeNode(absl::StrCat("solo-", i), kZones[rng() % 4],
                      kTiers[rng() % 3]);
    n.labels[std::string(kLabelAcceleratorType)] = "TPU-V6E";
    n.labels[std::string(kLabelTpuTopology)] = "2x4";
    n.resources = {{"CPU", 180 * kResourceScale}, {"TPU", 8 * kResourceScale}};
    list.push_back(std::move(n));
  }
  for (int64_t i = static_cast<int64_t>(list.size()); i < nodes; ++i) {
    Node n =
        MakeNode(absl::StrCat("cpu-", i), kZones[rng() % 4], kTiers[rng() % 3]);
    n.resources = {{"CPU", 32 * kResourceScale},
                   {"memory", int64_t{128'000'000'000} * kResourceScale}};
    if (rng() % 3 == 0) {
      allocations.push_back({absl::StrCat("pg-cpu-", i),
                             0,
                             n.node_id,
                             {{"CPU", 16 * kResourceScale}}});
    }
    list.push_back(std::move(n));
  }
  auto snap = InventorySnapshot::Build(std::move(list), allocations);
  if (!snap.ok()) std::abort();
  return {*snap, std::move(allocations)};
}

const Cluster& ClusterOf(int64_t nodes) {
  static auto* clusters = new std::map<int64_t, Cluster>();
  auto it = clusters->find(nodes);
  if (it == clusters->end())
    it = clusters->emplace(nodes, MakeCluster(nodes)).first;
  return it->second;
}

LabelSelector Sel(absl::btree_map<std::string, std::string> wire) {
  return *ParseLabelSelector(wire);
}

double ThreadCpuMicros() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// The cluster sizes every benchmark runs at, timed in microseconds.
void ClusterSizes(benchmark::internal::Benchmark* b) {
  b->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMicrosecond);
}

// Runs `solve(i)` per iteration, timing each call. Reports wall-clock
// p50_us / p99_us and, because the 2 cores are shared with other work,
// the same percentiles of this thread's CPU time (cpu_p50_us / cpu_p99_us).
template <typename F>
void TimeDecisions(benchmark::State& state, F solve) {
  std::vector<double> wall;
  std::vector<double> cpu;
  wall.reserve(1 << 16);
  cpu.reserve(1 << 16);
  int64_t i = 0;
  int64_t placed = 0;
  for (auto _ : state) {
    const double cpu_start = ThreadCpuMicros();
    const auto start = std::chrono::steady_clock::now();
    Decision d = solve(i++);
    const auto end = std::chrono::steady_clock::now();
    const double cpu_end = ThreadCpuMicros();
    placed += d.outcome == Decision::kPlaced;
    benchmark::DoNotOptimize(d);
    if (wall.size() < wall.capacity()) {
      wall.push_back(
          std::chrono::duration<double, std::micro>(end - start).count());
      cpu.push_back(cpu_end - cpu_start);
    }
  }
  auto pct = [](std::vector<double>& v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * (v.size() - 1))];
  };
  state.counters["p50_us"] = pct(wall, 0.50);
  state.counters["p99_us"] = pct(wall, 0.99);
  state.counters["cpu_p50_us"] = pct(cpu, 0.50);
  state.counters["cpu_p99_us"] = pct(cpu, 0.99);
  state.counters["placed_frac"] =
      static_cast<double>(placed) / std::max<int64_t>(1, i);
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
}

// TimeDecisions() over `requests` in turn.
void TimeRotating(benchmark::State& state, const InventorySnapshot& snap,
                  const std::vector<PlacementRequest>& requests) {
  TimeDecisions(state, [&](int64_t i) {
    return Solve(snap, requests[i % requests.size()]);
  });
}

// One free v6e 4x4 slice; the selector rotates over zones and tiers so the
// index is probed at different keys.
void BM_SliceRequest(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  std::vector<PlacementRequest> requests;
  for (const char* zone : kZones) {
    for (const char* tier : kTiers) {
      PlacementRequest r;
      SliceRequirement s;
      s.generation = TpuGeneration::kV6e;
      s.topology = "4x4";
      s.selector = Sel({{std::string(kLabelZone), zone},
                        {std::string(kLabelCapacityTier), tier}});
      r.slice = s;
      requests.push_back(r);
    }
  }
  TimeRotating(state, snap, requests);
}
BENCHMARK(BM_SliceRequest)->Apply(ClusterSizes);

// num_slices = 4 anywhere, preferring one zone; with compute-class priorities
// spot -> reserved.
void BM_MultiSliceWithPriorities(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  PlacementRequest r;
  SliceRequirement s;
  s.generation = TpuGeneration::kV6e;
  s.topology = "4x4";
  s.num_slices = 4;
  r.slice = s;
  r.priorities = {Sel({{std::string(kLabelCapacityTier), "spot"}}),
                  Sel({{std::string(kLabelCapacityTier), "reserved"}})};
  TimeDecisions(state, [&](int64_t) { return Solve(snap, r); });
}
BENCHMARK(BM_MultiSliceWithPriorities)->Apply(ClusterSizes);

// A slice request that cannot be placed (no slice is in tier flex-start):
// the slow path that explains every slice of the shape in the diagnosis.
void BM_SliceRequestRejected(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  PlacementRequest r;
  SliceRequirement s;
  s.generation = TpuGeneration::kV6e;
  s.topology = "4x4";
  s.selector = Sel({{std::string(kLabelCapacityTier), "flex-start"}});
  r.slice = s;
  TimeDecisions(state, [&](int64_t) { return Solve(snap, r); });
}
// Unschedulable inside the allowed key: one more slice than (zone, tier) has
// free, so every slice of that key is checked for the diagnosis.
void BM_SliceRequestShortInKey(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  const SliceKey key{TpuGeneration::kV6e, "4x4", kTiers[0], kZones[0]};
  int64_t free = 0;  // free intact slices under the key
  auto it = snap.slices_by_key().find(key);
  if (it != snap.slices_by_key().end()) {
    for (uint32_t s : it->second) {
      free += snap.slice(s).info.intact && snap.slice(s).free() ? 1 : 0;
    }
  }
  PlacementRequest r;
  SliceRequirement s;
  s.generation = TpuGeneration::kV6e;
  s.topology = "4x4";
  s.num_slices = static_cast<int>(free + 1);
  s.selector = Sel({{std::string(kLabelZone), kZones[0]},
                    {std::string(kLabelCapacityTier), kTiers[0]}});
  r.slice = s;
  state.counters["slices_needed"] = static_cast<double>(free + 1);
  TimeDecisions(state, [&](int64_t) { return Solve(snap, r); });
}
BENCHMARK(BM_SliceRequestShortInKey)->Apply(ClusterSizes);

BENCHMARK(BM_SliceRequestRejected)->Apply(ClusterSizes);

// 1,000 bundles {CPU: 1} (plus every 10th {CPU: 4}) with a zone + tier
// selector, for each strategy.
void BM_GenericPg1000(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  const Strategy strategy = static_cast<Strategy>(state.range(1));
  std::vector<PlacementRequest> requests;
  for (const char* zone : kZones) {
    PlacementRequest r;
    r.strategy = strategy;
    for (int b = 0; b < 1000; ++b) {
      Bundle bundle;
      bundle.resources = {{"CPU", (b % 10 == 0 ? 4 : 1) * kResourceScale}};
      bundle.selector = Sel({{std::string(kLabelZone), zone},
                             {std::string(kLabelCapacityTier), "!in(spot)"}});
      r.bundles.push_back(bundle);
    }
    requests.push_back(std::move(r));
  }
  state.SetLabel(std::string(StrategyName(strategy)));
  TimeRotating(state, snap, requests);
}
BENCHMARK(BM_GenericPg1000)
    ->ArgsProduct({{1'000, 10'000, 100'000},
                   {static_cast<int>(Strategy::kPack),
                    static_cast<int>(Strategy::kSpread),
                    static_cast<int>(Strategy::kStrictSpread)}})
    ->Unit(benchmark::kMicrosecond);

// A 1,000-bundle PG that does not fit ({CPU: 64} each, larger than any CPU
// node, in one zone): the failing path with its diagnosis.
void BM_GenericPg1000Unschedulable(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  PlacementRequest r;
  r.strategy = Strategy::kSpread;
  for (int b = 0; b < 1000; ++b) {
    Bundle bundle;
    bundle.resources = {{"CPU", 64 * kResourceScale}};
    bundle.selector = Sel({{std::string(kLabelZone), kZones[0]},
                           {std::string(kLabelAcceleratorType), "!TPU-V6E"}});
    r.bundles.push_back(bundle);
  }
  TimeDecisions(state, [&](int64_t) { return Solve(snap, r); });
}
BENCHMARK(BM_GenericPg1000Unschedulable)->Apply(ClusterSizes);

// A small SPREAD gang of CPU bundles, no selector: its cluster-wide placement
// lands on fresh nodes of several zones, so the gang is also tried in each
// zone alone (docs/engine.md, "Domains"). The size rotates over 2-4 bundles.
void BM_SmallSpreadGangAcrossZones(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  std::vector<PlacementRequest> requests;
  for (int size = 2; size <= 4; ++size) {
    PlacementRequest r;
    r.strategy = Strategy::kSpread;
    for (int b = 0; b < size; ++b) {
      r.bundles.push_back(Bundle{{{"CPU", 2 * kResourceScale}}, {}, ""});
    }
    requests.push_back(std::move(r));
  }
  TimeRotating(state, snap, requests);
}
BENCHMARK(BM_SmallSpreadGangAcrossZones)->Apply(ClusterSizes);

// One {CPU: 1} bundle, PACK, no selector: the create that issue 17's gRPC
// ratio sends (bench/go_ratio.py), solved alone.
void BM_OneCpuBundle(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  PlacementRequest r;
  r.strategy = Strategy::kPack;
  r.bundles.push_back(Bundle{{{"CPU", kResourceScale}}, {}, ""});
  TimeRotating(state, snap, {r});
}
BENCHMARK(BM_OneCpuBundle)->Apply(ClusterSizes);

// Four {CPU: 1} bundles, STRICT_SPREAD, no selector. A gang of more than
// one bundle is tried in each zone too, and the most constrained first
// order counts the ranked candidates (CandidateGroups::Reach) of groups
// that differ in more than their amounts.
PlacementRequest FourCpuBundlesStrictSpread() {
  PlacementRequest r;
  r.strategy = Strategy::kStrictSpread;
  for (int b = 0; b < 4; ++b) {
    r.bundles.push_back(Bundle{{{"CPU", kResourceScale}}, {}, ""});
  }
  return r;
}

void BM_SmallStrictSpreadNoSelector(benchmark::State& state) {
  TimeRotating(state, *ClusterOf(state.range(0)).snapshot,
               {FourCpuBundlesStrictSpread()});
}
BENCHMARK(BM_SmallStrictSpreadNoSelector)->Apply(ClusterSizes);

// Two shapes, {CPU: 1} and {CPU: 2}: two groups that count alike.
void BM_SmallStrictSpreadTwoShapes(benchmark::State& state) {
  PlacementRequest r = FourCpuBundlesStrictSpread();
  for (size_t b = 1; b < r.bundles.size(); b += 2) {
    r.bundles[b].resources = {{"CPU", 2 * kResourceScale}};
  }
  TimeRotating(state, *ClusterOf(state.range(0)).snapshot, {r});
}
BENCHMARK(BM_SmallStrictSpreadTwoShapes)->Apply(ClusterSizes);

// A selector on one bundle (not on spot capacity): two candidate sets,
// each counted.
void BM_SmallStrictSpreadOneSelector(benchmark::State& state) {
  PlacementRequest r = FourCpuBundlesStrictSpread();
  r.bundles[0].selector = Sel({{std::string(kLabelCapacityTier), "!in(spot)"}});
  TimeRotating(state, *ClusterOf(state.range(0)).snapshot, {r});
}
BENCHMARK(BM_SmallStrictSpreadOneSelector)->Apply(ClusterSizes);

// A sub-slice: a v6e 2x2 (one 4-chip host) carved out of a 4x4, as no 2x2
// slice exists; with a zone selector, and without (every parent of the
// generation is a candidate).
void BM_CarveSubslice(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  std::vector<PlacementRequest> requests;
  for (bool zoned : {false, true}) {
    PlacementRequest r;
    SliceRequirement s;
    s.generation = TpuGeneration::kV6e;
    s.topology = "2x2";
    s.subslicing = Subslicing::kIfNoExactShape;
    if (zoned) s.selector = Sel({{std::string(kLabelZone), kZones[1]}});
    r.slice = s;
    requests.push_back(std::move(r));
  }
  TimeRotating(state, snap, requests);
}
BENCHMARK(BM_CarveSubslice)->Apply(ClusterSizes);

// Generic TPU bundles behind compute-class priorities, as a Ray user asks
// for them: 4 or 8 x {CPU: 1, TPU: 4} PACK, tiers spot, then on-demand, then
// reserved. Each priority is a tier term, and the gang is also tried zone
// by zone.
void BM_TpuBundlesWithPriorities(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  std::vector<PlacementRequest> requests;
  for (int size : {4, 8}) {
    PlacementRequest r;
    for (int b = 0; b < size; ++b) {
      r.bundles.push_back(Bundle{
          {{"CPU", kResourceScale}, {"TPU", 4 * kResourceScale}}, {}, ""});
    }
    for (const char* tier : kTiers) {
      r.priorities.push_back(Sel({{std::string(kLabelCapacityTier), tier}}));
    }
    requests.push_back(std::move(r));
  }
  TimeRotating(state, snap, requests);
}
BENCHMARK(BM_TpuBundlesWithPriorities)->Apply(ClusterSizes);

// Plain TPU bundles: 8 x {TPU: 1} PACK, no selector (single-host nodes first).
void BM_PlainTpuPg(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  PlacementRequest r;
  for (int b = 0; b < 8; ++b)
    r.bundles.push_back(Bundle{{{"TPU", kResourceScale}}, {}, ""});
  TimeDecisions(state, [&](int64_t) { return Solve(snap, r); });
}
// The same when every single-host node's TPUs are taken: ranks put the full
// nodes (and the full hosts of held slices) last, so the scan goes straight
// to the first node with TPU left.
void BM_PlainTpuPgSinglesFull(benchmark::State& state) {
  static auto* filled =
      new std::map<int64_t, std::shared_ptr<const InventorySnapshot>>();
  auto it = filled->find(state.range(0));
  if (it == filled->end()) {
    const InventorySnapshot& base = *ClusterOf(state.range(0)).snapshot;
    SnapshotDelta delta;
    for (uint32_t i = 0; i < base.index_end(); ++i) {
      if (!base.has_node(i)) continue;
      const auto& e = base.node(i);
      if (e.single_host) {
        delta.add_allocations.push_back({"fill-" + e.node.node_id,
                                         0,
                                         e.node.node_id,
                                         {{"TPU", e.free.at("TPU")}}});
      }
    }
    it = filled->emplace(state.range(0), *base.Apply(delta)).first;
  }
  const InventorySnapshot& snap = *it->second;
  PlacementRequest r;
  for (int b = 0; b < 8; ++b)
    r.bundles.push_back(Bundle{{{"TPU", kResourceScale}}, {}, ""});
  TimeDecisions(state, [&](int64_t) { return Solve(snap, r); });
}
BENCHMARK(BM_PlainTpuPgSinglesFull)->Apply(ClusterSizes);

BENCHMARK(BM_PlainTpuPg)->Apply(ClusterSizes);

// Deriving the next snapshot after a slice placement (4 allocations) or a
// release of one PG, copy-on-write; includes freeing the derived snapshot.
void BM_ApplyPlacement(benchmark::State& state) {
  const Cluster& cluster = ClusterOf(state.range(0));
  const InventorySnapshot& snap = *cluster.snapshot;
  // Free slices to place on, rotating.
  std::vector<std::vector<std::string>> free_slices;
  for (const SliceState& s : snap.ListSlices()) {
    if (s.free && s.info.intact && s.info.expected_hosts == 4) {
      free_slices.push_back(s.info.node_ids);
      if (free_slices.size() == 64) break;
    }
  }
  int64_t i = 0;
  for (auto _ : state) {
    SnapshotDelta delta;
    const auto& hosts = free_slices[i++ % free_slices.size()];
    for (int w = 0; w < 4; ++w) {
      delta.add_allocations.push_back(
          {"bench-pg", w, hosts[w], {{"TPU", 4 * kResourceScale}}});
    }
    auto next = snap.Apply(delta);
    benchmark::DoNotOptimize(next);
  }
  state.counters["applies_per_s"] =
      benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ApplyPlacement)->Apply(ClusterSizes);

void BM_ApplyRelease(benchmark::State& state) {
  const Cluster& cluster = ClusterOf(state.range(0));
  const InventorySnapshot& snap = *cluster.snapshot;
  int64_t i = 0;
  for (auto _ : state) {
    SnapshotDelta delta;
    delta.release_pg_ids = {
        cluster.allocations[(i++ * 7919) % cluster.allocations.size()].pg_id};
    auto next = snap.Apply(delta);
    benchmark::DoNotOptimize(next);
  }
}
BENCHMARK(BM_ApplyRelease)->Apply(ClusterSizes);

// Placing one {CPU: 1} bundle of a new group among `groups` one-bundle
// groups already held, on 2,000 CPU nodes of 180 CPUs (bench/go_ratio.py's
// fleet): what a create costs the snapshot as groups accumulate.
void BM_ApplyCpuBundleAmongGroups(benchmark::State& state) {
  static std::map<int64_t, std::shared_ptr<const InventorySnapshot>> built;
  const int64_t groups = state.range(0);
  constexpr int kNodes = 2000;
  auto& snap = built[groups];
  if (snap == nullptr) {
    std::vector<Node> nodes;
    for (int n = 0; n < kNodes; ++n) {
      Node node = MakeNode(absl::StrCat("cpu-", n), kZones[n % 4], "spot");
      node.resources = {{"CPU", 180 * kResourceScale}};
      nodes.push_back(std::move(node));
    }
    std::vector<Allocation> held;
    for (int64_t g = 0; g < groups; ++g) {
      held.push_back({absl::StrCat("pg-", g),
                      0,
                      absl::StrCat("cpu-", g % kNodes),
                      {{"CPU", kResourceScale}}});
    }
    snap = *InventorySnapshot::Build(std::move(nodes), std::move(held));
  }
  int64_t i = 0;
  for (auto _ : state) {
    SnapshotDelta delta;
    delta.add_allocations.push_back({absl::StrCat("new-", i),
                                     0,
                                     absl::StrCat("cpu-", i % kNodes),
                                     {{"CPU", kResourceScale}}});
    ++i;
    auto next = snap->Apply(delta);
    benchmark::DoNotOptimize(next);
  }
}
BENCHMARK(BM_ApplyCpuBundleAmongGroups)->Arg(0)->Arg(50'000)->Arg(200'000);

// A heartbeat that turns one host DEAD (breaks its slice).
void BM_ApplyNodeStateChange(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  int64_t i = 0;
  for (auto _ : state) {
    Node n = snap.node((i++ * 7919) % snap.num_nodes()).node;
    n.state = NodeState::kDead;
    SnapshotDelta delta;
    delta.upsert_nodes = {std::move(n)};
    auto next = snap.Apply(delta);
    benchmark::DoNotOptimize(next);
  }
}
BENCHMARK(BM_ApplyNodeStateChange)->Apply(ClusterSizes);

// 1,000 TPU hosts re-registered with one CPU fewer in one delta (say, an
// agent upgrade that reserves a core): every touched slice's least host
// changes, and with it its key's.
void BM_ApplyResizeHosts(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  SnapshotDelta delta;
  for (uint32_t i = 0; i < snap.num_nodes() && delta.upsert_nodes.size() < 1000;
       ++i) {
    Node n = snap.node(i).node;
    if (!n.resources.contains("TPU")) continue;
    n.resources["CPU"] -= kResourceScale;
    delta.upsert_nodes.push_back(std::move(n));
  }
  for (auto _ : state) {
    auto next = snap.Apply(delta);
    benchmark::DoNotOptimize(next);
  }
}
BENCHMARK(BM_ApplyResizeHosts)->Apply(ClusterSizes);

// Node churn (issue 17): nodes added one at a time, each delta applied to
// the snapshot the last one made (gaps in the node indexes are used up and
// spread again as on a live daemon). "front" sorts before every node id of
// the cluster (each right after the one added before it), "back" after them
// all, "middle" right after a random node (Ray's node ids are random hex).
void ApplyAddNode(benchmark::State& state, const std::string& prefix) {
  std::shared_ptr<const InventorySnapshot> snap =
      ClusterOf(state.range(0)).snapshot;
  std::mt19937 rng(1);
  int64_t i = 0;
  for (auto _ : state) {
    // A CPU node as a real one is labelled: its zone and capacity tier are
    // on a quarter and a third of the nodes (their posting lists and value
    // bitsets change with it).
    std::string id = absl::StrCat(prefix, i++);
    if (prefix.empty()) {
      uint32_t at = rng() % snap->index_end();
      while (!snap->has_node(at)) at = (at + 1) % snap->index_end();
      id = absl::StrCat(snap->node(at).node.node_id, "-", i);
    }
    Node n = MakeNode(id, kZones[0], kTiers[0]);
    n.resources = {{"CPU", 32 * kResourceScale}};
    SnapshotDelta delta;
    delta.upsert_nodes = {std::move(n)};
    auto next = snap->Apply(delta);
    if (!next.ok()) {
      state.SkipWithError(next.status().ToString().c_str());
      return;
    }
    snap = *std::move(next);
  }
}
void BM_ApplyAddNodeFront(benchmark::State& state) {
  ApplyAddNode(state, "!churn-");
}
BENCHMARK(BM_ApplyAddNodeFront)->Apply(ClusterSizes);
void BM_ApplyAddNodeMiddle(benchmark::State& state) { ApplyAddNode(state, ""); }
BENCHMARK(BM_ApplyAddNodeMiddle)->Apply(ClusterSizes);
void BM_ApplyAddNodeBack(benchmark::State& state) {
  ApplyAddNode(state, "~churn-");
}
BENCHMARK(BM_ApplyAddNodeBack)->Apply(ClusterSizes);

// Node churn: one free CPU-only node removed.
void BM_ApplyRemoveNode(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  std::vector<std::string> free_ids;
  for (uint32_t i = 0; i < snap.index_end() && free_ids.size() < 1000; ++i) {
    if (!snap.has_node(i)) continue;
    const auto& e = snap.node(i);
    if (!e.tpu && e.allocations.empty()) free_ids.push_back(e.node.node_id);
  }
  if (free_ids.empty()) {
    state.SkipWithError("no free CPU node");
    return;
  }
  size_t i = 0;
  for (auto _ : state) {
    SnapshotDelta delta;
    delta.remove_node_ids = {free_ids[i++ % free_ids.size()]};
    auto next = snap.Apply(delta);
    benchmark::DoNotOptimize(next);
  }
}
BENCHMARK(BM_ApplyRemoveNode)->Apply(ClusterSizes);

// A new v6e 4x4 slice (4 hosts) whose name and host ids sort in the middle
// of the slices' and nodes' order: half of the indexes move.
void BM_ApplyAddSlice(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  int64_t i = 0;
  for (auto _ : state) {
    SnapshotDelta delta;
    delta.upsert_nodes =
        SliceHosts(absl::StrCat("slice-5-new-", i++), kZones[0], kTiers[0]);
    auto next = snap.Apply(delta);
    benchmark::DoNotOptimize(next);
  }
}
BENCHMARK(BM_ApplyAddSlice)->Apply(ClusterSizes);

// Full build (restart and load).
void BM_Build(benchmark::State& state) {
  const Cluster& cluster = ClusterOf(state.range(0));
  std::vector<Node> nodes;
  for (uint32_t i = 0; i < cluster.snapshot->index_end(); ++i) {
    if (!cluster.snapshot->has_node(i)) continue;
    nodes.push_back(cluster.snapshot->node(i).node);
  }
  for (auto _ : state) {
    auto snap = InventorySnapshot::Build(nodes, cluster.allocations);
    benchmark::DoNotOptimize(snap);
  }
}
BENCHMARK(BM_Build)->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(
    benchmark::kMillisecond);

// Where a waiting 1,000-bundle gang could go, as a preemption search asks
// (NodesARequestMayUse): a zone selector, and {CPU: 1} each (arg 1 = 0) or
// a different CPU amount per bundle (arg 1 = 1).
void BM_NodesARequestMayUse(benchmark::State& state) {
  const InventorySnapshot& snap = *ClusterOf(state.range(0)).snapshot;
  PlacementRequest r;
  for (int b = 0; b < 1000; ++b) {
    Bundle bundle;
    bundle.resources = {
        {"CPU", (state.range(1) == 0 ? 1 : 1 + b) * kResourceScale / 100}};
    bundle.selector = Sel({{std::string(kLabelZone), kZones[0]}});
    r.bundles.push_back(bundle);
  }
  state.SetLabel(state.range(1) == 0 ? "alike" : "amounts differ");
  for (auto _ : state) {
    benchmark::DoNotOptimize(NodesARequestMayUse(snap, r));
  }
}
BENCHMARK(BM_NodesARequestMayUse)
    ->ArgsProduct({{1'000, 10'000, 100'000}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sliced::scheduler

BENCHMARK_MAIN();
