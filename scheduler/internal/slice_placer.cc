// The slice placer; see slice_placer.h.
//
// Thread-safety: see slice_placer.h (reads the snapshot only).
#include "scheduler/internal/slice_placer.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/carver.h"
#include "scheduler/internal/diagnosis.h"
#include "scheduler/internal/stitcher.h"

namespace sliced::scheduler::internal {

namespace {

// Whether `t` is on a label the slice index keys by (tier, zone).
bool OnKey(const SelectorTerm& t) {
  return t.key == kLabelCapacityTier || t.key == kLabelZone;
}

// The tier and zone of the slices under `key`, as labels.
Labels KeyLabels(const SliceKey& key) {
  Labels labels;
  if (!key.tier.empty()) labels[std::string(kLabelCapacityTier)] = key.tier;
  if (!key.zone.empty()) labels[std::string(kLabelZone)] = key.zone;
  return labels;
}

}  // namespace

SliceRequest::SliceRequest(const SliceRequirement& req,
                           const std::vector<Bundle>& given,
                           const LabelSelector* priority)
    : req_(req), shape_(*ResolveTpuShape(req.generation, req.topology)) {
  const int64_t hosts = shape_.hosts;
  const int64_t needed = req.num_slices;
  if (given.empty()) {
    Bundle b;
    b.resources = req.resources_per_host.empty()
                      ? ResourceSet{{TpuName(), shape_.chips_per_host *
                                                    req.tpu_resource_per_chip *
                                                    kResourceScale}}
                      : req.resources_per_host;
    kinds_.push_back(std::move(b));
  } else {
    for (int64_t k = 1; k < needed && rows_ == 1; ++k) {
      for (int64_t w = 0; w < hosts; ++w) {
        if (!(given[k * hosts + w] == given[w])) {
          rows_ = needed;
          break;
        }
      }
    }
    // Kinds in order of first use; a bundle is compared with the last few
    // kinds only (beyond that a repeat is a kind of its own, still right).
    constexpr size_t kLookBack = 4;
    for (int64_t j = 0; j < rows_ * hosts; ++j) {
      size_t kind = kinds_.size();
      for (size_t c = kinds_.size(); c > 0 && kinds_.size() - c < kLookBack;
           --c) {
        if (kinds_[c - 1] == given[j]) {
          kind = c - 1;
          break;
        }
      }
      if (kind == kinds_.size()) kinds_.push_back(given[j]);
      kind_of_.push_back(static_cast<uint32_t>(kind));
    }
    if (kinds_.size() == 1) kind_of_.clear();
  }
  keyed_.resize(kinds_.size());
  residual_.resize(kinds_.size());
  for (size_t j = 0; j < kinds_.size(); ++j) {
    const LabelSelector sel =
        And(And(kinds_[j].selector, &req.selector), priority);
    for (const SelectorTerm& t : sel.terms) {
      (OnKey(t) ? keyed_[j] : residual_[j]).terms.push_back(t);
    }
    any_keyed_ = any_keyed_ || !keyed_[j].empty();
    any_residual_ = any_residual_ || !residual_[j].empty();
    for (const auto& [name, amount] : kinds_[j].resources) {
      int64_t& most = most_[name];
      most = std::max(most, amount);
    }
  }
}

bool SliceRequest::CountsChipsAs(const Node& host) const {
  if (MaxTpuResourcePerChip(req_.generation) == 1) return true;
  return Amount(host.resources, TpuName()) == TpuPerHost();
}

bool SliceRequest::CountsChipsAsEvery(const KeyHosts& hosts) const {
  if (MaxTpuResourcePerChip(req_.generation) == 1) return true;
  return Amount(*hosts.least, TpuName()) == TpuPerHost() &&
         hosts.most_tpu == TpuPerHost();
}

int64_t SliceRequest::TpuPerHost() const {
  return shape_.chips_per_host * req_.tpu_resource_per_chip * kResourceScale;
}

bool SliceRequest::FitsEveryHostOf(const ResourceSet& least) const {
  if (any_residual_) return false;
  for (const auto& [name, amount] : most_) {
    if (amount > 0 && Amount(least, name) < amount) return false;
  }
  return true;
}

SliceKey SliceRequest::FirstKey() const {
  return SliceKey{req_.generation, shape_.topology, "", ""};
}

bool SliceRequest::SameShape(const SliceKey& key) const {
  return key.generation == req_.generation && key.topology == shape_.topology;
}

bool SliceRequest::KeyMatches(const SliceKey& key) const {
  if (!any_keyed_) return true;
  const Labels labels = KeyLabels(key);
  for (const LabelSelector& sel : keyed_) {
    if (!Matches(sel, labels)) return false;
  }
  return true;
}

bool SliceRequest::MayTakeKey(const SliceKey& key) const {
  // The tier and zone terms of the bundles and the requirement, not of the
  // attempt's priority. (Computed here, not with keyed_: only MayCarve
  // asks, and only in its kIfNoExactShape mode.)
  const Labels labels = KeyLabels(key);
  for (const Bundle& kind : kinds_) {
    LabelSelector own;
    for (const SelectorTerm& t : And(kind.selector, &req_.selector).terms) {
      if (OnKey(t)) own.terms.push_back(t);
    }
    if (!Matches(own, labels)) return false;
  }
  return true;
}

Attempt SlicePlacer::Place(const SliceRequest& request,
                           absl::string_view label) const {
  const ZonePools pools = FreePools(request);
  const std::vector<uint32_t> chosen =
      Choose(request, OrderZones(pools, request.needed()));
  if (static_cast<int64_t>(chosen.size()) == request.needed()) {
    return Placed(request, chosen);
  }
  Failure whole = ExplainSlices(snap_, request, label);
  const bool stitch = Stitchable(request.shape());
  if (!stitch && !MayCarve(request)) {
    return Attempt::Failed(std::move(whole));
  }
  Attempt carved = stitch ? StitchSlices(snap_, released_, request, label)
                          : CarveSlices(snap_, released_, request, label);
  if (carved.placed) return carved;
  if (stitch && MayCarve(request)) {
    // No free cubes to stitch (a fixed v7x pool is one intact slice, not
    // cubes): a sub-box of a larger slice, as on other generations.
    Attempt cut = CarveSlices(snap_, released_, request, label);
    if (cut.placed) return cut;
    carved.summary = absl::StrCat(carved.summary, "; ", cut.summary);
    carved.infeasible = carved.infeasible && cut.infeasible;
    carved.steps.insert(carved.steps.end(),
                        std::make_move_iterator(cut.steps.begin()),
                        std::make_move_iterator(cut.steps.end()));
  }
  // Both explanations: the whole slices first, then the sub-slices (or the
  // stitching).
  carved.summary = absl::StrCat(whole.summary, "; ", carved.summary);
  carved.infeasible = carved.infeasible && whole.infeasible;
  carved.steps.insert(carved.steps.begin(),
                      std::make_move_iterator(whole.steps.begin()),
                      std::make_move_iterator(whole.steps.end()));
  return carved;
}

bool SlicePlacer::MayCarve(const SliceRequest& request) const {
  switch (request.requirement().subslicing) {
    case Subslicing::kNever:
      return false;
    case Subslicing::kAllowed:
      return true;
    case Subslicing::kIfNoExactShape: {
      // A slice of the shape in a zone or tier the request's own selectors
      // exclude does not count: no attempt could take it. (One that is down
      // or busy does, and one in a tier of a later compute-class priority:
      // the request waits for, or falls back to, the exact shape rather
      // than carve.)
      for (auto it = snap_.slices_by_key().lower_bound(request.FirstKey());
           it != snap_.slices_by_key().end() && request.SameShape(it->first);
           ++it) {
        if (request.MayTakeKey(it->first)) return false;
      }
      return true;
    }
  }
  return false;
}

SlicePlacer::ZonePools SlicePlacer::FreePools(
    const SliceRequest& request) const {
  ZonePools zones;
  for (auto it = snap_.free_slices().lower_bound(request.FirstKey());
       it != snap_.free_slices().end() && request.SameShape(it->first); ++it) {
    if (!request.KeyMatches(it->first)) continue;
    ZonePool& pool = zones[it->first.zone];
    pool.sets.push_back(it->second.get());
    pool.count += it->second->count();
  }
  return zones;
}

// A single slice comes from the zone with the most free slices of the shape,
// which keeps every zone's pool as large as possible for requests pinned to a
// zone. A multi-slice request takes the zone with the fewest that still holds
// all of them (best fit), which keeps bigger pools for bigger multi-slice
// requests. Zones that cannot hold it all (the multi-zone fallback) are taken
// largest first. Ties: zone name (the pools are in name order).
SlicePlacer::ZoneOrder SlicePlacer::OrderZones(const ZonePools& pools,
                                               int64_t needed) {
  ZoneOrder order;
  for (const auto& [zone, pool] : pools) order.emplace_back(zone, &pool);
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) {
                     const int64_t ca = a.second->count, cb = b.second->count;
                     const bool fa = ca >= needed, fb = cb >= needed;
                     if (fa != fb) return fa;
                     if (fa && needed > 1) return ca < cb;
                     return ca > cb;
                   });
  return order;
}

