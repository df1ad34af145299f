// The gang placer; see gang_placer.h.
//
// Thread-safety: a GangPlacement lives inside one PlaceGang() or
// PlaceGangOnOneNode() call.
#include "scheduler/internal/gang_placer.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "scheduler/internal/candidates.h"
#include "scheduler/internal/diagnosis.h"
#include "scheduler/internal/matching.h"

namespace sliced::scheduler::internal {
namespace {

// How many fitting candidates of the best rank PACK/SPREAD/STRICT_PACK
// compare before choosing the tightest.
constexpr int kBestFitWindow = 8;
// Candidates PACK examines when trying the whole gang on one node.
constexpr int64_t kPackOneNodeScan = 1024;

// Per-bundle working state: inline up to this many bundles, so that the
// small gangs of most requests allocate nothing for it.
constexpr size_t kInlineBundles = 8;
template <typename T>
using PerBundle = absl::InlinedVector<T, kInlineBundles>;

// Bundles largest first: TPU, then CPU, then memory, then bundle order.
PerBundle<size_t> LargestFirst(const std::vector<Bundle>& bundles) {
  static const std::string cpu(kResourceCpu), memory(kResourceMemory);
  PerBundle<std::tuple<int64_t, int64_t, int64_t>> size(bundles.size());
  PerBundle<size_t> order(bundles.size());
  for (size_t b = 0; b < order.size(); ++b) {
    order[b] = b;
    const ResourceSet& r = bundles[b].resources;
    size[b] = {Amount(r, TpuName()), Amount(r, cpu), Amount(r, memory)};
  }
  // Ties in bundle order, as a stable sort would keep them, without its
  // buffer: one allocation fewer per solve, most of which sort one bundle.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return size[a] > size[b] || (size[a] == size[b] && a < b);
  });
  return order;
}

// Per bundle: its candidate group and its effective selector.
struct GangGroups {
  PerBundle<int> group;
  PerBundle<LabelSelector> selectors;
};

// The working state of one placement of a gang: the overlay, the node per
// bundle so far and the nodes the gang uses. Each step places bundles or
// returns why it could not.
class GangPlacement {
 public:
  GangPlacement(const GangContext& ctx, size_t bundles)
      : ctx_(ctx),
        snap_(*ctx.snap),
        candidates_(snap_, ctx.cpu_rank_limit),
        overlay_(snap_, ctx.released),
        at_(bundles, -1) {}

  GangGroups ResolveGroups(const std::vector<Bundle>& bundles,
                           const LabelSelector* priority,
                           const LabelSelector* domain);
  // Bundles already on a node (re-placing a group's lost ones) stay there.
  // A pin is not checked against its bundle's selector: labels that changed
  // since the bundle was placed do not move it (Kubernetes' "ignored during
  // execution"). It must be within `priority`, so the gang's lost bundles
  // are re-placed in the capacity tier of its survivors.
  std::optional<Failure> PlacePinned(const std::vector<Bundle>& bundles,
                                     const LabelSelector* priority);
  std::optional<Failure> PackOrSpread(const std::vector<Bundle>& bundles,
                                      const GangGroups& groups);
  std::optional<Failure> StrictPack(const std::vector<Bundle>& bundles,
                                    const GangGroups& groups);
  std::optional<Failure> StrictSpread(const std::vector<Bundle>& bundles,
                                      const GangGroups& groups);
  // The node of the summed gang for PACK's one-node placement; -1 if none.
  int64_t OneNodeFor(const std::vector<Bundle>& bundles,
                     const LabelSelector* priority);
  // The placed gang: node per bundle and the success summary.
  Attempt Placed(size_t bundles) const;

