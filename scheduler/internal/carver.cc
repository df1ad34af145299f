// The carver; see carver.h.
//
// Thread-safety: a Carver lives inside one CarveSlices() call.
#include "scheduler/internal/carver.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/internal/resources.h"
#include "scheduler/slices.h"

namespace sliced::scheduler::internal {
namespace {

using Grid = std::array<int, 3>;

Grid GridOf(const std::vector<int>& v) {
  return {v.size() > 0 ? v[0] : 1, v.size() > 1 ? v[1] : 1,
          v.size() > 2 ? v[2] : 1};
}

int Cell(const Grid& grid, int x, int y, int z) {
  return x + grid[0] * (y + grid[1] * z);
}

// Calls fn(origin) for every aligned origin of a box of `dims` inside
// `grid` (origin a multiple of dims on every axis), x fastest.
template <typename Fn>
void ForEachAlignedBox(const Grid& grid, const Grid& dims, Fn fn) {
  for (int z = 0; z + dims[2] <= grid[2]; z += dims[2]) {
    for (int y = 0; y + dims[1] <= grid[1]; y += dims[1]) {
      for (int x = 0; x + dims[0] <= grid[0]; x += dims[0]) fn(Grid{x, y, z});
    }
  }
}

// Calls fn(cell) for the cells of the box at `origin` of `dims` (clamped
// to the grid), x fastest, while fn returns true; false when one did not.
template <typename Fn>
bool AllCells(const Grid& grid, const Grid& origin, const Grid& dims, Fn fn) {
  for (int z = origin[2]; z < std::min(grid[2], origin[2] + dims[2]); ++z) {
    for (int y = origin[1]; y < std::min(grid[1], origin[1] + dims[1]); ++y) {
      for (int x = origin[0]; x < std::min(grid[0], origin[0] + dims[0]);
           ++x) {
        if (!fn(Cell(grid, x, y, z))) return false;
      }
    }
  }
  return true;
}

// The valid shapes smaller than `parent` that can be carved out of it, with
// their host grids. Depends on the shape alone, so it is computed once per
// (generation, topology) and kept: the set of shapes is small (the TPU
// tables), and ListSlices, the summary and /metrics ask for every slice.
const std::vector<TpuShape>& CarvableShapes(const TpuShape& parent) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new absl::node_hash_map<
      std::pair<TpuGeneration, std::string>, std::vector<TpuShape>>();
  absl::MutexLock lock(&mu);
  auto [it, inserted] =
      cache->try_emplace({parent.generation, parent.topology});
  if (!inserted) return it->second;
  const Grid grid = GridOf(parent.host_grid);
  for (int bz = 1; bz <= grid[2]; ++bz) {
    for (int by = 1; by <= grid[1]; ++by) {
      for (int bx = 1; bx <= grid[0]; ++bx) {
        std::vector<int> dims = {bx * parent.host_box[0],
                                 by * parent.host_box[1],
                                 bz * parent.host_box[2]};
        if (parent.dims.size() == 2) dims.pop_back();
        auto shape =
            ResolveTpuShape(parent.generation, absl::StrJoin(dims, "x"));
        if (shape.ok() && shape->topology != parent.topology &&
            CanCarve(parent, *shape) &&
            shape->host_grid == std::vector<int>{bx, by, bz}) {
          it->second.push_back(*std::move(shape));
        }
      }
    }
  }
  return it->second;
}

// One candidate sub-slice.
struct Box {
  uint32_t slice = 0;
  Grid origin{};
  std::vector<uint32_t> nodes;  // node indexes, physical order (x fastest)
  // Ordering key (carver.h): class, parent hosts, free block it splits,
  // slice index, origin cell.
  std::tuple<int, int64_t, int64_t, uint32_t, int> key;
};

class Carver {
 public:
  // Carves from parents in `zone` only, when not null.
  Carver(const SnapshotState& snap, const Released& released,
         const SliceRequest& request, CarveScan scan,
         const std::string* zone = nullptr)
      : snap_(snap),
        request_(request),
        overlay_(snap, &released),
        box_(GridOf(request.shape().host_grid)),
        zone_(zone),
        // The indexes know the snapshot's TPU work, not what is released.
        indexed_(scan == CarveScan::kIndexed && released.empty()) {}

