// The preemption comparison; see preemption.h.
#include "bench/sim/preemption.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/json.h"
#include "bench/common/output.h"
#include "bench/common/rng.h"
#include "bench/sim/sim_util.h"
#include "scheduler/preemption.h"
#include "scheduler/solver.h"

namespace sliced::bench {
namespace {

using scheduler::Allocation;
using scheduler::Bundle;
using scheduler::Decision;
using scheduler::InventorySnapshot;
using scheduler::kResourceScale;
using scheduler::PlacementRequest;
using scheduler::ResourceSet;
using scheduler::SnapshotDelta;
using scheduler::Strategy;
using scheduler::TpuGeneration;
using Snapshot = std::shared_ptr<const InventorySnapshot>;

constexpr int32_t kProduction = 1000;
constexpr int kPolicies = 2;
constexpr const char* kPolicyNames[kPolicies] = {"sliced", "topology-blind"};

scheduler::Node Host(const std::string& id, const std::string& slice,
                     const char* topology, int worker, int chips) {
  scheduler::Node n;
  n.node_id = id;
  n.address = id + ".bench.internal";
  n.labels = {{std::string(scheduler::kLabelNodeId), id},
              {std::string(scheduler::kLabelZone), "us-east5-b"},
              {std::string(scheduler::kLabelCapacityTier), "reserved"}};
  if (chips > 0) {
    n.labels[std::string(scheduler::kLabelAcceleratorType)] = "TPU-V6E";
    n.labels[std::string(scheduler::kLabelTpuTopology)] = topology;
    n.labels[std::string(scheduler::kLabelTpuSliceName)] = slice;
    n.labels[std::string(scheduler::kLabelTpuWorkerId)] = absl::StrCat(worker);
    n.resources["TPU"] = chips * kResourceScale;
  }
  // TPU hosts get too little CPU for a CPU gang's bundle (as GKE's taint
  // keeps CPU pods off TPU nodes): the comparison is about chips.
  n.resources["CPU"] = (chips > 0 ? 8 : 32) * kResourceScale;
  return n;
}

// `slices` v6e-16 slices, a third as many v6e-8 nodes, a quarter as many
// CPU nodes.
std::vector<scheduler::Node> MakeFleet(int64_t slices) {
  std::vector<scheduler::Node> nodes;
  for (int64_t s = 0; s < slices; ++s) {
    const std::string name = absl::StrFormat("v6e16-%03d", s);
    for (int w = 0; w < 4; ++w) {
      nodes.push_back(Host(absl::StrCat(name, "-w", w), name, "4x4", w, 4));
    }
  }
  for (int64_t i = 0; i < slices / 3; ++i) {
    const std::string name = absl::StrFormat("v6e8-%03d", i);
    nodes.push_back(Host(name, name, "2x4", 0, 8));
  }
  for (int64_t i = 0; i < std::max<int64_t>(1, slices / 4); ++i) {
    nodes.push_back(Host(absl::StrFormat("cpu-%03d", i), "", "", 0, 0));
  }
  return nodes;
}

PlacementRequest SliceOf(const char* topology, int num_slices) {
  PlacementRequest r;
  scheduler::SliceRequirement s;
  s.generation = TpuGeneration::kV6e;
  s.topology = topology;
  s.num_slices = num_slices;
  r.slice = s;
  return r;
}

PlacementRequest GangOf(Strategy strategy, int bundles, ResourceSet each) {
  PlacementRequest r;
  r.strategy = strategy;
  r.bundles.assign(bundles, Bundle{std::move(each), {}, ""});
  return r;
}

ResourceSet Tpu(int chips) { return {{"TPU", chips * kResourceScale}}; }

// A low-priority group of the fill.
PlacementRequest FillRequest(Rng& rng) {
  switch (rng.Weighted({0.25, 0.35, 0.15, 0.15, 0.10})) {
    case 0:
      return SliceOf("4x4", 1);
    case 1:
      return GangOf(Strategy::kSpread, static_cast<int>(rng.Int(1, 3)), Tpu(4));
    case 2:
      return GangOf(Strategy::kPack, static_cast<int>(rng.Int(1, 4)), Tpu(1));
    case 3:
      return SliceOf("2x4", 1);
    default:
      return GangOf(Strategy::kSpread, static_cast<int>(rng.Int(1, 4)),
                    {{"CPU", 16 * kResourceScale}});
  }
}

PlacementRequest ProductionRequest(Rng& rng) {
  switch (rng.Weighted({0.45, 0.15, 0.25, 0.15})) {
    case 0:
      return SliceOf("4x4", 1);
    case 1:
      return SliceOf("4x4", 2);
    case 2:
      return GangOf(Strategy::kSpread, 4, Tpu(4));
    default:
      return SliceOf("2x4", 1);
  }
}

int64_t TpuOf(const ResourceSet& r) {
  return sim_util::Get(r, "TPU") / kResourceScale;
}

struct Group {
  PlacementRequest request;
  int32_t priority = 0;
  uint64_t sequence = 0;
};

// One cluster under one policy.
class World {
 public:
  World(Snapshot snap, std::map<std::string, Group> groups, uint64_t sequence)
      : snap_(std::move(snap)), groups_(std::move(groups)), next_(sequence) {}

