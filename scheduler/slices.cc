#include "scheduler/slices.h"

#include <algorithm>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sliced::scheduler {
namespace {

absl::string_view LabelOr(const Node& node, absl::string_view key,
                          absl::string_view fallback = "") {
  auto it = node.labels.find(key);
  return it == node.labels.end() ? fallback : absl::string_view(it->second);
}

// Worker id of `node`, or -1 when absent or not a non-negative integer.
int64_t WorkerId(const Node& node, bool default_zero) {
  auto it = node.labels.find(kLabelTpuWorkerId);
  if (it == node.labels.end()) return default_zero ? 0 : -1;
  int64_t id = -1;
  if (!absl::SimpleAtoi(it->second, &id) || id < 0) return -1;
  return id;
}

int64_t TpuAmount(const Node& node) {
  auto it = node.resources.find(kResourceTpu);
  return it == node.resources.end() ? 0 : it->second;
}

SliceInfo CheckSlice(std::string name, std::vector<const Node*> hosts,
                     bool single_host_node) {
  std::sort(hosts.begin(), hosts.end(), [](const Node* a, const Node* b) {
    return a->node_id < b->node_id;
  });
  SliceInfo slice;
  slice.name = std::move(name);
  slice.accelerator_type =
      std::string(LabelOr(*hosts[0], kLabelAcceleratorType));
  slice.topology = std::string(LabelOr(*hosts[0], kLabelTpuTopology));
  std::vector<std::string> problems;
  for (const Node* host : hosts) {
    if (LabelOr(*host, kLabelAcceleratorType) != slice.accelerator_type ||
        LabelOr(*host, kLabelTpuTopology) != slice.topology) {
      problems.push_back(absl::StrCat(
          "hosts disagree on accelerator type/topology (", hosts[0]->node_id,
          ": ", slice.accelerator_type, " ", slice.topology, ", ",
          host->node_id, ": ", LabelOr(*host, kLabelAcceleratorType), " ",
          LabelOr(*host, kLabelTpuTopology), ")"));
      break;
    }
  }
  int64_t expected_chips = -1;
  auto generation = ParseTpuGeneration(slice.accelerator_type);
  if (!generation.ok()) {
    problems.push_back(slice.accelerator_type.empty()
                           ? std::string("no accelerator type label")
                           : absl::StrCat("unknown accelerator type ",
                                          slice.accelerator_type));
  } else {
    auto shape = ResolveTpuShape(*generation, slice.topology);
    if (!shape.ok()) {
      problems.push_back(absl::StrCat("unknown topology ", slice.topology,
                                      " for ", TpuGenerationName(*generation)));
    } else {
      slice.pod_type = shape->pod_type;
      slice.expected_hosts = shape->hosts;
      expected_chips = shape->chips;
    }
  }

  // Place hosts by worker id; single-host slices default to worker 0.
  const bool default_zero = single_host_node || slice.expected_hosts == 1;
  slice.node_ids.assign(slice.expected_hosts, "");
  std::vector<std::pair<int64_t, const Node*>> extras;
  for (const Node* host : hosts) {
    const int64_t id = WorkerId(*host, default_zero);
    if (id < 0) {
      problems.push_back(
          absl::StrCat("node ", host->node_id, " has no valid worker id"));
      extras.emplace_back(id, host);
    } else if (id >= slice.expected_hosts) {
      if (slice.expected_hosts > 0) {
        problems.push_back(absl::StrCat("node ", host->node_id,
                                        " has worker id ", id, ", expected < ",
                                        slice.expected_hosts));
      }
      extras.emplace_back(id, host);
    } else if (!slice.node_ids[id].empty()) {
      problems.push_back(absl::StrCat("duplicate worker id ", id, " (nodes ",
                                      slice.node_ids[id], ", ", host->node_id,
                                      ")"));
      extras.emplace_back(id, host);
    } else {
      slice.node_ids[id] = host->node_id;
    }
  }
  for (int64_t i = 0; i < slice.expected_hosts; ++i) {
    if (slice.node_ids[i].empty()) {
      problems.push_back(
          absl::StrCat("missing worker ", i, " of ", slice.expected_hosts));
    }
  }
  std::stable_sort(
      extras.begin(), extras.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, host] : extras) slice.node_ids.push_back(host->node_id);

  int64_t chips = 0;
  for (const Node* host : hosts) {
    if (host->state != NodeState::kAlive) {
      problems.push_back(absl::StrCat("node ", host->node_id, " is ",
                                      NodeStateName(host->state)));
    }
    chips += TpuAmount(*host);
  }
  if (expected_chips >= 0 && chips != expected_chips * kResourceScale) {
    problems.push_back(absl::StrCat("TPU chips add up to ",
                                    FromFixedPoint(chips), ", expected ",
                                    expected_chips));
  }
  slice.intact = problems.empty();
  slice.reason = absl::StrJoin(problems, "; ");
  return slice;
}

}  // namespace

bool IsSingleHostTpuNode(const Node& node) {
  auto generation = ParseTpuGeneration(LabelOr(node, kLabelAcceleratorType));
  if (!generation.ok()) return false;
  auto shape = ResolveTpuShape(*generation, LabelOr(node, kLabelTpuTopology));
  return shape.ok() && shape->hosts == 1;
}

std::string SliceNameOf(const Node& node) {
  auto it = node.labels.find(kLabelTpuSliceName);
  if (it != node.labels.end()) return it->second;
  if (IsSingleHostTpuNode(node)) return node.node_id;
  return "";
}

std::vector<SliceInfo> DeriveSlices(const std::vector<const Node*>& nodes) {
  // name -> (hosts, named after its node because unlabelled).
  absl::btree_map<std::string, std::pair<std::vector<const Node*>, bool>>
      groups;
  for (const Node* node : nodes) {
    const bool labelled = node->labels.contains(kLabelTpuSliceName);
    std::string name = SliceNameOf(*node);
    if (name.empty()) continue;
    auto& group = groups[name];
    group.first.push_back(node);
    group.second = group.second || !labelled;
  }
  std::vector<SliceInfo> slices;
  slices.reserve(groups.size());
  for (auto& [name, group] : groups) {
    slices.push_back(CheckSlice(name, std::move(group.first), group.second));
  }
  return slices;
}

}  // namespace sliced::scheduler
