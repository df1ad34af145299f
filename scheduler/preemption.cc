#include "scheduler/preemption.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sliced::scheduler {
namespace {

// What a set of victims costs, compared lexicographically: highest
// priority, count, TPU taken, then the oldest victim's age (a younger
// oldest victim, i.e. a larger sequence, is cheaper).
using Cost = std::tuple<int32_t, size_t, int64_t, int64_t>;

// Whether node i hosts a slice of `generation` (of a known shape): where a
// slice request of that generation can go.
bool HostsSliceOf(const InventorySnapshot& snapshot, uint32_t i,
                  TpuGeneration generation) {
  const int32_t s = snapshot.SliceIndexOf(snapshot.node(i));
  if (s < 0) return false;
  const InventorySnapshot::SliceEntry& slice =
      snapshot.slice(static_cast<uint32_t>(s));
  return slice.shape_known && slice.shape.generation == generation;
}

class Planner {
 public:
  Planner(const InventorySnapshot& snapshot, const PlacementRequest& request,
          const PreemptionOptions& options)
      : snapshot_(snapshot), request_(request), options_(options) {}

  // Adds a candidate and what it holds. Returns false for a group that
  // holds nothing (no use as a victim).
  bool Add(const VictimCandidate& c) {
    std::vector<Allocation> held = snapshot_.AllocationsOf(c.pg_id);
    if (held.empty()) return false;
    Victim v{c.pg_id, c.priority, c.sequence, 0, {}, c.label};
    Holdings& h = holdings_.emplace_back();
    absl::btree_set<std::string> slices;
    for (const Allocation& a : held) {
      if (auto it = a.resources.find(kResourceTpu); it != a.resources.end()) {
        v.tpu += it->second / kResourceScale;
      }
      for (const auto& [name, amount] : a.resources) {
        if (amount > 0) h.resources.insert(name);
      }
      const int64_t node = snapshot_.NodeIndex(a.node_id);
      if (node < 0) continue;
      h.nodes.insert(static_cast<uint32_t>(node));
      const int32_t slice =
          snapshot_.SliceIndexOf(snapshot_.node(static_cast<uint32_t>(node)));
      if (slice >= 0) {
        slices.insert(snapshot_.slice(static_cast<uint32_t>(slice)).info.name);
      }
    }
    v.slices.assign(slices.begin(), slices.end());
    victims_.push_back(std::move(v));
    return true;
  }

  std::vector<Victim>& victims() { return victims_; }
  int solves() const { return solves_; }
  bool out_of_solves() const { return solves_ >= options_.max_solves; }

  // The request solved with `set` (indexes into victims()) released.
  Decision Try(const std::vector<size_t>& set) {
    ++solves_;
    SnapshotDelta delta;
    for (size_t i : set) delta.release_pg_ids.push_back(victims_[i].pg_id);
    auto released = snapshot_.Apply(delta);
    if (!released.ok()) {
      Decision d;
      d.outcome = Decision::kUnschedulable;
      d.diagnosis.summary = std::string(released.status().message());
      return d;
    }
    return Solve(**released, request_);
  }

  // Whether releasing victim i can help at all: for a slice request it
  // holds a host of a slice of the generation asked for (any holder keeps
  // a slice from being whole); otherwise it holds a resource some bundle
  // asks for.
  bool Relevant(size_t i) const {
    const Holdings& h = holdings_[i];
    if (request_.slice.has_value()) {
      return std::any_of(h.nodes.begin(), h.nodes.end(), [&](uint32_t node) {
        return HostsSliceOf(snapshot_, node, request_.slice->generation);
      });
    }
    auto asks = [&](const std::vector<Bundle>& bundles) {
      for (const Bundle& b : bundles) {
        for (const auto& [name, amount] : b.resources) {
          if (amount > 0 && h.resources.contains(name)) return true;
        }
      }
      return false;
    };
    if (asks(request_.bundles)) return true;
    for (const std::vector<Bundle>& f : request_.fallbacks) {
      if (asks(f)) return true;
    }
    return false;
  }

