#include "server/core/cluster_summary.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/snapshot.h"
#include "scheduler/subslices.h"
#include "scheduler/tpu.h"

namespace sliced::server {
namespace {

std::string Label(const scheduler::Labels& labels, absl::string_view key) {
  auto it = labels.find(key);
  return it == labels.end() ? "" : it->second;
}

int64_t Chips(const scheduler::ResourceSet& resources) {
  auto it = resources.find(scheduler::kResourceTpu);
  return it == resources.end() ? 0 : it->second / scheduler::kResourceScale;
}

// A short description of what a queued group needs.
std::string Shape(const PlacementGroup& pg) {
  const scheduler::PlacementRequest& r = pg.request;
  if (r.slice) {
    auto shape =
        scheduler::ResolveTpuShape(r.slice->generation, r.slice->topology);
    return absl::StrCat(r.slice->num_slices, " x ",
                        shape.ok() ? shape->pod_type : r.slice->topology,
                        " slice");
  }
  std::vector<std::string> parts;
  absl::btree_map<std::string, int64_t> total;
  for (const scheduler::Bundle& b : r.bundles) {
    for (const auto& [name, amount] : b.resources) total[name] += amount;
  }
  for (const auto& [name, amount] : total) {
    parts.push_back(
        absl::StrCat(name, ": ", scheduler::FromFixedPoint(amount)));
  }
  return absl::StrCat(r.bundles.size(), " bundles {",
                      absl::StrJoin(parts, ", "), "}");
}

}  // namespace

ClusterSummary Summarize(const ClusterState& state, absl::Time now) {
  ClusterSummary out;
  for (const char* s : {"ALIVE", "DRAINING", "DEAD"}) out.nodes_by_state[s] = 0;
  // One pass over the snapshot's dense entries: no per-node lookup by id and
  // no copy of a node's free resources or of a slice (this runs on every
  // /metrics scrape and web view poll; at 100k nodes copies dominated).
  const scheduler::InventorySnapshot& snap = *state.snapshot;
  for (uint32_t i = 0; i < snap.num_nodes(); ++i) {
    const scheduler::InventorySnapshot::NodeEntry& entry = snap.node(i);
    ++out.nodes_by_state[std::string(
        scheduler::NodeStateName(entry.node.state))];
    const int64_t total = Chips(entry.node.resources);
    if (total == 0) continue;
    auto& [t, f] = out.chips_total_free[{
        Label(entry.node.labels, scheduler::kLabelAcceleratorType),
        Label(entry.node.labels, scheduler::kLabelZone)}];
    t += total;
    f += Chips(entry.free);
  }

  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>>
      whole_and_free_chips;  // per shape: chips in whole free slices, free
                             // chips
  std::map<std::pair<std::string, std::string>, int64_t> boxed_chips;
  // per shape: chips in each slice's largest free aligned box
  for (uint32_t s = 0; s < snap.num_slices(); ++s) {
    const scheduler::InventorySnapshot::SliceEntry& slice = snap.slice(s);
    const scheduler::SliceInfo& info = slice.info;
    std::string tier, zone;
    int64_t total = 0, free = 0;
    for (const std::string& node_id : info.node_ids) {
      const int64_t index = snap.NodeIndex(node_id);
      if (index < 0) continue;
      const scheduler::InventorySnapshot::NodeEntry& entry = snap.node(index);
      const scheduler::Node& node = entry.node;
      if (tier.empty()) tier = Label(node.labels, scheduler::kLabelCapacityTier);
      if (zone.empty()) zone = Label(node.labels, scheduler::kLabelZone);
      total += Chips(node.resources);
      if (scheduler::TakesPlacements(node)) free += Chips(entry.free);
    }
    const bool whole = info.intact && slice.free();
    auto& group =
        out.slices[{info.accelerator_type, info.topology, tier, zone}];
    ++group.total_slices;
    group.free_slices += whole ? 1 : 0;
    group.total_chips += total;
    group.free_chips += free;
    auto& [whole_chips, free_chips] =
        whole_and_free_chips[{info.accelerator_type, info.topology}];
    whole_chips += whole ? free : 0;
    free_chips += free;
    int64_t& boxed = boxed_chips[{info.accelerator_type, info.topology}];
    const scheduler::SubsliceCapacity capacity =
        scheduler::FreeSubslices(snap, info.name);
    for (const auto& [topology, count] : capacity.free_boxes) {
      out.free_subslices[{info.accelerator_type, topology}] += count;
    }
    auto generation = scheduler::ParseTpuGeneration(info.accelerator_type);
    if (whole) {
      boxed += free;
    } else if (!capacity.largest_free.empty() && generation.ok()) {
      auto largest =
          scheduler::ResolveTpuShape(*generation, capacity.largest_free);
      if (largest.ok()) boxed += largest->chips;
    }
  }
  int64_t all_whole = 0, all_free = 0;
  for (const auto& [shape, counts] : whole_and_free_chips) {
    const auto [whole, free] = counts;
    out.fragmentation_by_shape[shape] =
        free == 0 ? 0.0 : 1.0 - static_cast<double>(whole) / free;
    all_whole += whole;
    all_free += free;
  }
  out.fragmentation =
      all_free == 0 ? 0.0 : 1.0 - static_cast<double>(all_whole) / all_free;
  int64_t all_boxed = 0;
  for (const auto& [shape, counts] : whole_and_free_chips) {
    const int64_t free = counts.second, boxed = boxed_chips[shape];
    out.subslice_fragmentation_by_shape[shape] =
        free == 0 ? 0.0 : 1.0 - static_cast<double>(boxed) / free;
    all_boxed += boxed;
  }
  out.subslice_fragmentation =
      all_free == 0 ? 0.0 : 1.0 - static_cast<double>(all_boxed) / all_free;

  std::map<std::string, int64_t> shapes;
  for (const auto& [prio, seq, id] : state.queue) {
    auto it = state.pgs.find(id);
    if (it == state.pgs.end()) continue;
    const PlacementGroup& g = it->second;
    if (g.state != PgState::kPending && g.state != PgState::kRescheduling) {
      continue;
    }
    ++out.pending;
    out.oldest_pending_seconds = std::max(
        out.oldest_pending_seconds, absl::ToDoubleSeconds(now - g.queued_time));
    ++shapes[Shape(g)];
  }
  for (const auto& [shape, groups] : shapes) {
    out.pending_shapes.push_back(absl::StrCat(
        shape, " (", groups, groups == 1 ? " group)" : " groups)"));
  }
  return out;
}

}  // namespace sliced::server