  Attempt Run(absl::string_view label) {
    std::vector<Box> chosen;
    for (int64_t k = 0; k < request_.needed(); ++k) {
      rejected_.clear();
      considered_ = 0;
      std::optional<Box> best;
      if (indexed_) best = BestIndexed(k);
      // The full scan also counts what it rules out, for Failed().
      if (!best.has_value()) best = Best(k);
      if (!best.has_value()) return Failed(label);
      for (size_t w = 0; w < best->nodes.size(); ++w) {
        overlay_.Take(best->nodes[w], request_.resources(k, w));
      }
      carved_.push_back(best->slice);
      chosen.push_back(std::move(*best));
    }
    Attempt out;
    out.placed = true;
    std::vector<std::string> names;
    for (const Box& box : chosen) {
      const InventorySnapshot::SliceEntry& se = snap_.slice(box.slice);
      out.slices.push_back(
          se.shape.topology == request_.shape().topology
              ? se.info.name
              : FormatSubsliceName(se.info.name, request_.shape().topology,
                                   box.origin));
      out.nodes.insert(out.nodes.end(), box.nodes.begin(), box.nodes.end());
    }
    out.summary = absl::StrCat("placed ", request_.needed(), " ",
                               request_.shape().pod_type, " sub-slice",
                               request_.needed() == 1 ? "" : "s", ": ",
                               absl::StrJoin(out.slices, ", "));
    return out;
  }

 private:
  // The best box for the k-th slice, counting what is ruled out.
  std::optional<Box> Best(int64_t k) {
    std::optional<Box> best;
    const TpuGeneration gen = request_.requirement().generation;
    for (auto it = snap_.slices_by_key().lower_bound(SliceKey{gen, "", "", ""});
         it != snap_.slices_by_key().end() && it->first.generation == gen;
         ++it) {
      auto parent = ResolveTpuShape(gen, it->first.topology);
      if (!parent.ok() || !CanCarve(*parent, request_.shape())) {
        rejected_["too small or other hosts"] += it->second.size();
        considered_ += it->second.size();
        continue;
      }
      big_enough_ += static_cast<int64_t>(it->second.size());
      if (zone_ != nullptr && it->first.zone != *zone_) continue;
      if (!request_.KeyMatches(it->first)) {
        rejected_["tier or zone excluded by selector"] += it->second.size();
        considered_ += it->second.size();
        continue;
      }
      for (uint32_t s : it->second) {
        ++considered_;
        const InventorySnapshot::SliceEntry& se = snap_.slice(s);
        if (!se.info.intact || !se.shape_known) {
          ++rejected_["not intact"];
          continue;
        }
        if (!BestIn(s, k, best)) ++rejected_["no free aligned box"];
      }
    }
    return best;
  }

  // Best() without the slices that cannot hold a box, from the snapshot's
  // indexes: the slices this request carved already, and per admitted key
  // the partly busy ones and the first idle one that holds a box. Idle slices
  // of one key tie on every part of the box's key but the slice index, so
  // that first one is the key's best idle one; a slice every host of which
  // has TPU work, or not intact, holds none. So the box is Best()'s, at the
  // cost of the slices that are partly busy rather than all. REQUIRES:
  // nothing released (the overlay is the snapshot plus this request).
  std::optional<Box> BestIndexed(int64_t k) {
    std::optional<Box> best;
    // Parents carved before passed the keys' filter below. Boxes are
    // ordered by a key that ends in the slice and the cell, so the order
    // of the offers does not matter.
    for (uint32_t s : carved_) BestIn(s, k, best);
    const TpuGeneration gen = request_.requirement().generation;
    auto carved = [&](size_t s) {
      return std::find(carved_.begin(), carved_.end(), s) != carved_.end();
    };
    for (auto it = snap_.slices_by_key().lower_bound(SliceKey{gen, "", "", ""});
         it != snap_.slices_by_key().end() && it->first.generation == gen;
         ++it) {
      const SliceKey& key = it->first;
      auto parent = ResolveTpuShape(gen, key.topology);
      if (!parent.ok() || !CanCarve(*parent, request_.shape()) ||
          (zone_ != nullptr && key.zone != *zone_) ||
          !request_.KeyMatches(key)) {
        continue;
      }
      if (const CowBitset* busy = snap_.partly_busy_slices().Find(key)) {
        for (size_t s = busy->NextSet(0); s < busy->bits();
             s = busy->NextSet(s + 1)) {
          if (!carved(s)) BestIn(static_cast<uint32_t>(s), k, best);
        }
      }
      if (const CowBitset* idle = snap_.idle_slices().Find(key)) {
        for (size_t s = idle->NextSet(0); s < idle->bits();
             s = idle->NextSet(s + 1)) {
          if (!carved(s) && BestIn(static_cast<uint32_t>(s), k, best)) break;
        }
      }
    }
    return best;
  }

