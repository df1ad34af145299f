// The simulator's placement policies (see sim.h): sliced (the real engine)
// and the baselines first-fit, random, Ray's worst fit and the tuned tiered
// first-fit. Not thread-safe: a policy holds its RNG and scratch vectors.
#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "bench/common/rng.h"
#include "bench/sim/sim.h"
#include "bench/sim/sim_util.h"
#include "scheduler/solver.h"

namespace sliced::bench {
namespace {

using scheduler::InventorySnapshot;
using scheduler::LabelSelector;
using scheduler::ResourceSet;
using sim_util::AddTo;
using sim_util::Die;
using sim_util::Get;

// --- sliced: the real engine -------------------------------------------------

class SlicedPolicy : public Policy {
 public:
  Placement Place(const InventorySnapshot& snapshot, const Job& job) override {
    const scheduler::Decision d = scheduler::Solve(snapshot, job.request);
    if (d.outcome != scheduler::Decision::kPlaced) return {};
    std::vector<scheduler::Bundle> bundles = ExpandBundles(job);
    if (d.fallback_index >= 0) bundles = job.request.fallbacks[d.fallback_index];
    Placement p;
    for (size_t i = 0; i < d.bundle_nodes.size(); ++i) {
      p.nodes.push_back(static_cast<uint32_t>(snapshot.NodeIndex(d.bundle_nodes[i])));
      p.resources.push_back(bundles[i].resources);
    }
    return p;
  }
};

bool CpuOnly(const scheduler::PlacementRequest& request);

// A what-if, not a policy anyone configures: sliced, but a gang of CPU-only
// bundles is first asked with a selector that keeps those bundles off the
// hosts of multi-host slices (`ray.io/tpu-pod-type` !in(...)); when that
// does not fit, the plain request. The engine is not changed.
class SlicedCpuHintPolicy : public Policy {
 public:
  explicit SlicedCpuHintPolicy(scheduler::SelectorTerm hint) : hint_(std::move(hint)) {}

  Placement Place(const InventorySnapshot& snapshot, const Job& job) override {
    if (!job.request.slice && CpuOnly(job.request)) {
      Job hinted = job;
      for (scheduler::Bundle& b : hinted.request.bundles) {
        b.selector.terms.push_back(hint_);
        std::stable_sort(b.selector.terms.begin(), b.selector.terms.end(),
                         [](const auto& x, const auto& y) { return x.key < y.key; });
      }
      Placement p = plain_.Place(snapshot, hinted);
      if (!p.nodes.empty()) return p;
    }
    return plain_.Place(snapshot, job);
  }

 private:
  scheduler::SelectorTerm hint_;
  SlicedPolicy plain_;
};

// --- baselines: fitting one generic gang on an ordered list of nodes ----------

// One attempt to fit a generic gang on `order` (the nodes it may use, in
// the policy's order): PACK first tries the whole gang on one node, then
// every bundle goes to the first (or, for Ray, the worst-fit) node that
// fits; PACK prefers nodes the gang already uses, SPREAD nodes it does not.
class GangFitter {
 public:
  GangFitter(const InventorySnapshot& snap, const std::vector<uint32_t>& order,
             bool worst_fit, Rng& rng)
      : snap_(snap), order_(order), worst_fit_(worst_fit), rng_(rng) {}

