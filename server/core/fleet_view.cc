#include "server/core/fleet_view.h"

#include <map>
#include <tuple>

#include "absl/container/btree_set.h"
#include "absl/strings/str_join.h"
#include "scheduler/snapshot.h"
#include "scheduler/tpu.h"

namespace sliced::server {
namespace {

using scheduler::InventorySnapshot;

SliceStatus StatusOf(const InventorySnapshot::SliceEntry& slice) {
  if (!slice.info.intact) return SliceStatus::kBroken;
  if (slice.allocated_hosts == 0) return SliceStatus::kFree;
  if (slice.allocated_hosts >=
      static_cast<int64_t>(slice.info.node_ids.size())) {
    return SliceStatus::kHeld;
  }
  return SliceStatus::kPartial;
}

int64_t Chips(const scheduler::ResourceSet& resources) {
  auto it = resources.find(scheduler::kResourceTpu);
  return it == resources.end() ? 0 : it->second / scheduler::kResourceScale;
}

bool Matches(const SliceFilter& f, const InventorySnapshot::SliceEntry& s) {
  return (f.accelerator_type.empty() ||
          f.accelerator_type == s.info.accelerator_type) &&
         (f.topology.empty() || f.topology == s.info.topology) &&
         (f.tier.empty() || f.tier == s.tier) &&
         (f.zone.empty() || f.zone == s.zone) &&
         (f.status.empty() || f.status == SliceStatusName(StatusOf(s)));
}

}  // namespace

absl::string_view SliceStatusName(SliceStatus status) {
  switch (status) {
    case SliceStatus::kFree:
      return "free";
    case SliceStatus::kHeld:
      return "held";
    case SliceStatus::kPartial:
      return "partial";
    case SliceStatus::kBroken:
      return "broken";
  }
  return "unknown";
}

std::vector<SliceGroupRow> SliceGroups(const InventorySnapshot& snap) {
  std::map<std::tuple<std::string, std::string, std::string, std::string>,
           SliceGroupRow>
      rows;
  // Per shape: free chips in whole free slices, and all free chips.
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>>
      shape_chips;
  for (uint32_t s = 0; s < snap.num_slices(); ++s) {
    const InventorySnapshot::SliceEntry& slice = snap.slice(s);
    SliceGroupRow& row = rows[{slice.info.accelerator_type,
                               slice.info.topology, slice.tier, slice.zone}];
    if (row.total == 0) {
      row.accelerator_type = slice.info.accelerator_type;
      row.topology = slice.info.topology;
      row.pod_type = slice.info.pod_type;
      row.tier = slice.tier;
      row.zone = slice.zone;
      row.hosts_per_slice = slice.shape_known ? slice.shape.hosts
                                              : slice.info.expected_hosts;
    }
    ++row.total;
    const SliceStatus status = StatusOf(slice);
    switch (status) {
      case SliceStatus::kFree:
        ++row.free;
        break;
      case SliceStatus::kHeld:
        ++row.held;
        break;
      case SliceStatus::kPartial:
        ++row.partial;
        break;
      case SliceStatus::kBroken:
        ++row.broken;
        break;
    }
    int64_t free = 0;
    for (uint32_t host : snap.HostIndexes(slice)) {
      const InventorySnapshot::NodeEntry& node = snap.node(host);
      row.total_chips += Chips(node.node.resources);
      if (scheduler::TakesPlacements(node.node)) free += Chips(node.free);
    }
    row.free_chips += free;
    auto& [whole, all] =
        shape_chips[{slice.info.accelerator_type, slice.info.topology}];
    whole += status == SliceStatus::kFree ? free : 0;
    all += free;
  }
  std::vector<SliceGroupRow> out;
  out.reserve(rows.size());
  for (auto& [key, row] : rows) {
    const auto [whole, all] = shape_chips[{row.accelerator_type, row.topology}];
    row.fragmentation =
        all == 0 ? 0.0 : 1.0 - static_cast<double>(whole) / all;
    out.push_back(std::move(row));
  }
  return out;
}

SliceMapPage SliceMap(const InventorySnapshot& snap, const SliceFilter& filter,
                      absl::string_view after, int limit) {
  SliceMapPage page;
  for (uint32_t s = 0; s < snap.num_slices(); ++s) {
    const InventorySnapshot::SliceEntry& slice = snap.slice(s);
    if (!Matches(filter, slice)) continue;
    ++page.total;
    if (slice.info.name <= after && !after.empty()) continue;
    if (static_cast<int>(page.slices.size()) == limit) {
      page.next = page.slices.back().info.name;
      continue;  // keep counting
    }
    SliceRow& row = page.slices.emplace_back();
    row.info = slice.info;
    row.tier = slice.tier;
    row.zone = slice.zone;
    row.status = StatusOf(slice);
    if (slice.shape_known) {
      row.host_grid = absl::StrJoin(slice.shape.host_grid, "x");
    }
    absl::btree_set<std::string> holders;
    for (size_t i = 0; i < slice.info.node_ids.size(); ++i) {
      HostCell& cell = row.hosts.emplace_back();
      cell.node_id = slice.info.node_ids[i];
      if (i < slice.info.host_positions.size()) {
        cell.position = slice.info.host_positions[i];
      }
      const int64_t index = snap.NodeIndex(cell.node_id);
      if (index < 0) continue;
      const InventorySnapshot::NodeEntry& node = snap.node(index);
      cell.state = node.node.state;
      cell.quarantine_reason = node.node.quarantine_reason;
      absl::btree_set<std::string> pgs;
      for (const auto& a : node.allocations) pgs.insert(a.pg_id);
      cell.pg_ids.assign(pgs.begin(), pgs.end());
      holders.insert(pgs.begin(), pgs.end());
    }
    row.pg_ids.assign(holders.begin(), holders.end());
  }
  return page;
}

QueuePage Queue(const ClusterState& state, int64_t offset, int limit) {
  QueuePage page;
  page.total = static_cast<int64_t>(state.queue.size());
  page.first_position = offset;
  int64_t position = 0;
  for (const auto& [priority, sequence, id] : state.queue) {
    if (position++ < offset) continue;
    if (static_cast<int>(page.groups.size()) >= limit) break;
    const PlacementGroup* g = state.pgs.Find(id);
    if (g != nullptr) page.groups.push_back(*g);
  }
  return page;
}

}  // namespace sliced::server
