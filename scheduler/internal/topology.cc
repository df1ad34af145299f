// Label-domain gangs; see topology.h.
//
// Thread-safety: a TopologyPlacer lives inside one PlaceTopology() call.
#include "scheduler/internal/topology.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/domains.h"
#include "scheduler/internal/resources.h"
#include "scheduler/types.h"

namespace sliced::scheduler::internal {
namespace {

constexpr uint32_t kUnplaced = std::numeric_limits<uint32_t>::max();

using Group = std::vector<size_t>;  // bundle indexes, ascending

// What the diagnosis shows per level, summed over the whole run.
struct LevelStats {
  int64_t considered = 0;
  int64_t fitting = 0;
  absl::btree_map<std::string, int64_t> rejected;  // reason -> count
};

// One group's scan of a level's domains (step 2 of topology.h).
struct Scan {
  std::vector<std::string> domains;  // best fit first
  int64_t considered = 0;
  int64_t big_enough = 0;  // total resources hold the group
  bool pinned = false;     // only the pinned node's domain was scanned
  absl::btree_map<std::string, int64_t> rejected;
};

bool IsSpread(Strategy s) {
  return s == Strategy::kSpread || s == Strategy::kStrictSpread;
}

bool IsStrict(Strategy s) {
  return s == Strategy::kStrictPack || s == Strategy::kStrictSpread;
}

// "bundle 3" or "bundles 4-7" (groups are consecutive).
std::string GroupName(const Group& group) {
  if (group.size() == 1) return absl::StrCat("bundle ", group.front());
  return absl::StrCat("bundles ", group.front(), "-", group.back());
}

// The resource a group is measured by: the first it asks for of TPU, GPU,
// CPU, memory; else its first.
std::string MainResource(const ResourceSet& need) {
  for (absl::string_view name : {kResourceTpu, absl::string_view("GPU"),
                                 kResourceCpu, kResourceMemory}) {
    auto it = need.find(name);
    if (it != need.end() && it->second > 0) return std::string(name);
  }
  for (const auto& [name, amount] : need) {
    if (amount > 0) return name;
  }
  return std::string(kResourceCpu);
}

std::string Counts(const absl::btree_map<std::string, int64_t>& rejected) {
  std::vector<std::string> parts;
  for (const auto& [reason, count] : rejected) {
    parts.push_back(absl::StrCat(count, " ", reason));
  }
  return absl::StrJoin(parts, ", ");
}

class TopologyPlacer {
 public:
  TopologyPlacer(const GangContext& ctx, const std::vector<Bundle>& bundles,
                 const LabelSelector* priority,
                 const std::vector<TopologyLevel>& levels)
      : ctx_(ctx),
        snap_(*ctx.snap),
        bundles_(bundles),
        priority_(priority),
        levels_(levels),
        adjusted_(*ctx.released),
        nodes_(bundles.size(), kUnplaced),
        on_whole_tpu_(bundles.size(), 0),
        stats_(levels.size()) {}

  Attempt Run() {
    Group all(bundles_.size());
    std::iota(all.begin(), all.end(), size_t{0});
    if (Place(all, LabelSelector(), 0)) return Placed();
    Failure failure;
    failure.summary = summary_;
    failure.infeasible = infeasible_;
    for (size_t l = 0; l < levels_.size(); ++l) {
      DiagnosisStep step;
      step.step = absl::StrCat(ctx_.label, "topology level ", l, " ",
                               levels_[l].label, " ",
                               StrategyName(levels_[l].strategy), " domains");
      step.considered = stats_[l].considered;
      step.accepted = stats_[l].fitting;
      for (const auto& [reason, count] : stats_[l].rejected) {
        step.rejected.push_back({reason, count});
      }
      failure.steps.push_back(std::move(step));
    }
    return Attempt::Failed(std::move(failure));
  }