  // Offers every free aligned box of slice s to `best`; false when none.
  bool BestIn(uint32_t s, int64_t k, std::optional<Box>& best) {
    const InventorySnapshot::SliceEntry& se = snap_.slice(s);
    const Grid grid = GridOf(se.shape.host_grid);
    const std::vector<int32_t> cells = HostCells(se);
    // Hosts holding TPU work (another group's, or a box chosen before).
    std::vector<char> used(cells.size(), 0);
    int64_t used_count = 0;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (cells[c] < 0) continue;
      const uint32_t h = snap_.HostIndex(se, cells[c]);
      if (overlay_.Free(h, TpuName()) <
          Amount(snap_.node(h).node.resources, TpuName())) {
        used[c] = 1;
        ++used_count;
      }
    }
    const bool exact = se.shape.topology == request_.shape().topology;
    if (exact) {
      // A whole slice keeps its worker-id order, as the whole-slice path
      // gives it.
      if (used_count > 0) return false;
      Box box;
      for (size_t w = 0; w < se.host_slots.size(); ++w) {
        const uint32_t h = snap_.HostIndex(se, w);
        if (!HostTakes(h, k, static_cast<int64_t>(w))) return false;
        box.nodes.push_back(h);
      }
      box.slice = s;
      box.key = {0, se.shape.hosts, 0, s, 0};
      if (!best.has_value() || box.key < best->key) best = std::move(box);
      return true;
    }
    const int cls = used_count > 0 ? 1 : 2;
    bool any = false;
    ForEachAlignedBox(grid, box_, [&](const Grid& origin) {
      Box box;
      if (!Fits(se, grid, cells, used, origin, k, box.nodes)) return;
      any = true;
      box.slice = s;
      box.origin = origin;
      box.key = {cls, se.shape.hosts, FreeBlock(grid, used, origin), s,
                 Cell(grid, origin[0], origin[1], origin[2])};
      if (!best.has_value() || box.key < best->key) best = std::move(box);
    });
    return any;
  }

  // Whether the box at `origin` has a free host with room on every cell;
  // fills `nodes` in physical order.
  bool Fits(const InventorySnapshot::SliceEntry& se, const Grid& grid,
            const std::vector<int32_t>& cells, const std::vector<char>& used,
            const Grid& origin, int64_t k, std::vector<uint32_t>& nodes) const {
    nodes.clear();
    return AllCells(grid, origin, box_, [&](int c) {
      if (cells[c] < 0 || used[c]) return false;
      const uint32_t h = snap_.HostIndex(se, cells[c]);
      if (!HostTakes(h, k, static_cast<int64_t>(nodes.size()))) return false;
      nodes.push_back(h);
      return true;
    });
  }

  // Whether host h can be worker w of the k-th sub-slice.
  bool HostTakes(uint32_t h, int64_t k, int64_t w) const {
    const Node& node = snap_.node(h).node;
    return TakesPlacements(node) && request_.HostMatches(node.labels, k, w) &&
           request_.CountsChipsAs(node) &&
           overlay_.Fits(h, request_.resources(k, w));
  }