  // Places `id` if its request fits now.
  bool TryPlace(const std::string& id) {
    Group& g = groups_.at(id);
    const Decision d = scheduler::Solve(*snap_, g.request);
    if (d.outcome != Decision::kPlaced) return false;
    SnapshotDelta delta;
    for (size_t i = 0; i < d.bundle_nodes.size(); ++i) {
      ResourceSet res;
      if (g.request.slice.has_value()) {
        res = Tpu(scheduler::ResolveTpuShape(g.request.slice->generation,
                                             g.request.slice->topology)
                      ->chips_per_host);
      } else {
        res = g.request.bundles[i].resources;
      }
      delta.add_allocations.push_back(
          Allocation{id, static_cast<int>(i), d.bundle_nodes[i], res});
    }
    Commit(delta);
    g.sequence = next_++;
    running_.insert(id);
    return true;
  }

  void Add(const std::string& id, Group g) { groups_[id] = std::move(g); }

  // Running groups below `priority`, as the planner takes them.
  std::vector<scheduler::VictimCandidate> Candidates(int32_t priority) const {
    std::vector<scheduler::VictimCandidate> out;
    for (const std::string& id : running_) {
      const Group& g = groups_.at(id);
      if (g.priority < priority) {
        out.push_back({id, g.priority, g.sequence, ""});
      }
    }
    return out;
  }

  // Releases `victims` and queues them again. Returns the TPU chips they
  // held.
  int64_t Preempt(const std::vector<std::string>& victims) {
    SnapshotDelta delta;
    int64_t chips = 0;
    for (const std::string& id : victims) {
      for (const Allocation& a : snap_->AllocationsOf(id))
        chips += TpuOf(a.resources);
      delta.release_pg_ids.push_back(id);
      running_.erase(id);
      waiting_.push_back(id);
    }
    Commit(delta);
    return chips;
  }

  // Places the queued victims that fit, highest priority and oldest first.
  void Requeue() {
    std::sort(waiting_.begin(), waiting_.end(),
              [&](const std::string& a, const std::string& b) {
                const Group& x = groups_.at(a);
                const Group& y = groups_.at(b);
                return std::tie(y.priority, x.sequence) <
                       std::tie(x.priority, y.sequence);
              });
    std::vector<std::string> still;
    for (const std::string& id : waiting_) {
      if (!TryPlace(id)) still.push_back(id);
    }
    waiting_ = std::move(still);
  }

  int64_t FreeTpu() const {
    int64_t free = 0;
    for (uint32_t i = 0; i < snap_->index_end(); ++i) {
      if (!snap_->has_node(i)) continue;
      free += std::max<int64_t>(0, TpuOf(snap_->node(i).free));
    }
    return free;
  }

  const InventorySnapshot& snap() const { return *snap_; }
  const Group& group(const std::string& id) const { return groups_.at(id); }
  size_t waiting() const { return waiting_.size(); }

 private:
  void Commit(const SnapshotDelta& delta) {
    auto next = snap_->Apply(delta);
    if (!next.ok()) sim_util::Die(next.status().ToString());
    snap_ = *next;
  }