 private:
  // Best fit among the first kBestFitWindow fitting candidates of the best
  // rank of candidate group `group`; moves the group's cursor to the first
  // fitting one. fresh_only skips nodes this gang already uses. -1 when
  // nothing fits.
  int64_t BestFit(int group, const ResourceSet& res, bool fresh_only,
                  int64_t scan_limit = -1);
  // A node of the gang that is a candidate of `group` and fits `res`: PACK
  // scans from the group's opened_pos on, SPREAD round-robin. -1 when none.
  int64_t PackOnGangNode(int group, const ResourceSet& res);
  int64_t SpreadOnGangNode(int group, const ResourceSet& res);
  // Distinct nodes that could ever hold some bundle of the gang (any state,
  // total capacity), for STRICT_SPREAD's infeasibility.
  size_t CountAbleNodes(const std::vector<Bundle>& bundles,
                        const GangGroups& groups) const;
  bool FitsTotal(uint32_t i, const ResourceSet& res) const;
  bool Opened(uint32_t node) const {
    if (opened_.size() > kInlineBundles) return opened_set_.contains(node);
    return std::find(opened_.begin(), opened_.end(), node) != opened_.end();
  }
  void Put(size_t b, uint32_t node, const ResourceSet& res);
  // Starts over from `nodes` (one per bundle).
  void Reassign(const std::vector<Bundle>& bundles,
                const std::vector<uint32_t>& nodes);
  Failure Explain(int64_t b, const ResourceSet& res,
                  const LabelSelector& selector, bool distinct) const {
    const absl::flat_hash_set<uint32_t> gang(opened_.begin(), opened_.end());
    return ExplainBundle(snap_, overlay_, gang, ctx_.label,
                         {b, &res, &selector, distinct});
  }

  const GangContext& ctx_;
  const SnapshotState& snap_;
  CandidateGroups candidates_;
  Overlay overlay_;
  PerBundle<int64_t> at_;       // node per bundle, -1 while unplaced
  PerBundle<uint32_t> opened_;  // gang nodes in opening order
  // The same nodes, for lookups, once there are more than kInlineBundles
  // (a scan of opened_ until then; Opened()).
  absl::flat_hash_set<uint32_t> opened_set_;
  size_t round_robin_ = 0;  // SPREAD: next gang node to offer
};

GangGroups GangPlacement::ResolveGroups(const std::vector<Bundle>& bundles,
                                        const LabelSelector* priority,
                                        const LabelSelector* domain) {
  GangGroups out;
  out.group.resize(bundles.size());
  out.selectors.resize(bundles.size());
  // Bundles of a gang repeat a few shapes: look at the last few distinct
  // ones before building a group key.
  absl::InlinedVector<size_t, 4> recent;
  for (size_t b = 0; b < bundles.size(); ++b) {
    auto same = std::find_if(recent.rbegin(), recent.rend(), [&](size_t r) {
      return bundles[b].selector == bundles[r].selector &&
             bundles[b].resources == bundles[r].resources;
    });
    if (same != recent.rend()) {
      out.selectors[b] = out.selectors[*same];
      out.group[b] = out.group[*same];
      continue;
    }
    if (recent.size() == 4) recent.erase(recent.begin());
    recent.push_back(b);
    out.selectors[b] = And(bundles[b].selector, priority);
    if (domain != nullptr) out.selectors[b] = And(out.selectors[b], domain);
    out.group[b] = candidates_.GroupFor(
        out.selectors[b], KindOf(bundles[b].resources), bundles[b].resources);
  }
  return out;
}

std::optional<Failure> GangPlacement::PlacePinned(
    const std::vector<Bundle>& bundles, const LabelSelector* priority) {
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (bundles[b].pinned_node_id.empty()) continue;
    const int64_t i = snap_.NodeIndex(bundles[b].pinned_node_id);
    Failure failure;
    std::string why;
    if (i < 0) {
      failure.infeasible = true;
      why = "is not in the inventory";
    } else if (const Node& n = snap_.node(i).node;
               !TakesPlacements(n) && !StaysOn(n)) {
      why = absl::StrCat("is ", WhyNoPlacements(n));
    } else if (priority != nullptr &&
               !Matches(*priority, snap_.node(i).node.labels)) {
      why = absl::StrCat("is outside this priority (",
                         SelectorToString(*priority), ")");
    } else if (!overlay_.Fits(i, bundles[b].resources)) {
      why = absl::StrCat("has no room for ",
                         ResourcesToString(bundles[b].resources));
    } else if (ctx_.strategy == Strategy::kStrictSpread &&
               Opened(static_cast<uint32_t>(i))) {
      failure.infeasible = true;
      why = "already holds another pinned bundle (STRICT_SPREAD)";
    }
    if (!why.empty()) {
      failure.summary =
          absl::StrCat("bundle ", b, " is pinned to node ",
                       bundles[b].pinned_node_id, ", which ", why);
      failure.steps.push_back(
          {absl::StrCat(ctx_.label, "bundle ", b, " pinned node"),
           1,
           0,
           {{why, 1}}});
      return failure;
    }
    Put(b, static_cast<uint32_t>(i), bundles[b].resources);
  }
  return std::nullopt;
}

