// The slice placer: places a slice request (num_slices whole free intact
// slices of one shape) from the snapshot's free-slice index in O(log n), and
// chooses the zone (label domain) the slices come from. Engine-internal:
// include only from scheduler/ (and its tests).
//
// Thread-safety: a SliceRequest is immutable after construction. A
// SlicePlacer only reads the snapshot; it belongs to one Solve() call.
#ifndef SLICED_SCHEDULER_INTERNAL_SLICE_PLACER_H_
#define SLICED_SCHEDULER_INTERNAL_SLICE_PLACER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/string_view.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"
#include "scheduler/tpu.h"

namespace sliced::scheduler::internal {

// A slice requirement prepared for one attempt: the per-host bundles, and the
// selector terms split into those on tier and zone (decided once per index
// key: a slice's tier and zone are those of its worker 0) and the residual
// ones, checked on every host.
class SliceRequest {
 public:
  // `given` are the attempt's bundles (empty: resources_per_host on every
  // host); `priority` may be null.
  // REQUIRES: ValidateRequest() accepted the request, so the shape resolves
  // and `given` is empty or holds num_slices * hosts bundles.
  SliceRequest(const SliceRequirement& req, const std::vector<Bundle>& given,
               const LabelSelector* priority);

  const SliceRequirement& requirement() const { return req_; }
  const TpuShape& shape() const { return shape_; }
  int64_t hosts() const { return shape_.hosts; }
  int64_t needed() const { return req_.num_slices; }
  // Distinct bundle rows: 1 when every slice asks the same of its hosts,
  // else num_slices.
  int64_t rows() const { return rows_; }
  // The resources worker w of the k-th chosen slice (or row k) takes.
  const ResourceSet& resources(int64_t k, int64_t w) const {
    return kinds_[At(k, w)].resources;
  }
  // The first index key of this shape, and whether `key` is of this shape.
  SliceKey FirstKey() const;
  bool SameShape(const SliceKey& key) const;
  // Whether the tier and zone terms admit the slices under `key`.
  bool KeyMatches(const SliceKey& key) const;
  // The same, with the request's own terms only (not this attempt's
  // compute-class priority): whether any attempt could take them.
  bool MayTakeKey(const SliceKey& key) const;
  // Whether `labels`, those of worker w of the k-th slice, match the
  // residual terms.
  bool HostMatches(const Labels& labels, int64_t k, int64_t w) const {
    return !any_residual_ || Matches(residual_[At(k, w)], labels);
  }
  // Whether `host` counts its TPU chips as this request does. A v7x host
  // may count 2 TPU per chip: a request counting 1 would take half of each
  // host's TPU, and leave the other half, on the same chips, to the next
  // group. Always true where one count per chip is all there is.
  bool CountsChipsAs(const Node& host) const;
  // Whether every host of a key (`hosts`) counts its chips as this request
  // does.
  bool CountsChipsAsEvery(const KeyHosts& hosts) const;
  // Whether every host whose resources are at least `least` (a slice's
  // host_min, or a lower bound of several slices') matches the residual
  // terms and holds (in total) what any worker of any row asks. False says
  // nothing: then the hosts decide. Says nothing of how the hosts count
  // their chips (CountsChipsAs).
  bool FitsEveryHostOf(const ResourceSet& least) const;

 private:
  // The TPU a host of the shape counts (fixed point) the way this request
  // counts chips.
  int64_t TpuPerHost() const;
  // The kind of bundle worker w of row k takes.
  size_t At(int64_t k, int64_t w) const {
    return kind_of_.empty() ? 0
                            : kind_of_[(rows_ == 1 ? 0 : k) * shape_.hosts + w];
  }

  const SliceRequirement& req_;
  TpuShape shape_;
  int64_t rows_ = 1;
  // The distinct bundles (most requests have one or two: every host alike,
  // or worker 0 with a head resource), and per (row, worker) its kind;
  // empty when there is one kind. A 64-host slice then costs one selector
  // split, not 64.
  std::vector<Bundle> kinds_;
  std::vector<uint32_t> kind_of_;
  ResourceSet most_;                  // per resource, the most any bundle asks
  std::vector<LabelSelector> keyed_;  // per kind
  std::vector<LabelSelector> residual_;  // per kind
  bool any_keyed_ = false;
  bool any_residual_ = false;
};

// Places a slice request. Steps:
//   1. Pre-filter: the free intact slices of the shape from the free-slice
//      index, pooled by zone; keys whose tier or zone the selectors exclude
//      are dropped without visiting their slices.
//   2. Domains: order the zones. Zones that hold the whole request first:
//      for one slice the zone with the most free slices of the shape, for
//      several the fewest that still holds them (best fit); then the others,
//      most free slices first. Ties: zone name.
//   3. Fit: the first zone that yields every slice wins; slices in (tier,
//      name) order whose every host matches the selectors and has room for
//      its bundle (bundle s * hosts + i on worker i). A multi-slice request
//      that no zone holds whole takes slices across zones in that order.
//   4. Larger TPU7x shapes made of whole 4x4x4 cubes: when those fail,
//      StitchSlices() (stitcher.h), whatever the request's subslicing.
//      Then (stitching failed, as on a fixed pool with no cubes) and other
//      shapes, when those fail and the request's subslicing allows it:
//      CarveSlices() (carver.h).
//   On failure, ExplainSlices() (diagnosis.h) explains every slice of the
//   shape (and the carver why no sub-slice fits).
class SlicePlacer {
 public:
  // REQUIRES: `snap` and `released` outlive the placer.
  SlicePlacer(const SnapshotState& snap, const Released& released)
      : snap_(snap), released_(released) {}

  // The chosen slices and their hosts, or a failure with its diagnosis step
  // (labelled with `label`).
  Attempt Place(const SliceRequest& request, absl::string_view label) const;

 private:
  // The free slices of the shape in one zone.
  struct ZonePool {
    std::vector<const CowBitset*> sets;  // one per tier key, tier order
    int64_t count = 0;
  };
  using ZonePools = absl::btree_map<std::string, ZonePool>;
  using ZoneOrder = std::vector<std::pair<std::string, const ZonePool*>>;

  // Whether the request's subslicing lets it carve (for kIfNoExactShape:
  // the inventory has no slice of the exact shape at all).
  bool MayCarve(const SliceRequest& request) const;
  ZonePools FreePools(const SliceRequest& request) const;
  static ZoneOrder OrderZones(const ZonePools& pools, int64_t needed);
  std::vector<uint32_t> Choose(const SliceRequest& request,
                               const ZoneOrder& order) const;
  // `chosen` followed by the slices of `pool` that fit, in (tier, name)
  // order, up to request.needed() in all.
  std::vector<uint32_t> TakeFrom(const SliceRequest& request,
                                 const Overlay& overlay, const ZonePool& pool,
                                 std::vector<uint32_t> chosen) const;
  bool SliceFits(const SliceRequest& request, const Overlay& overlay,
                 uint32_t s, int64_t k) const;
  Attempt Placed(const SliceRequest& request,
                 const std::vector<uint32_t>& chosen) const;

  const SnapshotState& snap_;
  const Released& released_;
};

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_SLICE_PLACER_H_
