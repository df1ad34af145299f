// The stitcher; see stitcher.h.
//
// Thread-safety: a Stitcher lives inside one StitchSlices() call.
#include "scheduler/internal/stitcher.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/carver.h"

namespace sliced::scheduler::internal {
namespace {

using Cubes = std::vector<uint32_t>;  // slice indexes, name order

class Stitcher {
 public:
  Stitcher(const SnapshotState& snap, const Released& released,
           const SliceRequest& request)
      : snap_(snap),
        request_(request),
        overlay_(snap, &released),
        cube_(*ResolveTpuShape(TpuGeneration::kV7x, kCubeTopology)) {
    const std::vector<int>& dims = request.shape().dims;
    for (int a = 0; a < 3; ++a) cubes_per_axis_[a] = dims[a] / cube_.dims[a];
    per_slice_ = cubes_per_axis_[0] * cubes_per_axis_[1] * cubes_per_axis_[2];
  }

  Attempt Run(absl::string_view label) {
    Collect();
    Attempt out;
    for (int64_t k = 0; k < request_.needed(); ++k) {
      std::string block;
      Cubes chosen = Choose(k, block);
      if (chosen.empty()) return Failed(label);
      std::vector<uint32_t> nodes = Layout(chosen);
      std::vector<std::string> names;
      for (size_t w = 0; w < nodes.size(); ++w) {
        overlay_.Take(nodes[w], request_.resources(k, static_cast<int64_t>(w)));
      }
      for (uint32_t s : chosen) {
        names.push_back(snap_.slice(s).info.name);
        Cubes& free = free_[block];
        free.erase(std::find(free.begin(), free.end(), s));
      }
      out.slices.push_back(absl::StrCat(block, "/",
                                        request_.shape().topology, "@",
                                        absl::StrJoin(names, "+")));
      out.nodes.insert(out.nodes.end(), nodes.begin(), nodes.end());
    }
    out.placed = true;
    out.summary = absl::StrCat("stitched ", request_.needed(), " ",
                               request_.shape().pod_type, " slice",
                               request_.needed() == 1 ? "" : "s", " from ",
                               per_slice_, " cubes each: ",
                               absl::StrJoin(out.slices, ", "));
    return out;
  }

 private:
  // Free cubes per block, and every cube per block (any state).
  void Collect() {
    const SliceKey first{TpuGeneration::kV7x, std::string(kCubeTopology), "",
                         ""};
    auto same = [&](const SliceKey& key) {
      return key.generation == TpuGeneration::kV7x &&
             key.topology == kCubeTopology;
    };
    for (auto it = snap_.slices_by_key().lower_bound(first);
         it != snap_.slices_by_key().end() && same(it->first); ++it) {
      for (uint32_t s : it->second) ++all_[BlockOf(s)];
    }
    for (auto it = snap_.free_slices().lower_bound(first);
         it != snap_.free_slices().end() && same(it->first); ++it) {
      if (!request_.KeyMatches(it->first)) continue;
      const CowBitset& set = *it->second;
      for (size_t s = set.NextSet(0); s < set.bits(); s = set.NextSet(s + 1)) {
        const std::string block = BlockOf(static_cast<uint32_t>(s));
        if (!block.empty()) free_[block].push_back(static_cast<uint32_t>(s));
      }
    }
    for (auto& [block, cubes] : free_) std::sort(cubes.begin(), cubes.end());
  }

  std::string BlockOf(uint32_t s) const {
    const InventorySnapshot::SliceEntry& se = snap_.slice(s);
    if (se.host_slots.empty()) return "";
    const Labels& labels = snap_.node(snap_.HostIndex(se, 0)).node.labels;
    auto it = labels.find(kLabelTpuBlock);
    return it == labels.end() ? "" : it->second;
  }

  // The cubes of the k-th slice, from the best-fit block that holds it.
  Cubes Choose(int64_t k, std::string& block) {
    std::vector<std::pair<size_t, std::string>> order;
    for (const auto& [name, cubes] : free_) {
      if (static_cast<int64_t>(cubes.size()) >= per_slice_) {
        order.emplace_back(cubes.size(), name);
      }
    }
    std::sort(order.begin(), order.end());
    for (const auto& [count, name] : order) {
      Cubes chosen;
      for (uint32_t s : free_[name]) {
        if (CubeFits(s, k, static_cast<int64_t>(chosen.size()))) {
          chosen.push_back(s);
        }
        if (static_cast<int64_t>(chosen.size()) == per_slice_) break;
      }
      if (static_cast<int64_t>(chosen.size()) == per_slice_) {
        block = name;
        return chosen;
      }
    }
    return {};
  }