  Cost CostOf(const std::vector<size_t>& set) const {
    Cost cost{INT32_MIN, set.size(), 0, 0};
    int64_t oldest = INT64_MAX;
    for (size_t i : set) {
      const Victim& v = victims_[i];
      std::get<0>(cost) = std::max(std::get<0>(cost), v.priority);
      std::get<2>(cost) += v.tpu;
      oldest = std::min(oldest, static_cast<int64_t>(v.sequence));
    }
    std::get<3>(cost) = set.empty() ? 0 : -oldest;
    return cost;
  }

  // Of `pool`, the victims holding an allocation on a node `d` uses.
  std::vector<size_t> OnNodesOf(const Decision& d,
                                const std::vector<size_t>& pool) const {
    absl::flat_hash_set<uint32_t> used;
    for (const std::string& id : d.bundle_nodes) {
      const int64_t i = snapshot_.NodeIndex(id);
      if (i >= 0) used.insert(static_cast<uint32_t>(i));
    }
    std::vector<size_t> out;
    for (size_t i : pool) {
      for (uint32_t node : holdings_[i].nodes) {
        if (used.contains(node)) {
          out.push_back(i);
          break;
        }
      }
    }
    return out;
  }

  // For a whole-slice request: the victims of the cheapest num_slices
  // slices of the shape whose every holder is in `pool` (whole slices, so
  // two half-freed slices never count as one). Empty when too few.
  std::vector<size_t> CheapestSlices(const std::vector<size_t>& pool) const {
    if (!request_.slice.has_value()) return {};
    auto shape =
        ResolveTpuShape(request_.slice->generation, request_.slice->topology);
    if (!shape.ok()) return {};
    const size_t want = static_cast<size_t>(request_.slice->num_slices);
    absl::flat_hash_map<std::string, size_t> in_pool;
    for (size_t i : pool) in_pool[victims_[i].pg_id] = i;
    std::vector<std::pair<Cost, std::vector<size_t>>> options;
    const SliceKey lo{shape->generation, shape->topology, "", ""};
    for (auto it = snapshot_.slices_by_key().lower_bound(lo);
         it != snapshot_.slices_by_key().end() &&
         it->first.generation == shape->generation &&
         it->first.topology == shape->topology;
         ++it) {
      for (uint32_t s : it->second) {
        const InventorySnapshot::SliceEntry& slice = snapshot_.slice(s);
        if (!slice.info.intact) continue;
        // A free slice costs nothing: a multi-slice request may take it
        // beside freed ones.
        absl::btree_set<size_t> holders;
        bool usable = true;
        for (uint32_t host : snapshot_.HostIndexes(slice)) {
          for (const Allocation& a : snapshot_.node(host).allocations) {
            auto found = in_pool.find(a.pg_id);
            if (found == in_pool.end()) {
              usable = false;
              break;
            }
            holders.insert(found->second);
          }
          if (!usable) break;
        }
        if (!usable || (holders.empty() && want == 1)) continue;
        std::vector<size_t> set(holders.begin(), holders.end());
        options.emplace_back(CostOf(set), std::move(set));
      }
    }
    if (options.size() < want) return {};
    std::stable_sort(
        options.begin(), options.end(),
        [](const auto& a, const auto& b) { return a.first < b.first; });
    absl::btree_set<size_t> chosen;
    for (size_t k = 0; k < want; ++k) {
      chosen.insert(options[k].second.begin(), options[k].second.end());
    }
    return {chosen.begin(), chosen.end()};
  }