 private:
  // Places `group` inside `scope` (the chosen values of the levels above)
  // from `level` on. On failure nothing of `group` stays taken.
  bool Place(const Group& group, const LabelSelector& scope, size_t level) {
    if (level == levels_.size()) return PlaceLeaf(group, scope);
    const TopologyLevel& lv = levels_[level];
    const size_t size = IsSpread(lv.strategy) ? 1
                        : lv.bundles_per_domain > 0
                            ? static_cast<size_t>(lv.bundles_per_domain)
                            : group.size();
    std::vector<Group> groups;
    for (size_t start = 0; start < group.size(); start += size) {
      groups.emplace_back(group.begin() + start,
                          group.begin() + std::min(group.size(), start + size));
    }
    if (PlaceGroups(groups, scope, level)) return true;
    if (IsStrict(lv.strategy)) return false;
    return Place(group, scope, level + 1);  // PACK / SPREAD: a preference
  }

  // Each group in its own domain of `level`, all or none.
  bool PlaceGroups(const std::vector<Group>& groups, const LabelSelector& scope,
                   size_t level) {
    const TopologyLevel& lv = levels_[level];
    // Domains of groups with a pinned bundle (re-placing lost bundles) are
    // theirs: no other group takes them.
    std::vector<std::optional<std::string>> pinned(groups.size());
    absl::flat_hash_set<std::string> used;
    for (size_t g = 0; g < groups.size(); ++g) {
      pinned[g] = PinnedValue(groups[g], lv.label);
      if (pinned[g].has_value()) used.insert(*pinned[g]);
    }
    // The groups that ask what group g asks can only go to the domains big
    // enough for it, one each: fewer such domains than such groups and no
    // state of the cluster helps. (Groups asking less may use other domains:
    // comparing with every group's count called a mixed gang infeasible that
    // fits an empty cluster.)
    std::vector<size_t> alike(groups.size(), 0);
    if (level == 0 && IsStrict(lv.strategy)) {
      std::vector<ResourceSet> needs;
      needs.reserve(groups.size());
      std::map<ResourceSet, size_t> counts;
      for (const Group& group : groups) {
        needs.push_back(NeedOf(group));
        ++counts[needs.back()];
      }
      for (size_t g = 0; g < groups.size(); ++g) alike[g] = counts[needs[g]];
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      if (pinned[g].has_value()) used.erase(*pinned[g]);
      const Scan scan = ScanDomains(groups[g], scope, level, used, pinned[g]);
      if (!scan.pinned && static_cast<size_t>(scan.big_enough) < alike[g]) {
        infeasible_ = true;  // too few domains could ever hold the groups
      }
      std::string first_inner;
      bool placed = false;
      int tries = 0;
      for (const std::string& value : scan.domains) {
        if (tries++ == kMaxDomainTries) {
          ++stats_[level].rejected["beyond the search bound"];
          break;
        }
        LabelSelector inner = scope;
        inner.terms.push_back({lv.label, SelectorOp::kEquals, {value}});
        if (Place(groups[g], inner, level + 1)) {
          used.insert(value);
          placed = true;
          break;
        }
        ++stats_[level].rejected["bundles do not fit"];
        if (first_inner.empty()) {
          first_inner = absl::StrCat("; in ", lv.label, "=", value, ": ",
                                     summary_);
        }
      }
      if (placed) continue;
      summary_ = absl::StrCat(
          "no ", lv.label, " domain holds ", GroupName(groups[g]), " (",
          StrategyName(lv.strategy), "): ", scan.considered, " considered",
          scan.rejected.empty() ? "" : ", ", Counts(scan.rejected),
          scan.domains.empty()
              ? ""
              : absl::StrCat(", ", scan.domains.size(), " tried"),
          first_inner);
      for (size_t done = 0; done < g; ++done) Undo(groups[done]);
      return false;
    }
    return true;
  }

  // The value of `label` on the node of the group's first pinned bundle
  // ("" when that node is unknown or lacks it); nullopt without pins.
  std::optional<std::string> PinnedValue(const Group& group,
                                         const std::string& label) const {
    for (size_t b : group) {
      if (bundles_[b].pinned_node_id.empty()) continue;
      const int64_t i = snap_.NodeIndex(bundles_[b].pinned_node_id);
      if (i < 0) return std::string();
      auto it = snap_.node(i).node.labels.find(label);
      return it == snap_.node(i).node.labels.end() ? std::string() : it->second;
    }
    return std::nullopt;
  }

