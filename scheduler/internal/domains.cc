// Domain choice for generic gangs; see domains.h.
//
// Thread-safety: pure functions (see domains.h).
#include "scheduler/internal/domains.h"

#include <string>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"

namespace sliced::scheduler::internal {

DomainScore ScorePlacement(const SnapshotState& snap, Strategy strategy,
                           const std::vector<Bundle>& bundles,
                           const Attempt& placed) {
  DomainScore score;
  absl::btree_set<int32_t> broken;
  absl::btree_set<std::string> zones;
  absl::btree_set<uint32_t> fresh;
  for (size_t b = 0; b < bundles.size(); ++b) {
    const uint32_t i = placed.nodes[b];
    const InventorySnapshot::NodeEntry& e = snap.node(i);
    const BundleKind kind = KindOf(bundles[b].resources);
    const int32_t s = snap.SliceOf(e);
    if (s >= 0 && snap.slice(s).info.intact && snap.slice(s).free()) {
      broken.insert(s);
    }
    if (kind == BundleKind::kCpuOnly && e.tpu) ++score.cpu_on_tpu;
    auto zone = e.node.labels.find(kLabelZone);
    zones.insert(zone == e.node.labels.end() ? std::string() : zone->second);
    if (e.allocations.empty()) fresh.insert(i);
    score.rank_sum += snap.Rank(kind, i);
  }
  const int64_t distinct = static_cast<int64_t>(
      absl::btree_set<uint32_t>(placed.nodes.begin(), placed.nodes.end())
          .size());
  if (strategy == Strategy::kPack) score.strategy_cost = distinct;
  if (strategy == Strategy::kSpread) {
    score.strategy_cost = static_cast<int64_t>(bundles.size()) - distinct;
  }
  score.slices_broken = static_cast<int64_t>(broken.size());
  score.zones = static_cast<int64_t>(zones.size());
  score.fresh_nodes = static_cast<int64_t>(fresh.size());
  return score;
}

namespace {

// PlaceGeneric within ctx's rank limit.
Attempt PlaceWithin(const GangContext& ctx, const std::vector<Bundle>& bundles,
                    const LabelSelector* priority) {
  const SnapshotState& snap = *ctx.snap;
  auto score = [&](const Attempt& a) {
    return ScorePlacement(snap, ctx.strategy, bundles, a);
  };
  Attempt base = PlaceGang(ctx, bundles, priority, nullptr);
  if (ctx.strategy == Strategy::kPack && bundles.size() > 1) {
    // Ray's PACK puts the gang on one node when it can; keep that unless it
    // costs more (e.g. CPU bundles on a TPU host while CPU nodes hold them).
    Attempt one = PlaceGangOnOneNode(ctx, bundles, priority);
    if (one.placed && (!base.placed || !(score(base) < score(one)))) {
      base = std::move(one);
    }
  }
  // One bundle is in one zone already: no zone alone can do better.
  if (!base.placed || ctx.strategy == Strategy::kStrictPack ||
      bundles.size() == 1 || bundles.size() > kZoneDomainMaxBundles) {
    return base;
  }
  DomainScore best = score(base);
  if (best.zones <= 1) return base;
  auto zones = snap.label_index().find(kLabelZone);
  if (zones == snap.label_index().end()) return base;
  Attempt chosen = std::move(base);
  for (const auto& [zone, nodes] : *zones->second) {
    LabelSelector domain;
    domain.terms.push_back(
        {std::string(kLabelZone), SelectorOp::kEquals, {zone}});
    Attempt attempt = PlaceGang(ctx, bundles, priority, &domain);
    if (!attempt.placed) continue;
    const DomainScore attempt_score = score(attempt);
    if (attempt_score < best) {
      best = attempt_score;
      absl::StrAppend(&attempt.summary, " in zone ", zone);
      chosen = std::move(attempt);
    }
  }
  return chosen;
}

bool HasCpuOnly(const std::vector<Bundle>& bundles) {
  for (const Bundle& b : bundles) {
    if (KindOf(b.resources) == BundleKind::kCpuOnly) return true;
  }
  return false;
}

}  // namespace

Attempt PlaceGeneric(const GangContext& ctx, const std::vector<Bundle>& bundles,
                     const LabelSelector* priority) {
  if (!HasCpuOnly(bundles) || ctx.cpu_rank_limit < kNumRanks) {
    return PlaceWithin(ctx, bundles, priority);
  }
  // Whole slices stay whole, whatever the strategy: CPU-only bundles first
  // without any whole free TPU slice, then with free single-host TPU nodes,
  // then with hosts of multi-host slices that only TPU work holds, and only
  // then anywhere.
  for (int limit :
       {kCpuRankNoFreeTpu, kCpuRankNoFreeMultiHost, kCpuRankNoWholeMultiHost}) {
    GangContext tier = ctx;
    tier.cpu_rank_limit = limit;
    Attempt attempt = PlaceWithin(tier, bundles, priority);
    if (attempt.placed) return attempt;
  }
  Attempt attempt = PlaceWithin(ctx, bundles, priority);
  if (!attempt.placed) return attempt;
  for (size_t b = 0; b < bundles.size(); ++b) {
    const int rank = ctx.snap->Rank(BundleKind::kCpuOnly, attempt.nodes[b]);
    if (KindOf(bundles[b].resources) == BundleKind::kCpuOnly &&
        (rank == kCpuRankNoFreeTpu ||
         (rank >= kCpuRankNoWholeMultiHost && rank < kNumRanks - 1))) {
      ++attempt.cpu_on_whole_tpu;
    }
  }
  return attempt;
}

}  // namespace sliced::scheduler::internal