 private:
  const InventorySnapshot& snapshot_;
  const PlacementRequest& request_;
  const PreemptionOptions& options_;
  // What victims_[i] holds: node indexes and resource names.
  struct Holdings {
    absl::btree_set<uint32_t> nodes;
    absl::flat_hash_set<std::string> resources;
  };
  std::vector<Victim> victims_;
  std::vector<Holdings> holdings_;  // parallel to victims_
  int solves_ = 0;
};

// The order victims are listed and spared in: the most costly to lose first
// (highest priority, most TPU, oldest).
bool CostlierFirst(const Victim& x, const Victim& y) {
  return std::tie(y.priority, y.tpu, x.sequence, x.pg_id) <
         std::tie(x.priority, x.tpu, y.sequence, y.pg_id);
}

std::string VictimsText(const std::vector<Victim>& victims) {
  return absl::StrJoin(victims, ", ", [](std::string* out, const Victim& v) {
    std::vector<std::string> about;
    if (!v.label.empty()) about.push_back(v.label);
    if (v.tpu > 0) {
      about.push_back(absl::StrCat(v.tpu, " TPU",
                                   v.slices.empty() ? "" : " on slice ",
                                   absl::StrJoin(v.slices, ", ")));
    }
    absl::StrAppend(out, v.pg_id);
    if (!about.empty())
      absl::StrAppend(out, " (", absl::StrJoin(about, ", "), ")");
  });
}

}  // namespace

PreemptionPlan PlanPreemption(const InventorySnapshot& snapshot,
                              const PlacementRequest& request,
                              std::vector<VictimCandidate> candidates,
                              const PreemptionOptions& options) {
  PreemptionPlan plan;
  // Lowest priority first, then younger first: the order victims are
  // preferred in, which also decides which candidates a bound drops.
  std::sort(candidates.begin(), candidates.end(),
            [](const VictimCandidate& a, const VictimCandidate& b) {
              return std::tie(a.priority, b.sequence, a.pg_id) <
                     std::tie(b.priority, a.sequence, b.pg_id);
            });
  if (candidates.size() > options.max_candidates) {
    candidates.resize(options.max_candidates);
    plan.bound_hit = true;
  }
  Planner planner(snapshot, request, options);
  for (const VictimCandidate& c : candidates) planner.Add(c);
  std::vector<Victim>& all = planner.victims();

  // (1) The lowest priority level that, released with every level below
  // it, makes room. Releasing more never takes room away, so the levels are
  // searched by bisection: a few solves however many priorities there are.
  std::vector<size_t> level_end;  // one past the last victim of each level
  for (size_t i = 0; i < all.size(); ++i) {
    if (i + 1 == all.size() || all[i + 1].priority != all[i].priority) {
      level_end.push_back(i + 1);
    }
  }
  auto upto = [&](size_t k) {
    std::vector<size_t> set(level_end[k]);
    for (size_t i = 0; i < set.size(); ++i) set[i] = i;
    return set;
  };
  Decision d;
  d.outcome = Decision::kUnschedulable;
  d.diagnosis.summary = "no running group of lower priority holds capacity";
  bool fits = false;
  std::vector<size_t> level;
  if (!level_end.empty()) {
    size_t lo = 0;
    size_t hi = level_end.size() - 1;
    d = planner.Try(upto(hi));
    fits = d.outcome == Decision::kPlaced;
    Decision at_hi = d;
    while (fits && lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      Decision trial = planner.Try(upto(mid));
      if (trial.outcome == Decision::kPlaced) {
        hi = mid;
        at_hi = std::move(trial);
      } else {
        lo = mid + 1;
      }
    }
    if (fits) {
      level = upto(hi);
      d = std::move(at_hi);
    }
  }
  auto finish = [&](std::string summary) {
    plan.solves = planner.solves();
    plan.summary = std::move(summary);
    if (plan.bound_hit) {
      absl::StrAppend(&plan.summary, " (search bounded at ",
                      options.max_candidates, " candidates / ",
                      options.max_solves,
                      " solves: the set may not be minimal)");
    }
    return plan;
  };
  if (!fits) {
    plan.decision = d;
    return finish(absl::StrCat(
        "preempting all ", all.size(),
        " running group(s) of lower priority would not make room: ",
        d.diagnosis.summary));
  }

  // (2) Only the groups in the way of that placement; for slices also the
  // cheapest whole slices, whichever costs less.
  std::vector<size_t> best = level;
  Decision best_d = d;
  auto consider = [&](std::vector<size_t> set) {
    if (set.empty() || planner.CostOf(set) >= planner.CostOf(best)) return;
    Decision trial = planner.Try(set);
    if (trial.outcome != Decision::kPlaced) return;
    best = std::move(set);
    best_d = std::move(trial);
  };
  std::vector<size_t> relevant;
  for (size_t i : level) {
    if (planner.Relevant(i)) relevant.push_back(i);
  }
  consider(relevant);
  consider(planner.OnNodesOf(d, level));
  consider(planner.CheapestSlices(level));

  // One victim beats any two of the same level: try them cheapest first
  // (least TPU, youngest), the first that makes room is the best single.
  // A slice request's single victims are the sole holders of a slice,
  // which CheapestSlices() has weighed already.
  std::vector<size_t> singles;
  if (!request.slice.has_value()) singles = relevant;
  std::sort(singles.begin(), singles.end(), [&](size_t a, size_t b) {
    return planner.CostOf({a}) < planner.CostOf({b});
  });
  for (size_t i : singles) {
    if (planner.CostOf({i}) >= planner.CostOf(best)) break;
    if (planner.out_of_solves()) {
      plan.bound_hit = true;
      break;
    }
    Decision trial = planner.Try({i});
    if (trial.outcome == Decision::kPlaced) {
      best = {i};
      best_d = std::move(trial);
      break;
    }
  }

  // (3) Spare victims while it still fits: the most costly to lose first
  // (highest priority, most TPU, oldest).
  std::vector<size_t> order = best;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return CostlierFirst(all[a], all[b]); });
  for (size_t spare : order) {
    if (planner.out_of_solves()) {
      plan.bound_hit = true;
      break;
    }
    std::vector<size_t> without;
    for (size_t i : best) {
      if (i != spare) without.push_back(i);
    }
    if (without.empty()) continue;
    Decision trial = planner.Try(without);
    if (trial.outcome == Decision::kPlaced) {
      best = std::move(without);
      best_d = std::move(trial);
    }
  }

  std::sort(best.begin(), best.end(),
            [&](size_t a, size_t b) { return CostlierFirst(all[a], all[b]); });
  plan.found = true;
  for (size_t i : best) plan.victims.push_back(all[i]);
  plan.decision = std::move(best_d);
  return finish(
      absl::StrCat("preempting ", plan.victims.size(),
                   " group(s) of priority <= ", plan.victims.front().priority,
                   " makes room: ", VictimsText(plan.victims)));
}