  // The placement, or an empty one when the gang does not fit.
  Placement Fit(const scheduler::PlacementRequest& request) {
    const std::vector<scheduler::Bundle>& bundles = request.bundles;
    const bool pack = request.strategy == scheduler::Strategy::kPack;
    if (pack) {
      Placement p = PackOnOne(bundles);
      if (!p.nodes.empty()) return p;
    }
    Placement p;
    std::vector<uint32_t> gang;  // nodes this gang uses, in first-use order
    auto in_gang = [&](uint32_t i) {
      return std::find(gang.begin(), gang.end(), i) != gang.end();
    };
    for (const auto& b : bundles) {
      int64_t n = -1;
      if (pack) {
        for (uint32_t g : gang) {
          if (Fits(g, b.resources, b.selector)) {
            n = g;
            break;
          }
        }
      }
      if (n < 0) {
        n = Choose(b.resources, b.selector,
                   [&](uint32_t i) { return pack || !in_gang(i); });
      }
      if (n < 0 && !pack) n = Choose(b.resources, b.selector, [](uint32_t) { return true; });
      if (n < 0) return {};
      const uint32_t node = static_cast<uint32_t>(n);
      AddTo(used_[node], b.resources);
      if (!in_gang(node)) gang.push_back(node);
      p.nodes.push_back(node);
      p.resources.push_back(b.resources);
    }
    return p;
  }

 private:
  // The whole gang on one node when all bundles share a selector.
  Placement PackOnOne(const std::vector<scheduler::Bundle>& bundles) {
    ResourceSet sum;
    for (const auto& b : bundles) {
      if (!(b.selector == bundles[0].selector)) return {};
      AddTo(sum, b.resources);
    }
    const int64_t n = Choose(sum, bundles[0].selector, [](uint32_t) { return true; });
    if (n < 0) return {};
    Placement p;
    for (const auto& b : bundles) {
      p.nodes.push_back(static_cast<uint32_t>(n));
      p.resources.push_back(b.resources);
    }
    return p;
  }

  int64_t Avail(uint32_t i, absl::string_view name) const {
    auto u = used_.find(i);
    return Get(snap_.node(i).free, name) - (u == used_.end() ? 0 : Get(u->second, name));
  }

  bool Fits(uint32_t i, const ResourceSet& r, const LabelSelector& sel) const {
    if (!sel.empty() && !scheduler::Matches(sel, snap_.node(i).node.labels)) return false;
    for (const auto& [name, amount] : r) {
      if (Avail(i, name) < amount) return false;
    }
    return true;
  }

  // Ray's LeastResourceScorer: sum over requested resources of the
  // remaining share after placing; larger is better.
  double Score(uint32_t i, const ResourceSet& r) const {
    double s = 0;
    for (const auto& [name, amount] : r) {
      const int64_t avail = Avail(i, name);
      if (avail > 0) s += double(avail - amount) / double(avail);
    }
    return s;
  }

  // The policy's choice among nodes passing `allowed`; -1 when none.
  template <typename Allowed>
  int64_t Choose(const ResourceSet& r, const LabelSelector& sel, Allowed allowed) {
    int64_t best = -1;
    double best_score = -1;
    int ties = 0;
    for (uint32_t i : order_) {
      if (!allowed(i) || !Fits(i, r, sel)) continue;
      if (!worst_fit_) return int64_t{i};
      const double s = Score(i, r);
      if (s > best_score + 1e-12) {
        best = i, best_score = s, ties = 1;
      } else if (s > best_score - 1e-12 && rng_.Int(0, ties++) == 0) {
        best = i;
      }
    }
    return best;
  }

  const InventorySnapshot& snap_;
  const std::vector<uint32_t>& order_;
  const bool worst_fit_;
  Rng& rng_;
  absl::flat_hash_map<uint32_t, ResourceSet> used_;
};

bool CpuOnly(const scheduler::PlacementRequest& request) {
  for (const auto& b : request.bundles) {
    if (Get(b.resources, "TPU") > 0) return false;
  }
  return true;
}

// --- baselines -----------------------------------------------------------------

class BaselinePolicy : public Policy {
 public:
  BaselinePolicy(PolicyKind kind, uint64_t seed, TieredOptions tiered = {})
      : kind_(kind), tiered_(tiered), rng_(seed) {}