  // Buddy style: the hosts of the largest free aligned block holding the
  // box at `origin`, growing the box by doubling z, then y, then x (the
  // order of the valid shapes: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4) up to the
  // grid. Carving the box splits that block, so the smaller the better.
  int64_t FreeBlock(const Grid& grid, const std::vector<char>& used,
                    const Grid& origin) const {
    Grid dims = box_;
    int64_t free_hosts = int64_t{dims[0]} * dims[1] * dims[2];
    for (int axis : {2, 1, 0}) {
      while (dims[axis] < grid[axis]) {
        Grid next = dims;
        next[axis] = std::min(grid[axis], 2 * dims[axis]);
        Grid lo;
        for (int a = 0; a < 3; ++a) lo[a] = origin[a] / next[a] * next[a];
        if (!AllCells(grid, lo, next, [&](int c) { return !used[c]; })) {
          return free_hosts;
        }
        dims = next;
        free_hosts = int64_t{dims[0]} * dims[1] * dims[2];
      }
    }
    return free_hosts;
  }

  Attempt Failed(absl::string_view label) const {
    const TpuShape& shape = request_.shape();
    Failure failure;
    std::vector<std::string> parts;
    for (const auto& [reason, count] : rejected_) {
      parts.push_back(absl::StrCat(count, " ", reason));
    }
    // The slow path only: how many candidate parents are carved already,
    // and the largest box any of them could still give.
    int64_t carved = 0, largest_chips = 0;
    std::string largest;
    const TpuGeneration gen = shape.generation;
    for (auto it = snap_.slices_by_key().lower_bound(SliceKey{gen, "", "", ""});
         it != snap_.slices_by_key().end() && it->first.generation == gen;
         ++it) {
      auto parent = ResolveTpuShape(gen, it->first.topology);
      if (!parent.ok() || !CanCarve(*parent, shape) ||
          !request_.KeyMatches(it->first)) {
        continue;
      }
      for (uint32_t s : it->second) {
        const InventorySnapshot::SliceEntry& se = snap_.slice(s);
        if (!se.info.intact || !se.shape_known) continue;
        carved += se.allocated_hosts > 0 ? 1 : 0;
        SubsliceCapacity capacity = CapacityOf(snap_, se);
        if (capacity.largest_free_chips > largest_chips) {
          largest_chips = capacity.largest_free_chips;
          largest = std::move(capacity.largest_free);
        }
      }
    }
    failure.summary = absl::StrCat(
        "No subslice of '", shape.topology,
        "' is schedulable across any of the candidate parent topologies: ",
        considered_, " ", TpuGenerationName(shape.generation), " slice",
        considered_ == 1 ? "" : "s", " considered",
        parts.empty() ? "" : ", ", absl::StrJoin(parts, ", "), "; ", carved,
        " carved; largest free aligned box ", largest.empty() ? "none" : largest);
    failure.infeasible = big_enough_ == 0;
    DiagnosisStep step;
    step.step = absl::StrCat(label, "sub-slices ", shape.topology, " (",
                             shape.pod_type, ") from larger slices");
    step.considered = considered_;
    for (const auto& [reason, count] : rejected_) {
      step.rejected.push_back({reason, count});
    }
    failure.steps.push_back(std::move(step));
    return Attempt::Failed(std::move(failure));
  }

  const SnapshotState& snap_;
  const SliceRequest& request_;
  Overlay overlay_;
  const Grid box_;  // the request's host grid
  absl::btree_map<std::string, int64_t> rejected_;
  int64_t considered_ = 0;
  int64_t big_enough_ = 0;
  const std::string* const zone_;
  const bool indexed_;
  std::vector<uint32_t> carved_;  // the parents of the boxes chosen so far
};

// The zones of the slices `placed` took, in the order first taken.
std::vector<std::string> ZonesOf(const SnapshotState& snap,
                                 const Attempt& placed) {
  std::vector<std::string> zones;
  for (uint32_t h : placed.nodes) {
    const int32_t s = snap.SliceOf(snap.node(h));
    if (s < 0) continue;
    const std::string& zone = snap.slice(s).zone;
    if (std::find(zones.begin(), zones.end(), zone) == zones.end()) {
      zones.push_back(zone);
    }
  }
  return zones;
}

}  // namespace