std::vector<uint32_t> NodesARequestMayUse(const InventorySnapshot& snapshot,
                                          const PlacementRequest& request) {
  std::vector<uint32_t> out;
  const uint32_t n = static_cast<uint32_t>(snapshot.index_end());
  if (request.slice.has_value()) {
    for (uint32_t i = 0; i < n; ++i) {
      if (snapshot.has_node(i) &&
          HostsSliceOf(snapshot, i, request.slice->generation))
        out.push_back(i);
    }
    return out;
  }
  // Which nodes a bundle may use depends on its selector and on the names of
  // the resources it asks, not on the amounts: each distinct pair once (a
  // gang's bundles are mostly alike, even when their amounts differ).
  std::vector<bool> usable(n);
  absl::flat_hash_set<std::pair<std::string, std::vector<std::string>>> seen;
  auto consider = [&](const std::vector<Bundle>& bundles) {
    for (const Bundle& b : bundles) {
      std::vector<std::string> asked;
      for (const auto& [name, amount] : b.resources) {
        if (amount > 0) asked.push_back(name);
      }
      if (!seen.emplace(SelectorToString(b.selector), asked).second) continue;
      for (uint32_t i : snapshot.MatchingNodes(b.selector)) {
        if (usable[i]) continue;
        const ResourceSet& has = snapshot.node(i).node.resources;
        usable[i] = std::all_of(asked.begin(), asked.end(),
                                [&](const std::string& name) {
                                  auto it = has.find(name);
                                  return it != has.end() && it->second > 0;
                                });
      }
    }
  };
  consider(request.bundles);
  for (const std::vector<Bundle>& fallback : request.fallbacks) {
    consider(fallback);
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (usable[i]) out.push_back(i);
  }
  return out;
}

}  // namespace sliced::scheduler