std::optional<Failure> GangPlacement::PackOrSpread(
    const std::vector<Bundle>& bundles, const GangGroups& groups) {
  const bool pack = ctx_.strategy == Strategy::kPack;
  for (size_t b : LargestFirst(bundles)) {
    if (at_[b] >= 0) continue;
    const int g = groups.group[b];
    const ResourceSet& res = bundles[b].resources;
    int64_t node = pack ? PackOnGangNode(g, res) : -1;
    if (node < 0) node = BestFit(g, res, /*fresh_only=*/!pack);
    if (node < 0 && !pack) node = SpreadOnGangNode(g, res);
    if (node < 0) {
      return Explain(b, res, groups.selectors[b], /*distinct=*/false);
    }
    Put(b, static_cast<uint32_t>(node), res);
  }
  return std::nullopt;
}

int64_t GangPlacement::PackOnGangNode(int group, const ResourceSet& res) {
  Group& g = candidates_.group(group);
  for (; g.opened_pos < opened_.size(); ++g.opened_pos) {
    const uint32_t i = opened_[g.opened_pos];
    if (candidates_.Contains(g, i) && overlay_.Fits(i, res)) return i;
  }
  return -1;
}

int64_t GangPlacement::SpreadOnGangNode(int group, const ResourceSet& res) {
  const Group& g = candidates_.group(group);
  for (size_t k = 0; k < opened_.size(); ++k) {
    const uint32_t i = opened_[(round_robin_ + k) % opened_.size()];
    if (candidates_.Contains(g, i) && overlay_.Fits(i, res)) {
      round_robin_ = (round_robin_ + k + 1) % opened_.size();
      return i;
    }
  }
  return -1;
}

std::optional<Failure> GangPlacement::StrictPack(
    const std::vector<Bundle>& bundles, const GangGroups& groups) {
  ResourceSet sum;
  LabelSelector all;
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (at_[b] >= 0) continue;
    for (const auto& [name, amount] : bundles[b].resources) {
      sum[name] = AddAmounts(sum[name], amount);
    }
    all = And(all, &groups.selectors[b]);
  }
  if (sum.empty() && opened_.size() <= 1) return std::nullopt;
  int64_t node = -1;
  if (!opened_.empty()) {
    // Pinned bundles fix the node.
    const uint32_t i = opened_[0];
    if (opened_.size() == 1 && Matches(all, snap_.node(i).node.labels) &&
        overlay_.Fits(i, sum)) {
      node = i;
    }
  } else {
    node = BestFit(candidates_.GroupFor(all, KindOf(sum), sum), sum,
                   /*fresh_only=*/false);
  }
  if (node < 0) {
    Failure failure = Explain(-1, sum, all, /*distinct=*/false);
    if (opened_.size() > 1) {
      failure.infeasible = true;
      failure.summary = "STRICT_PACK bundles are pinned to different nodes";
    }
    return failure;
  }
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (at_[b] < 0) Put(b, static_cast<uint32_t>(node), bundles[b].resources);
  }
  return std::nullopt;
}