  Snapshot snap_;
  std::map<std::string, Group> groups_;
  std::set<std::string> running_;
  std::vector<std::string> waiting_;
  uint64_t next_;
};

int64_t RequestTpu(const PlacementRequest& r) {
  if (r.slice.has_value()) {
    return scheduler::ResolveTpuShape(r.slice->generation, r.slice->topology)
               ->chips *
           r.slice->num_slices;
  }
  int64_t chips = 0;
  for (const Bundle& b : r.bundles) chips += TpuOf(b.resources);
  return chips;
}

struct Result {
  int64_t placed = 0;
  int64_t without_preemption = 0;
  int64_t preemptions = 0;  // preemptors that preempted (placed or not)
  int64_t victims = 0;
  int64_t chips_taken = 0;
  std::vector<double> waits;  // of placed preemptors
  int64_t waiting_at_end = 0;
};

// The topology-blind baseline's victims for one round: lowest priority,
// then most recently started, until the free chips would cover the
// request; after the first round, one more.
std::vector<std::string> BlindVictims(const World& w, const Group& p,
                                      int round) {
  std::vector<scheduler::VictimCandidate> c = w.Candidates(p.priority);
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return std::tie(a.priority, b.sequence) < std::tie(b.priority, a.sequence);
  });
  std::vector<std::string> out;
  int64_t free = w.FreeTpu();
  const int64_t want = RequestTpu(p.request);
  for (const auto& v : c) {
    if (!out.empty() && (round > 0 || free >= want)) break;
    int64_t held = 0;
    for (const Allocation& a : w.snap().AllocationsOf(v.pg_id)) {
      held += TpuOf(a.resources);
    }
    if (held == 0) continue;
    free += held;
    out.push_back(v.pg_id);
  }
  return out;
}

Result Run(int policy, World w, const std::vector<PlacementRequest>& prod,
           double grace_s) {
  Result r;
  for (size_t i = 0; i < prod.size(); ++i) {
    const std::string id = absl::StrCat("prod-", i);
    w.Add(id, Group{prod[i], kProduction, 0});
    if (w.TryPlace(id)) {
      ++r.placed;
      ++r.without_preemption;
      r.waits.push_back(0);
      continue;
    }
    ++r.preemptions;
    bool placed = false;
    int rounds = 0;
    if (policy == 0) {
      const scheduler::PreemptionPlan plan = scheduler::PlanPreemption(
          w.snap(), prod[i], w.Candidates(kProduction));
      if (plan.found) {
        std::vector<std::string> ids;
        for (const scheduler::Victim& v : plan.victims) ids.push_back(v.pg_id);
        r.victims += static_cast<int64_t>(ids.size());
        r.chips_taken += w.Preempt(ids);
        rounds = 1;
        placed = w.TryPlace(id);
        if (!placed) sim_util::Die("a plan's victims did not make room");
      }
    } else {
      for (;;) {
        const std::vector<std::string> ids =
            BlindVictims(w, w.group(id), rounds);
        if (ids.empty()) break;
        r.victims += static_cast<int64_t>(ids.size());
        r.chips_taken += w.Preempt(ids);
        ++rounds;
        if ((placed = w.TryPlace(id))) break;
      }
    }
    if (placed) {
      ++r.placed;
      r.waits.push_back(rounds * grace_s);
    }
    w.Requeue();
  }
  r.waiting_at_end = static_cast<int64_t>(w.waiting());
  return r;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

}  // namespace