  // Step 2 of topology.h for one group; `used`: values it may not take.
  // What `group`'s bundles ask in sum (amounts > 0).
  ResourceSet NeedOf(const Group& group) const {
    ResourceSet need;
    for (size_t b : group) {
      for (const auto& [name, amount] : bundles_[b].resources) {
        if (amount > 0) need[name] = AddAmounts(need[name], amount);
      }
    }
    return need;
  }

  Scan ScanDomains(const Group& group, const LabelSelector& scope, size_t level,
                   const absl::flat_hash_set<std::string>& used,
                   const std::optional<std::string>& pinned_value) {
    const TopologyLevel& lv = levels_[level];
    LevelStats& stats = stats_[level];
    Scan scan;
    const ResourceSet need = NeedOf(group);
    const bool pinned = scan.pinned = pinned_value.has_value();
    const std::string main = MainResource(need);
    auto index = snap_.label_index().find(lv.label);
    if (index == snap_.label_index().end() || (pinned && pinned_value->empty())) {
      const std::string reason =
          pinned ? absl::StrCat("pinned node without ", lv.label)
                 : absl::StrCat("no node labelled ", lv.label);
      ++scan.rejected[reason];
      ++stats.rejected[reason];
      return scan;
    }
    auto reject = [&](const std::string& reason) {
      ++scan.rejected[reason];
      ++stats.rejected[reason];
    };
    const Overlay overlay(snap_, &adjusted_);
    // What the group's pinned bundles keep on each node: a DRAINING node
    // takes no new bundle but keeps those, so they count as its free room.
    absl::flat_hash_map<std::string, ResourceSet> kept;
    for (size_t b : group) {
      const Bundle& bundle = bundles_[b];
      if (bundle.pinned_node_id.empty()) continue;
      ResourceSet& on = kept[bundle.pinned_node_id];
      for (const auto& [name, amount] : bundle.resources) {
        on[name] = AddAmounts(on[name], amount);
      }
    }
    std::vector<std::pair<int64_t, std::string>> fitting;
    for (const auto& [value, posting] : *index->second) {
      if (pinned && value != *pinned_value) continue;
      ++scan.considered;
      ++stats.considered;
      ResourceSet total, free;
      int64_t in_scope = 0, schedulable = 0;
      for (uint32_t slot : *posting) {
        const uint32_t i = snap_.IndexOfSlot(slot);
        const InventorySnapshot::NodeEntry& e = snap_.node(i);
        if (!Matches(scope, e.node.labels)) continue;
        if (priority_ != nullptr && !Matches(*priority_, e.node.labels)) {
          continue;
        }
        ++in_scope;
        const bool takes = TakesPlacements(e.node);
        const auto keeps = takes ? kept.end() : kept.find(e.node.node_id);
        schedulable += takes || keeps != kept.end() ? 1 : 0;
        for (const auto& [name, amount] : need) {
          total[name] = AddAmounts(total[name], Amount(e.node.resources, name));
          const int64_t room = std::max<int64_t>(0, overlay.Free(i, name));
          if (takes) {
            free[name] = AddAmounts(free[name], room);
          } else if (keeps != kept.end()) {
            free[name] = AddAmounts(
                free[name], std::min(room, Amount(keeps->second, name)));
          }
        }
      }
      if (in_scope == 0) {
        reject("outside the domain above or the priority");
        continue;
      }
      std::string small;
      for (const auto& [name, amount] : need) {
        if (total[name] < amount && small.empty()) small = name;
      }
      if (!small.empty()) {
        reject(absl::StrCat("too little total ", small));
        continue;
      }
      ++scan.big_enough;
      if (used.contains(value)) {
        reject("taken by another group of this gang");
        continue;
      }
      if (lv.label == kLabelTpuSliceName) {
        const int64_t s = snap_.SliceIndex(value);
        if (s >= 0 && !snap_.slice(s).info.intact) {
          reject("slice not intact");
          continue;
        }
      }
      if (schedulable == 0) {
        reject("no node takes placements");
        continue;
      }
      std::string short_of;
      for (const auto& [name, amount] : need) {
        if (free[name] < amount && short_of.empty()) short_of = name;
      }
      if (!short_of.empty()) {
        reject(absl::StrCat("too little free ", short_of));
        continue;
      }
      ++stats.fitting;
      fitting.emplace_back(Amount(free, main), value);
    }
    std::sort(fitting.begin(), fitting.end());
    for (auto& [free_main, value] : fitting) {
      scan.domains.push_back(std::move(value));
    }
    return scan;
  }