std::optional<Failure> GangPlacement::StrictSpread(
    const std::vector<Bundle>& bundles, const GangGroups& groups) {
  // Most constrained first: fewest candidate nodes, then bundle order. A
  // count is a pass over the candidates per rank, per zone tried, so groups
  // that count the same candidates (bundles that differ only in amounts)
  // share one, and a gang whose groups all do (identical bundles, the
  // common case) is in bundle order already: nothing is counted.
  std::vector<size_t> order;
  bool tied = true;
  auto group_of = [&](size_t b) -> const Group& {
    return candidates_.group(groups.group[b]);
  };
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (at_[b] >= 0) continue;
    if (!order.empty() &&
        !CandidateGroups::SameReach(group_of(order[0]), group_of(b))) {
      tied = false;
    }
    order.push_back(b);
  }
  if (!tied) {
    std::vector<int64_t> reach(candidates_.size(), -1);
    for (size_t b : order) {
      const int g = groups.group[b];
      if (reach[g] >= 0) continue;
      const Group& group = candidates_.group(g);
      for (size_t h = 0; h < reach.size() && reach[g] < 0; ++h) {
        if (reach[h] >= 0 &&
            CandidateGroups::SameReach(candidates_.group(static_cast<int>(h)),
                                       group)) {
          reach[g] = reach[h];
        }
      }
      if (reach[g] < 0) reach[g] = candidates_.Reach(group);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return reach[groups.group[a]] < reach[groups.group[b]];
    });
  }
  std::vector<size_t> unplaced;
  for (size_t b : order) {
    const int64_t node =
        BestFit(groups.group[b], bundles[b].resources, /*fresh_only=*/true);
    if (node < 0) {
      unplaced.push_back(b);
      continue;
    }
    Put(b, static_cast<uint32_t>(node), bundles[b].resources);
  }
  if (unplaced.empty()) return std::nullopt;
  const std::optional<std::vector<uint32_t>> matched = MatchDistinct(
      snap_, *ctx_.released, {&bundles, groups.group, &candidates_, at_});
  if (matched.has_value()) {
    Reassign(bundles, *matched);
    return std::nullopt;
  }
  const size_t b = unplaced[0];
  Failure failure = Explain(b, bundles[b].resources, groups.selectors[b],
                            /*distinct=*/true);
  // Infeasible when even an empty cluster lacks distinct nodes.
  const size_t able = CountAbleNodes(bundles, groups);
  if (able < bundles.size()) {
    failure.infeasible = true;
    failure.summary = absl::StrCat(
        "STRICT_SPREAD needs ", bundles.size(), " distinct nodes, only ", able,
        " match and are large enough; ", failure.summary);
  }
  return failure;
}

size_t GangPlacement::CountAbleNodes(const std::vector<Bundle>& bundles,
                                     const GangGroups& groups) const {
  absl::flat_hash_set<uint32_t> able;
  std::vector<bool> seen(candidates_.size(), false);
  for (size_t k = 0; k < bundles.size(); ++k) {
    if (seen[groups.group[k]]) continue;
    seen[groups.group[k]] = true;
    const Group& g = candidates_.group(groups.group[k]);
    for (size_t w = 0; w < candidates_.words(); ++w) {
      for (uint64_t word = candidates_.CandidateWord(g, w); word != 0;
           word &= word - 1) {
        const uint32_t i = (w << 6) + std::countr_zero(word);
        if (FitsTotal(i, bundles[k].resources)) able.insert(i);
      }
    }
  }
  return able.size();
}

int64_t GangPlacement::OneNodeFor(const std::vector<Bundle>& bundles,
                                  const LabelSelector* priority) {
  ResourceSet sum;
  LabelSelector all = priority == nullptr ? LabelSelector() : *priority;
  std::vector<const LabelSelector*> seen;
  for (const Bundle& b : bundles) {
    if (!b.pinned_node_id.empty()) return -1;
    for (const auto& [name, amount] : b.resources) {
      sum[name] = AddAmounts(sum[name], amount);
    }
    if (std::none_of(seen.begin(), seen.end(), [&](const LabelSelector* x) {
          return *x == b.selector;
        })) {
      seen.push_back(&b.selector);
      all = And(all, &b.selector);
    }
  }
  // A sum larger than every node's total fits no node: no scan.
  for (const auto& [name, amount] : sum) {
    if (amount > 0 && amount > snap_.MostOnANode(name)) return -1;
  }
  return BestFit(candidates_.GroupFor(all, KindOf(sum), sum), sum,
                 /*fresh_only=*/false, kPackOneNodeScan);
}

