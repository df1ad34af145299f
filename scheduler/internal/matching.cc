// STRICT_SPREAD's augmenting-path matching; see matching.h.
//
// Thread-safety: pure (all state is local to one call).
#include "scheduler/internal/matching.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace sliced::scheduler::internal {
namespace {

// Kuhn's algorithm over one MatchingProblem.
class Matcher {
 public:
  Matcher(const SnapshotState& snap, const Released& released,
          const MatchingProblem& problem)
      : bundles_(*problem.bundles),
        group_(problem.group),
        candidates_(*problem.candidates),
        base_(snap, &released),
        at_(problem.start.begin(), problem.start.end()) {
    for (size_t b = 0; b < bundles_.size(); ++b) {
      if (at_[b] < 0) continue;
      const uint32_t n = static_cast<uint32_t>(at_[b]);
      owner_[n] = b;
      if (!bundles_[b].pinned_node_id.empty()) {
        pinned_nodes_.insert(n);
        base_.Take(n, bundles_[b].resources);
      }
    }
  }

  std::optional<std::vector<uint32_t>> Run() {
    if (!EnoughNodes()) return std::nullopt;
    for (size_t b = 0; b < bundles_.size(); ++b) {
      if (at_[b] >= 0) continue;
      visited_.clear();
      if (!Augment(b) || budget_ < 0) return std::nullopt;
    }
    return std::vector<uint32_t>(at_.begin(), at_.end());
  }

 private:
  // Hall's condition, checked before any search, on the bundles that may
  // move in the groups greedy left a bundle of: they need as many distinct
  // nodes that fit one of them, and each group as many that fit its
  // bundles. A tier of PlaceGeneric's fallback often holds far fewer nodes
  // than the gang, and a failed search walks the candidates of every
  // bundle it reaches: O(placed bundles x candidates) against one walk of
  // those groups' candidates here (the search walks them too). The walk
  // has a budget of its own; past it, the search decides.
  bool EnoughNodes() {
    struct Need {
      int64_t bundles = 0;
      bool unplaced = false;
      const ResourceSet* resources = nullptr;  // the group's amounts
    };
    absl::flat_hash_map<int, Need> needs;  // by group
    for (size_t b = 0; b < bundles_.size(); ++b) {
      if (!bundles_[b].pinned_node_id.empty()) continue;
      Need& need = needs[group_[b]];
      ++need.bundles;
      need.unplaced = need.unplaced || at_[b] < 0;
      need.resources = &bundles_[b].resources;
    }
    int64_t steps = kMatchingBudget;
    Bits fit(candidates_.words());  // nodes that fit one of the bundles
    int64_t distinct = 0, moving = 0;
    for (const auto& [g, need] : needs) {
      if (!need.unplaced) continue;
      moving += need.bundles;
      const Group& group = candidates_.group(g);
      int64_t fits = 0;
      for (std::optional<Cursor> c = candidates_.Next(group, Cursor{}); c;
           c = candidates_.Next(group, Cursor{c->rank, c->pos + 1})) {
        if (--steps < 0) return true;
        const uint32_t n = static_cast<uint32_t>(c->pos);
        if (pinned_nodes_.contains(n) || !base_.Fits(n, *need.resources)) {
          continue;
        }
        ++fits;
        if (!TestBit(fit, n)) {
          SetBit(fit, n);
          ++distinct;
        }
      }
      if (fits < need.bundles) return false;
    }
    return distinct >= moving;
  }

  // Finds a node for bundle b, moving other unpinned bundles along an
  // augmenting path. False when there is none or the budget is spent.
  bool Augment(size_t b) {
    const Group& g = candidates_.group(group_[b]);
    for (std::optional<Cursor> c = candidates_.Next(g, Cursor{}); c;
         c = candidates_.Next(g, Cursor{c->rank, c->pos + 1})) {
      if (--budget_ < 0) return false;
      const uint32_t n = static_cast<uint32_t>(c->pos);
      if (pinned_nodes_.contains(n) || visited_.contains(n)) continue;
      if (!base_.Fits(n, bundles_[b].resources)) continue;
      visited_.insert(n);
      auto it = owner_.find(n);
      if (it == owner_.end() || (bundles_[it->second].pinned_node_id.empty() &&
                                 Augment(it->second))) {
        owner_[n] = b;
        at_[b] = n;
        return true;
      }
    }
    return false;
  }

  const std::vector<Bundle>& bundles_;
  absl::Span<const int> group_;
  const CandidateGroups& candidates_;
  Overlay base_;  // only pinned bundles' resources are taken
  std::vector<int64_t> at_;
  absl::flat_hash_map<uint32_t, int64_t> owner_;  // node -> bundle
  absl::flat_hash_set<uint32_t> pinned_nodes_;
  absl::flat_hash_set<uint32_t> visited_;
  int64_t budget_ = kMatchingBudget;
};

}  // namespace

std::optional<std::vector<uint32_t>> MatchDistinct(
    const SnapshotState& snap, const Released& released,
    const MatchingProblem& problem) {
  return Matcher(snap, released, problem).Run();
}

}  // namespace sliced::scheduler::internal