std::vector<uint32_t> SlicePlacer::Choose(const SliceRequest& request,
                                          const ZoneOrder& order) const {
  const Overlay overlay(snap_, &released_);
  const int64_t needed = request.needed();
  int64_t total_free = 0;
  for (const auto& [zone, pool] : order) total_free += pool->count;
  for (const auto& [zone, pool] : order) {
    if (pool->count < needed) break;
    std::vector<uint32_t> in_zone = TakeFrom(request, overlay, *pool, {});
    if (static_cast<int64_t>(in_zone.size()) == needed) return in_zone;
  }
  std::vector<uint32_t> chosen;
  if (needed > 1 && total_free >= needed) {
    for (const auto& [zone, pool] : order) {
      chosen = TakeFrom(request, overlay, *pool, std::move(chosen));
      if (static_cast<int64_t>(chosen.size()) == needed) break;
    }
  }
  return chosen;
}

std::vector<uint32_t> SlicePlacer::TakeFrom(
    const SliceRequest& request, const Overlay& overlay, const ZonePool& pool,
    std::vector<uint32_t> chosen) const {
  for (const CowBitset* set : pool.sets) {
    for (size_t s = set->NextSet(0);
         s < set->bits() &&
         static_cast<int64_t>(chosen.size()) < request.needed();
         s = set->NextSet(s + 1)) {
      if (SliceFits(request, overlay, static_cast<uint32_t>(s),
                    static_cast<int64_t>(chosen.size()))) {
        chosen.push_back(static_cast<uint32_t>(s));
      }
    }
  }
  return chosen;
}