  Placement Place(const InventorySnapshot& snapshot, const Job& job) override {
    std::vector<LabelSelector> priorities = job.request.priorities;
    if (priorities.empty()) priorities.emplace_back();
    for (const LabelSelector& priority : priorities) {
      Placement p = job.request.slice
                        ? PlaceSlices(snapshot, job, priority)
                        : PlaceGeneric(snapshot, job, priority);
      if (!p.nodes.empty()) return p;
    }
    return {};
  }

 private:
  // Whole free intact slices of the job's shape whose hosts all match.
  Placement PlaceSlices(const InventorySnapshot& snap, const Job& job,
                        const LabelSelector& priority) {
    const scheduler::SliceRequirement& req = *job.request.slice;
    std::vector<uint32_t> candidates;
    for (const auto& [key, slices] : snap.slices_by_key()) {
      if (key.generation != req.generation || key.topology != req.topology) continue;
      for (uint32_t s : slices) {
        const InventorySnapshot::SliceEntry& e = snap.slice(s);
        if (!e.info.intact || !e.free()) continue;
        bool ok = true;
        for (uint32_t h : snap.HostIndexes(e)) {
          const scheduler::Node& n = snap.node(h).node;
          ok = ok && n.state == scheduler::NodeState::kAlive &&
               scheduler::Matches(req.selector, n.labels) &&
               scheduler::Matches(priority, n.labels);
        }
        if (ok) candidates.push_back(s);
      }
    }
    if (static_cast<int>(candidates.size()) < req.num_slices) return {};
    if (kind_ == PolicyKind::kFirstFit || kind_ == PolicyKind::kTieredFirstFit) {
      std::sort(candidates.begin(), candidates.end());
    } else {  // random; Ray's scorer ties every free slice, broken at random
      for (int i = 0; i < req.num_slices; ++i) {
        std::swap(candidates[i],
                  candidates[rng_.Int(i, static_cast<int64_t>(candidates.size()) - 1)]);
      }
    }
    const std::vector<scheduler::Bundle> bundles = ExpandBundles(job);
    Placement p;
    for (int s = 0; s < req.num_slices; ++s) {
      for (uint32_t h : snap.HostIndexes(snap.slice(candidates[s]))) {
        p.resources.push_back(bundles[p.nodes.size()].resources);
        p.nodes.push_back(h);
      }
    }
    return p;
  }

  Placement PlaceGeneric(const InventorySnapshot& snap, const Job& job,
                         const LabelSelector& priority) {
    order_.clear();
    for (uint32_t i = 0; i < snap.index_end(); ++i) {
      if (!snap.has_node(i)) continue;
      const scheduler::Node& n = snap.node(i).node;
      if (n.state == scheduler::NodeState::kAlive &&
          scheduler::Matches(priority, n.labels)) {
        order_.push_back(i);
      }
    }
    if (kind_ == PolicyKind::kRandom) {
      for (size_t i = order_.size(); i > 1; --i) {
        std::swap(order_[i - 1], order_[rng_.Int(0, static_cast<int64_t>(i) - 1)]);
      }
    }
    if (kind_ == PolicyKind::kTieredFirstFit) return PlaceTiered(snap, job);
    return GangFitter(snap, order_, kind_ == PolicyKind::kRay, rng_).Fit(job.request);
  }

  // The node's tier for CPU-only bundles: 0 no TPU, 1 single-host TPU node,
  // 2 host of a multi-host slice.
  static int Tier(const InventorySnapshot::NodeEntry& e) {
    return !e.tpu ? 0 : (e.single_host ? 1 : 2);
  }

  // Whether the node (for a TPU host: its slice) already holds allocations.
  static bool Busy(const InventorySnapshot& snap, uint32_t i) {
    const InventorySnapshot::NodeEntry& e = snap.node(i);
    const int32_t s = snap.SliceIndexOf(e);
    return s >= 0 ? !snap.slice(s).free() : !e.allocations.empty();
  }