  // The stitched host index of each host of the i-th cube (by its cell).
  std::vector<std::pair<int64_t, uint32_t>> Place(uint32_t s, int64_t i) const {
    const InventorySnapshot::SliceEntry& se = snap_.slice(s);
    const std::vector<int>& g = cube_.host_grid;  // 2x2x4
    const std::vector<int>& sg = request_.shape().host_grid;
    const int u = static_cast<int>(i % cubes_per_axis_[0]);
    const int v = static_cast<int>(i / cubes_per_axis_[0] % cubes_per_axis_[1]);
    const int w = static_cast<int>(i / (cubes_per_axis_[0] * cubes_per_axis_[1]));
    std::vector<std::pair<int64_t, uint32_t>> out;
    const std::vector<int32_t> cells = HostCells(se);
    for (size_t c = 0; c < cells.size(); ++c) {
      if (cells[c] < 0) continue;
      const int x = static_cast<int>(c) % g[0];
      const int y = static_cast<int>(c) / g[0] % g[1];
      const int z = static_cast<int>(c) / (g[0] * g[1]);
      const int64_t X = u * g[0] + x, Y = v * g[1] + y, Z = w * g[2] + z;
      out.emplace_back(X + sg[0] * (Y + sg[1] * Z),
                       snap_.HostIndex(se, cells[c]));
    }
    return out;
  }

  bool CubeFits(uint32_t s, int64_t k, int64_t i) const {
    for (const auto& [b, h] : Place(s, i)) {
      const Node& node = snap_.node(h).node;
      if (!request_.HostMatches(node.labels, k, b) ||
          !request_.CountsChipsAs(node) ||
          !overlay_.Fits(h, request_.resources(k, b))) {
        return false;
      }
    }
    return true;
  }

  // The chosen cubes' hosts in stitched order.
  std::vector<uint32_t> Layout(const Cubes& cubes) const {
    std::vector<uint32_t> nodes(request_.hosts(), 0);
    for (size_t i = 0; i < cubes.size(); ++i) {
      for (const auto& [b, h] : Place(cubes[i], static_cast<int64_t>(i))) {
        nodes[b] = h;
      }
    }
    return nodes;
  }

  Attempt Failed(absl::string_view label) const {
    Failure failure;
    std::vector<std::string> parts;
    DiagnosisStep step;
    step.step = absl::StrCat(label, "stitching ", request_.shape().topology,
                             " from ", per_slice_, " free ", kCubeTopology,
                             " cubes of one block");
    for (const auto& [block, total] : all_) {
      auto it = free_.find(block);
      const int64_t free = it == free_.end() ? 0 : it->second.size();
      ++step.considered;
      if (parts.size() < 5) {
        parts.push_back(absl::StrCat(block.empty() ? "(no block label)" : block,
                                     " ", free, "/", total));
      }
      if (free >= per_slice_) ++step.accepted;
    }
    int64_t most = 0;
    for (const auto& [block, total] : all_) {
      if (!block.empty()) most = std::max(most, total);
    }
    failure.infeasible = most < per_slice_;
    failure.summary = absl::StrCat(
        "no block has ", per_slice_, " free whole ", kCubeTopology,
        " cubes for a ", request_.shape().topology, " (",
        request_.shape().pod_type, "); free/all cubes per block: ",
        parts.empty() ? "none" : absl::StrJoin(parts, ", "));
    failure.steps.push_back(std::move(step));
    return Attempt::Failed(std::move(failure));
  }

  const SnapshotState& snap_;
  const SliceRequest& request_;
  Overlay overlay_;
  const TpuShape cube_;
  std::array<int64_t, 3> cubes_per_axis_{};
  int64_t per_slice_ = 0;
  absl::btree_map<std::string, Cubes> free_;     // block -> free cubes
  absl::btree_map<std::string, int64_t> all_;    // block -> every cube
};

}  // namespace

bool Stitchable(const TpuShape& shape) {
  if (shape.generation != TpuGeneration::kV7x || shape.dims.size() != 3 ||
      shape.chips <= 64) {
    return false;
  }
  for (int d : shape.dims) {
    if (d % 4 != 0) return false;
  }
  return true;
}

Attempt StitchSlices(const SnapshotState& snap, const Released& released,
                     const SliceRequest& request, absl::string_view label) {
  return Stitcher(snap, released, request).Run(label);
}

}  // namespace sliced::scheduler::internal