  // The last level: the group as a plain gang inside `scope`.
  bool PlaceLeaf(const Group& group, const LabelSelector& scope) {
    std::vector<Bundle> sub;
    sub.reserve(group.size());
    for (size_t b : group) sub.push_back(bundles_[b]);
    const LabelSelector selector = And(scope, priority_);
    GangContext ctx = ctx_;
    ctx.released = &adjusted_;
    const Attempt attempt =
        PlaceGeneric(ctx, sub, selector.empty() ? nullptr : &selector);
    if (!attempt.placed) {
      summary_ = attempt.summary;
      return false;
    }
    on_whole_tpu_[group.front()] = attempt.cpu_on_whole_tpu;
    for (size_t j = 0; j < group.size(); ++j) {
      const uint32_t i = attempt.nodes[j];
      nodes_[group[j]] = i;
      ResourceSet& adjusted = adjusted_[i];
      for (const auto& [name, amount] : bundles_[group[j]].resources) {
        adjusted[name] -= amount;
      }
    }
    return true;
  }

  // Gives back what the bundles of `group` took.
  void Undo(const Group& group) {
    for (size_t b : group) {
      on_whole_tpu_[b] = 0;
      if (nodes_[b] == kUnplaced) continue;
      ResourceSet& adjusted = adjusted_[nodes_[b]];
      for (const auto& [name, amount] : bundles_[b].resources) {
        adjusted[name] += amount;
      }
      nodes_[b] = kUnplaced;
    }
  }

  // The placed attempt; its summary names each level's chosen values.
  Attempt Placed() const {
    Attempt attempt;
    attempt.placed = true;
    attempt.nodes = nodes_;
    std::vector<std::string> parts;
    for (size_t l = 0; l < levels_.size(); ++l) {
      std::vector<std::string> values;
      absl::btree_set<std::string> seen;
      for (uint32_t i : nodes_) {
        auto it = snap_.node(i).node.labels.find(levels_[l].label);
        const std::string value =
            it == snap_.node(i).node.labels.end() ? "-" : it->second;
        if (seen.insert(value).second) values.push_back(value);
      }
      parts.push_back(
          absl::StrCat(levels_[l].label, "=", absl::StrJoin(values, ",")));
    }
    attempt.summary = absl::StrCat("placed in label domains ",
                                   absl::StrJoin(parts, "; "));
    for (int64_t n : on_whole_tpu_) attempt.cpu_on_whole_tpu += n;
    return attempt;
  }

  const GangContext& ctx_;
  const SnapshotState& snap_;
  const std::vector<Bundle>& bundles_;
  const LabelSelector* priority_;
  const std::vector<TopologyLevel>& levels_;
  // The snapshot's capacity plus what a re-placed group gives back, minus
  // what the groups placed so far took.
  Released adjusted_;
  std::vector<uint32_t> nodes_;  // per bundle; kUnplaced until placed
  // Per group placed, at its first bundle: its Attempt::cpu_on_whole_tpu.
  std::vector<int64_t> on_whole_tpu_;
  std::vector<LevelStats> stats_;
  std::string summary_;  // why the last thing tried failed
  bool infeasible_ = false;
};

}  // namespace

Attempt PlaceTopology(const GangContext& ctx,
                      const std::vector<Bundle>& bundles,
                      const LabelSelector* priority,
                      const std::vector<TopologyLevel>& levels) {
  return TopologyPlacer(ctx, bundles, priority, levels).Run();
}

}  // namespace sliced::scheduler::internal