  // Tiered first-fit: a CPU-only gang is fitted on tier 0 alone, then tiers
  // 0-1, then everywhere (the first that holds the whole gang wins), nodes
  // in (tier, [busy first], [smaller slice first], id) order. Other gangs:
  // first fit in id order, [single-host TPU nodes first].
  Placement PlaceTiered(const InventorySnapshot& snap, const Job& job) {
    const bool cpu_only = CpuOnly(job.request);
    using Key = std::tuple<int, bool, int64_t, uint32_t>;
    auto key = [&](uint32_t i) -> Key {
      const InventorySnapshot::NodeEntry& e = snap.node(i);
      if (!cpu_only) {
        return {tiered_.tpu_single_host_first && e.tpu && !e.single_host, false, 0, i};
      }
      const int tier = Tier(e);
      const int64_t size = tiered_.small_slices_first && tier == 2
                               ? static_cast<int64_t>(snap.slice(snap.SliceIndexOf(e)).host_slots.size())
                               : 0;
      return {tier, tiered_.busy_first && !Busy(snap, i), size, i};
    };
    std::vector<std::pair<Key, uint32_t>> keyed;
    keyed.reserve(order_.size());
    for (uint32_t i : order_) keyed.push_back({key(i), i});
    std::sort(keyed.begin(), keyed.end());
    order_.clear();
    for (const auto& [k, i] : keyed) order_.push_back(i);
    if (!cpu_only) return GangFitter(snap, order_, false, rng_).Fit(job.request);
    std::vector<uint32_t> allowed;
    for (int max_tier = 0; max_tier <= 2; ++max_tier) {
      allowed.clear();
      for (uint32_t i : order_) {
        if (Tier(snap.node(i)) <= max_tier) allowed.push_back(i);
      }
      Placement p = GangFitter(snap, allowed, false, rng_).Fit(job.request);
      if (!p.nodes.empty()) return p;
    }
    return {};
  }

  PolicyKind kind_;
  TieredOptions tiered_;
  Rng rng_;
  std::vector<uint32_t> order_;
};

}  // namespace

const char* PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kSliced: return "sliced";
    case PolicyKind::kFirstFit: return "first-fit";
    case PolicyKind::kRandom: return "random";
    case PolicyKind::kRay: return "ray-worst-fit";
    case PolicyKind::kTieredFirstFit: return "tiered-first-fit";
  }
  return "?";
}

std::unique_ptr<Policy> MakePolicy(PolicyKind kind, uint64_t seed) {
  if (kind == PolicyKind::kSliced) return std::make_unique<SlicedPolicy>();
  return std::make_unique<BaselinePolicy>(kind, seed);
}

std::unique_ptr<Policy> MakeSlicedCpuHintPolicy(std::vector<std::string> multi_host_pod_types) {
  std::sort(multi_host_pod_types.begin(), multi_host_pod_types.end());
  return std::make_unique<SlicedCpuHintPolicy>(
      scheduler::SelectorTerm{std::string(scheduler::kLabelTpuPodType),
                              scheduler::SelectorOp::kNotIn,
                              std::move(multi_host_pod_types)});
}

std::unique_ptr<Policy> MakeTieredPolicy(const TieredOptions& options) {
  return std::make_unique<BaselinePolicy>(PolicyKind::kTieredFirstFit, 0, options);
}

std::vector<scheduler::Bundle> ExpandBundles(const Job& job) {
  if (!job.request.slice || !job.request.bundles.empty()) return job.request.bundles;
  const scheduler::SliceRequirement& req = *job.request.slice;
  auto shape = scheduler::ResolveTpuShape(req.generation, req.topology);
  if (!shape.ok()) Die(shape.status().ToString());
  ResourceSet per_host = req.resources_per_host;
  if (per_host.empty()) {
    per_host = {{"TPU", shape->chips / shape->hosts * scheduler::kResourceScale}};
  }
  return std::vector<scheduler::Bundle>(req.num_slices * shape->hosts,
                                        scheduler::Bundle{per_host, {}, ""});
}

}  // namespace sliced::bench