int RunPreemptionSim(const PreemptionSimOptions& o) {
  struct Row {
    uint64_t seed;
    Result by[kPolicies];
  };
  std::vector<Row> rows;
  for (int k = 0; k < o.seeds; ++k) {
    const uint64_t seed = o.seed + k;
    Progress("preemption trace, seed %d", seed);
    Rng rng(seed * 0x9e3779b97f4a7c15ULL + 29);
    auto built = InventorySnapshot::Build(MakeFleet(o.slices), {});
    if (!built.ok()) sim_util::Die(built.status().ToString());
    // Fill with low-priority groups until 100 in a row do not fit.
    World fill(*built, {}, 0);
    for (int64_t n = 0, misses = 0; misses < 100; ++n) {
      const std::string id = absl::StrFormat("low-%05d", n);
      fill.Add(id, Group{FillRequest(rng), rng.Bernoulli(0.6) ? 0 : 100, 0});
      misses = fill.TryPlace(id) ? 0 : misses + 1;
    }
    std::vector<PlacementRequest> prod;
    for (int64_t i = 0; i < o.preemptors; ++i) {
      prod.push_back(ProductionRequest(rng));
    }
    Row row{seed, {}};
    for (int p = 0; p < kPolicies; ++p)
      row.by[p] = Run(p, fill, prod, o.grace_s);
    rows.push_back(std::move(row));
  }
  Progress("%s", "");

  std::string md = absl::StrFormat(
      "### Priority preemption: victim choice\n\n**Command**: `sliced_sim "
      "--workload=preemption --slices=%d --preemptors=%d --seed=%d "
      "--replay_seeds=%d`. Per seed %d v6e-16 slices, %d v6e-8 nodes and %d "
      "CPU "
      "nodes, filled with best-effort and batch groups until nothing more "
      "fits, then %d production requests (v6e-16 slice 45 %%, two v6e-16 "
      "slices 15 %%, 4 x {TPU: 4} spread 25 %%, v6e-8 15 %%). A round of "
      "preemption costs the preemptor a %.0f s grace period. topology-blind "
      "is Kueue's rule: lowest priority, then most recently started, until "
      "the free chips cover the request; one more per round until it "
      "fits.\n\n"
      "| seed | policy | preemptors placed | of them without preemption | "
      "preemptions | victims | victims per preemption | TPU chips taken | "
      "chips per preemption | mean wait (s) | max wait (s) | victims still "
      "waiting |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
      "| --- | --- |\n",
      o.slices, o.preemptors, o.seed, o.seeds, o.slices, o.slices / 3,
      std::max<int64_t>(1, o.slices / 4), o.preemptors, o.grace_s);
  JsonWriter json;
  json.BeginObject().Key("runs").BeginArray();
  Result total[kPolicies];
  for (const Row& row : rows) {
    for (int p = 0; p < kPolicies; ++p) {
      const Result& r = row.by[p];
      const double per = r.preemptions > 0 ? 1.0 / r.preemptions : 0;
      const double max_wait =
          r.waits.empty() ? 0
                          : *std::max_element(r.waits.begin(), r.waits.end());
      absl::StrAppendFormat(
          &md,
          "| %d | %s | %d / %d | %d | %d | %d | %.2f | %d | %.1f | %.0f | "
          "%.0f | %d |\n",
          row.seed, kPolicyNames[p], r.placed, o.preemptors,
          r.without_preemption, r.preemptions, r.victims, r.victims * per,
          r.chips_taken, r.chips_taken * per, Mean(r.waits), max_wait,
          r.waiting_at_end);
      json.BeginObject()
          .Key("seed")
          .Number(static_cast<double>(row.seed))
          .Key("policy")
          .String(kPolicyNames[p])
          .Key("placed")
          .Number(static_cast<double>(r.placed))
          .Key("preemptions")
          .Number(static_cast<double>(r.preemptions))
          .Key("victims")
          .Number(static_cast<double>(r.victims))
          .Key("chips_taken")
          .Number(static_cast<double>(r.chips_taken))
          .Key("mean_wait_s")
          .Number(Mean(r.waits))
          .Key("max_wait_s")
          .Number(max_wait)
          .Key("waiting_at_end")
          .Number(static_cast<double>(r.waiting_at_end))
          .EndObject();
      total[p].placed += r.placed;
      total[p].preemptions += r.preemptions;
      total[p].victims += r.victims;
      total[p].chips_taken += r.chips_taken;
      total[p].waits.insert(total[p].waits.end(), r.waits.begin(),
                            r.waits.end());
    }
  }
  json.EndArray().EndObject();
  absl::StrAppendFormat(
      &md,
      "\nOver all seeds: sliced placed %d preemptors with %d victims and %d "
      "chips taken (mean wait %.0f s); topology-blind placed %d with %d "
      "victims and %d chips taken (mean wait %.0f s).\n",
      total[0].placed, total[0].victims, total[0].chips_taken,
      Mean(total[0].waits), total[1].placed, total[1].victims,
      total[1].chips_taken, Mean(total[1].waits));
  std::fputs(md.c_str(), stdout);
  if (!WriteOutputs(o.out_dir, {{"preemption.json", json.str()},
                                {"sim_preemption.md", md}})) {
    return 1;
  }
  if (o.check &&
      (total[0].preemptions == 0 || total[0].victims > total[1].victims ||
       total[0].placed < total[1].placed)) {
    std::fprintf(stderr,
                 "sliced took more victims or placed fewer preemptors than "
                 "the topology-blind baseline (or none preempted)\n");
    return 1;
  }
  return 0;
}

}  // namespace sliced::bench