bool SlicePlacer::SliceFits(const SliceRequest& request, const Overlay& overlay,
                            uint32_t s, int64_t k) const {
  const InventorySnapshot::SliceEntry& se = snap_.slice(s);
  for (int64_t w = 0; w < request.hosts(); ++w) {
    const uint32_t h = snap_.HostIndex(se, w);
    const Node& host = snap_.node(h).node;
    if (!request.HostMatches(host.labels, k, w)) return false;
    if (!request.CountsChipsAs(host)) return false;
    if (!overlay.Fits(h, request.resources(k, w))) return false;
  }
  return true;
}

Attempt SlicePlacer::Placed(const SliceRequest& request,
                            const std::vector<uint32_t>& chosen) const {
  Attempt out;
  out.placed = true;
  absl::btree_map<std::string, int> used_zones;
  for (uint32_t s : chosen) {
    const InventorySnapshot::SliceEntry& se = snap_.slice(s);
    out.slices.push_back(se.info.name);
    ++used_zones[se.zone];
    for (int64_t w = 0; w < request.hosts(); ++w) {
      out.nodes.push_back(snap_.HostIndex(se, w));
    }
  }
  std::vector<std::string> zone_names;
  for (const auto& [z, c] : used_zones) {
    zone_names.push_back(z.empty() ? "(no zone)" : z);
  }
  const int64_t needed = request.needed();
  out.summary = absl::StrCat("placed ", needed, " ", request.shape().pod_type,
                             " slice", needed == 1 ? "" : "s", " in zone",
                             zone_names.size() == 1 ? " " : "s ",
                             absl::StrJoin(zone_names, ", "));
  return out;
}

}  // namespace sliced::scheduler::internal