int64_t GangPlacement::BestFit(int group, const ResourceSet& res,
                               bool fresh_only, int64_t scan_limit) {
  Group& g = candidates_.group(group);
  int64_t best = -1;
  int64_t best_score = 0;
  int found = 0;
  int first_rank = -1;
  for (std::optional<Cursor> scan = candidates_.Next(g, g.cursor); scan;
       scan = candidates_.Next(g, Cursor{scan->rank, scan->pos + 1})) {
    if (first_rank >= 0 && scan->rank != first_rank) break;
    if (scan_limit >= 0 && --scan_limit < 0) break;
    const uint32_t n = static_cast<uint32_t>(scan->pos);
    if ((fresh_only && Opened(n)) || !overlay_.Fits(n, res)) {
      // Never fits again in this solve: move the group's cursor past it.
      if (first_rank < 0) g.cursor = Cursor{scan->rank, scan->pos + 1};
      continue;
    }
    if (first_rank < 0) {
      first_rank = scan->rank;
      g.cursor = *scan;
    }
    const int64_t score = overlay_.Leftover(n, res);
    if (best < 0 || score < best_score) {
      best = n;
      best_score = score;
    }
    if (++found >= kBestFitWindow) break;
  }
  return best;
}

bool GangPlacement::FitsTotal(uint32_t i, const ResourceSet& res) const {
  for (const auto& [name, amount] : res) {
    if (Amount(snap_.node(i).node.resources, name) < amount) return false;
  }
  return true;
}

void GangPlacement::Put(size_t b, uint32_t node, const ResourceSet& res) {
  at_[b] = node;
  overlay_.Take(node, res);
  if (Opened(node)) return;
  opened_.push_back(node);
  if (opened_.size() <= kInlineBundles) return;
  // Past a scan's length the set holds every gang node.
  if (opened_set_.empty()) {
    opened_set_.insert(opened_.begin(), opened_.end());
  } else {
    opened_set_.insert(node);
  }
}

void GangPlacement::Reassign(const std::vector<Bundle>& bundles,
                             const std::vector<uint32_t>& nodes) {
  overlay_.Clear();
  opened_.clear();
  opened_set_.clear();
  for (size_t b = 0; b < bundles.size(); ++b) {
    Put(b, nodes[b], bundles[b].resources);
  }
}

Attempt GangPlacement::Placed(size_t bundles) const {
  Attempt out;
  out.placed = true;
  out.nodes.reserve(bundles);
  for (int64_t node : at_) {
    out.nodes.push_back(static_cast<uint32_t>(node < 0 ? 0 : node));
  }
  out.summary = absl::StrCat("placed ", bundles, " bundle",
                             bundles == 1 ? "" : "s", " on ", opened_.size(),
                             " node", opened_.size() == 1 ? "" : "s", " (",
                             StrategyName(ctx_.strategy), ")");
  return out;
}

}  // namespace

Attempt PlaceGang(const GangContext& ctx, const std::vector<Bundle>& bundles,
                  const LabelSelector* priority, const LabelSelector* domain) {
  GangPlacement placement(ctx, bundles.size());
  const GangGroups groups = placement.ResolveGroups(bundles, priority, domain);
  std::optional<Failure> failure = placement.PlacePinned(bundles, priority);
  if (!failure.has_value()) {
    switch (ctx.strategy) {
      case Strategy::kStrictPack:
        failure = placement.StrictPack(bundles, groups);
        break;
      case Strategy::kStrictSpread:
        failure = placement.StrictSpread(bundles, groups);
        break;
      case Strategy::kPack:
      case Strategy::kSpread:
        failure = placement.PackOrSpread(bundles, groups);
        break;
    }
  }
  if (failure.has_value()) return Attempt::Failed(*std::move(failure));
  return placement.Placed(bundles.size());
}

Attempt PlaceGangOnOneNode(const GangContext& ctx,
                           const std::vector<Bundle>& bundles,
                           const LabelSelector* priority) {
  GangPlacement placement(ctx, bundles.size());
  const int64_t node = placement.OneNodeFor(bundles, priority);
  Attempt out;
  if (node < 0) return out;
  out.nodes.assign(bundles.size(), static_cast<uint32_t>(node));
  out.placed = true;
  out.summary =
      absl::StrCat("placed ", bundles.size(), " bundles on 1 node (PACK)");
  return out;
}

}  // namespace sliced::scheduler::internal