std::vector<int32_t> HostCells(const InventorySnapshot::SliceEntry& se) {
  const Grid grid = GridOf(se.shape.host_grid);
  std::vector<int32_t> cells(static_cast<size_t>(grid[0]) * grid[1] * grid[2],
                             -1);
  for (size_t w = 0; w < se.host_slots.size(); ++w) {
    int c = static_cast<int>(w);
    if (!se.info.positions_assumed && w < se.info.host_positions.size()) {
      auto at = ParseHostCoords(se.info.host_positions[w], se.shape.host_grid);
      if (!at.ok()) continue;
      c = Cell(grid, (*at)[0], (*at)[1], (*at)[2]);
    }
    if (c < static_cast<int>(cells.size())) cells[c] = static_cast<int32_t>(w);
  }
  return cells;
}

SubsliceCapacity CapacityOf(const SnapshotState& snap,
                            const InventorySnapshot::SliceEntry& se) {
  SubsliceCapacity out;
  const std::vector<int32_t> cells = HostCells(se);
  const Grid grid = GridOf(se.shape.host_grid);
  // Free cells: hosts that take placements and hold no TPU work.
  std::vector<char> free(cells.size(), 0);
  for (size_t c = 0; c < cells.size(); ++c) {
    if (cells[c] < 0) continue;
    const InventorySnapshot::NodeEntry& e =
        snap.node(snap.HostIndex(se, cells[c]));
    free[c] = TakesPlacements(e.node) &&
              Amount(e.free, TpuName()) >= Amount(e.node.resources, TpuName());
  }
  int64_t& largest_chips = out.largest_free_chips;
  for (const TpuShape& shape : CarvableShapes(se.shape)) {
    const Grid dims = GridOf(shape.host_grid);
    int64_t count = 0;
    ForEachAlignedBox(grid, dims, [&](const Grid& origin) {
      count += AllCells(grid, origin, dims, [&](int c) { return free[c] != 0; });
    });
    out.free_boxes[shape.topology] = count;
    if (count > 0 && (shape.chips > largest_chips ||
                      (shape.chips == largest_chips &&
                       shape.topology < out.largest_free))) {
      largest_chips = shape.chips;
      out.largest_free = shape.topology;
    }
  }
  return out;
}

bool CanCarve(const TpuShape& parent, const TpuShape& request) {
  if (parent.generation != request.generation ||
      parent.chips_per_host != request.chips_per_host ||
      parent.host_box != request.host_box) {
    return false;
  }
  const Grid p = GridOf(parent.host_grid), r = GridOf(request.host_grid);
  for (int a = 0; a < 3; ++a) {
    if (r[a] > p[a]) return false;
  }
  return true;
}

Attempt CarveSlices(const SnapshotState& snap, const Released& released,
                    const SliceRequest& request, absl::string_view label,
                    CarveScan scan) {
  Attempt any = Carver(snap, released, request, scan).Run(label);
  if (!any.placed || request.needed() < 2) return any;
  // A multi-slice job's slices talk over the data-center network: all in
  // one zone when one zone holds them (as whole slices are chosen), tried
  // in the order the zones were taken above, then the others by name.
  std::vector<std::string> zones = ZonesOf(snap, any);
  if (zones.size() < 2) return any;
  const TpuGeneration gen = request.requirement().generation;
  absl::btree_set<std::string> others;
  for (auto it = snap.slices_by_key().lower_bound(SliceKey{gen, "", "", ""});
       it != snap.slices_by_key().end() && it->first.generation == gen; ++it) {
    if (std::find(zones.begin(), zones.end(), it->first.zone) == zones.end()) {
      others.insert(it->first.zone);
    }
  }
  zones.insert(zones.end(), others.begin(), others.end());
  for (const std::string& zone : zones) {
    Attempt one = Carver(snap, released, request, scan, &zone).Run(label);
    if (one.placed) return one;
  }
  return any;
}

}  // namespace sliced::scheduler::internal
