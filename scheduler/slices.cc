#include "scheduler/slices.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/parallel.h"
#include "base/quote.h"

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

// The slice's shape from its labels: pod type, hosts and chips, or why it
// does not resolve.
struct ShapeCheck {
  std::string pod_type;
  int64_t hosts = 0;
  int64_t chips = -1;          // -1 when unknown
  int max_per_chip = 1;        // TPU resources a chip may count for
  std::vector<int> host_grid;  // {x, y, z}; empty when unknown
  std::string problem;
};

ShapeCheck CheckShape(const std::string& accelerator_type,
                      const std::string& topology) {
  ShapeCheck out;
  auto generation = ParseTpuGeneration(accelerator_type);
  if (!generation.ok()) {
    out.problem =
        accelerator_type.empty()
            ? std::string("no accelerator type label")
            : absl::StrCat("unknown accelerator type ", accelerator_type);
    return out;
  }
  auto shape = ResolveTpuShape(*generation, topology);
  if (!shape.ok()) {
    out.problem = absl::StrCat("unknown topology ", topology, " for ",
                               TpuGenerationName(*generation));
    return out;
  }
  out.pod_type = shape->pod_type;
  out.hosts = shape->hosts;
  out.chips = shape->chips;
  out.max_per_chip = MaxTpuResourcePerChip(*generation);
  out.host_grid = shape->host_grid;
  return out;
}

// Each laid-out host's position from its coordinate label; a slice where
// every expected host reports a distinct valid one has known positions.
// Adds a problem per invalid value and per cell two hosts claim.
void PlaceHosts(const std::vector<const Node*>& hosts, const ShapeCheck& shape,
                SliceInfo& slice, std::vector<std::string>& problems) {
  absl::flat_hash_map<std::string, const Node*> by_id;
  for (const Node* host : hosts) by_id[host->node_id] = host;
  absl::btree_map<std::array<int, 3>, std::string> taken;
  int64_t known = 0;
  for (const std::string& id : slice.node_ids) {
    std::string& position = slice.host_positions.emplace_back();
    auto host = by_id.find(id);
    if (host == by_id.end() || shape.host_grid.empty()) continue;
    auto label = host->second->labels.find(kLabelTpuHostCoords);
    if (label == host->second->labels.end()) continue;
    absl::StatusOr<std::array<int, 3>> cell =
        ParseHostCoords(label->second, shape.host_grid);
    if (!cell.ok()) {
      problems.push_back(absl::StrCat("node ", id, ": ", kLabelTpuHostCoords,
                                      " ", cell.status().message()));
      continue;
    }
    position = absl::StrJoin(*cell, "-");
    auto [it, fresh] = taken.try_emplace(*cell, id);
    if (!fresh) {
      problems.push_back(absl::StrCat("nodes ", it->second, " and ", id,
                                      " both report position ", position, " (",
                                      kLabelTpuHostCoords, ")"));
      continue;
    }
    ++known;
  }
  slice.positions_assumed =
      known != slice.expected_hosts || slice.expected_hosts == 0;
}

// Hosts placed by worker id: node_ids[w] is worker w ("" when missing),
// followed by the hosts with no valid place, by worker id.
struct WorkerLayout {
  std::vector<std::string> node_ids;
  std::vector<std::string> problems;
};

WorkerLayout LayOutWorkers(const std::vector<const Node*>& hosts,
                           int64_t expected_hosts, bool default_zero) {
  WorkerLayout out;
  out.node_ids.assign(expected_hosts, "");
  std::vector<std::pair<int64_t, const Node*>> extras;
  for (const Node* host : hosts) {
    const int64_t id = WorkerId(*host, default_zero);
    if (id < 0) {
      out.problems.push_back(
          absl::StrCat("node ", host->node_id, " has no valid worker id"));
      extras.emplace_back(id, host);
    } else if (id >= expected_hosts) {
      if (expected_hosts > 0) {
        out.problems.push_back(absl::StrCat("node ", host->node_id,
                                            " has worker id ", id,
                                            ", expected < ", expected_hosts));
      }
      extras.emplace_back(id, host);
    } else if (!out.node_ids[id].empty()) {
      out.problems.push_back(absl::StrCat("duplicate worker id ", id,
                                          " (nodes ", out.node_ids[id], ", ",
                                          host->node_id, ")"));
      extras.emplace_back(id, host);
    } else {
      out.node_ids[id] = host->node_id;
    }
  }
  for (int64_t i = 0; i < expected_hosts; ++i) {
    if (out.node_ids[i].empty()) {
      out.problems.push_back(
          absl::StrCat("missing worker ", i, " of ", expected_hosts));
    }
  }
  std::stable_sort(
      extras.begin(), extras.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, host] : extras) out.node_ids.push_back(host->node_id);
  return out;
}

// "node a-w3 is DEAD" for one host; "64 of 64 hosts are DEAD (a-w0, a-w1,
// a-w2 and 61 more)" for several alike, the first named in worker order.
std::string HostsAlike(absl::string_view why, std::vector<const Node*> alike,
                       size_t of, bool default_zero) {
  constexpr size_t kNamed = 3;
  if (alike.size() == 1) {
    return absl::StrCat("node ", alike[0]->node_id, " is ", why);
  }
  std::stable_sort(
      alike.begin(), alike.end(), [default_zero](const Node* a, const Node* b) {
        return WorkerId(*a, default_zero) < WorkerId(*b, default_zero);
      });
  std::string line =
      absl::StrCat(alike.size(), " of ", of, " hosts are ", why, " (");
  for (size_t i = 0; i < std::min(alike.size(), kNamed); ++i) {
    absl::StrAppend(&line, i > 0 ? ", " : "", alike[i]->node_id);
  }
  if (alike.size() > kNamed) {
    absl::StrAppend(&line, " and ", alike.size() - kNamed, " more");
  }
  return absl::StrCat(line, ")");
}

// Hosts that take no placements (not ALIVE, or quarantined), and chips that do
// not add up to the shape's (times a per-chip count the generation allows, e.g.
// 2 on v7x). Hosts alike are said once (HostsAlike), so a slice whose hosts
// all went is one line, not 64: the line Explain and a pending group's reason
// quote.
std::vector<std::string> HostProblems(const std::vector<const Node*>& hosts,
                                      int64_t expected_chips, int max_per_chip,
                                      bool default_zero) {
  std::vector<std::string> problems;
  // Why a host takes no placements -> those hosts, in order of first met.
  std::vector<std::pair<std::string, std::vector<const Node*>>> idle;
  int64_t chips = 0;
  for (const Node* host : hosts) {
    if (!TakesPlacements(*host)) {
      std::string why = WhyNoPlacements(*host);
      auto it =
          absl::c_find_if(idle, [&](const auto& w) { return w.first == why; });
      if (it == idle.end()) {
        idle.emplace_back(std::move(why), std::vector<const Node*>{host});
      } else {
        it->second.push_back(host);
      }
    }
    const absl::string_view partition = LabelOr(*host, kLabelTpuPartitionState);
    if (!partition.empty() && partition != "HEALTHY") {
      problems.push_back(absl::StrCat("node ", host->node_id,
                                      "'s partition is ", partition));
    }
    chips += TpuAmount(*host);
  }
  std::vector<std::string> idle_lines;
  for (auto& [why, alike] : idle) {
    idle_lines.push_back(
        HostsAlike(why, std::move(alike), hosts.size(), default_zero));
  }
  problems.insert(problems.begin(), std::make_move_iterator(idle_lines.begin()),
                  std::make_move_iterator(idle_lines.end()));
  bool adds_up = false;
  for (int m = 1; m <= max_per_chip; ++m) {
    adds_up |= chips == expected_chips * m * kResourceScale;
  }
  if (expected_chips >= 0 && !adds_up) {
    problems.push_back(absl::StrCat(
        "TPU chips add up to ", FromFixedPoint(chips), ", expected ",
        expected_chips, max_per_chip > 1 ? " (or 2 per chip)" : ""));
  }
  return problems;
}

// Checks one slice. Steps: hosts agree on accelerator type and topology; the
// shape resolves; hosts lay out as workers 0..hosts-1; every host is ALIVE
// and the chips add up. Every problem found goes into `reason`.
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
  const ShapeCheck shape = CheckShape(slice.accelerator_type, slice.topology);
  if (!shape.problem.empty()) problems.push_back(shape.problem);
  slice.pod_type = shape.pod_type;
  slice.expected_hosts = shape.hosts;

  // Place hosts by worker id; single-host slices default to worker 0.
  const bool default_zero = single_host_node || slice.expected_hosts == 1;
  WorkerLayout layout =
      LayOutWorkers(hosts, slice.expected_hosts, default_zero);
  slice.node_ids = std::move(layout.node_ids);
  for (std::string& p : layout.problems) problems.push_back(std::move(p));
  PlaceHosts(hosts, shape, slice, problems);
  for (std::string& p :
       HostProblems(hosts, shape.chips, shape.max_per_chip, default_zero)) {
    problems.push_back(std::move(p));
  }
  slice.intact = problems.empty();
  slice.reason = absl::StrJoin(problems, "; ");
  return slice;
}

}  // namespace

absl::StatusOr<std::array<int, 3>> ParseHostCoords(
    absl::string_view value, const std::vector<int>& grid) {
  std::vector<absl::string_view> parts = absl::StrSplit(value, '-');
  std::array<int, 3> cell = {0, 0, 0};
  bool ok = parts.size() == 2 || parts.size() == 3;
  for (size_t d = 0; ok && d < parts.size(); ++d) {
    ok = absl::SimpleAtoi(parts[d], &cell[d]) && cell[d] >= 0;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        Quote(value),
        " is not a position: expected x-y-z (non-negative integers)"));
  }
  for (int d = 0; d < 3; ++d) {
    if (cell[d] >= grid[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat(Quote(value), " is outside the slice's ",
                       absl::StrJoin(grid, "x"), " host grid"));
    }
  }
  return cell;
}

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

std::vector<SliceInfo> DeriveSlices(const std::vector<const Node*>& nodes,
                                    int threads) {
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
  std::vector<std::pair<std::string, std::pair<std::vector<const Node*>, bool>>>
      ordered(std::make_move_iterator(groups.begin()),
              std::make_move_iterator(groups.end()));
  std::vector<SliceInfo> slices(ordered.size());
  auto check = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      auto& [name, group] = ordered[i];
      slices[i] = CheckSlice(std::move(name), std::move(group.first),
                             group.second);
    }
  };
  ParallelChunks(ordered.size(), 512, threads, check);
  return slices;
}

std::string FormatSubsliceName(absl::string_view parent,
                               absl::string_view topology,
                               const std::array<int, 3>& origin) {
  return absl::StrCat(parent, "/", topology, "@", origin[0], "-", origin[1],
                      "-", origin[2]);
}

absl::string_view ParentSliceName(absl::string_view name) {
  const size_t slash = name.find('/');
  return slash == absl::string_view::npos ? name : name.substr(0, slash);
}

bool IsCarvedSubsliceName(absl::string_view name) {
  const size_t slash = name.find('/');
  const size_t at = name.rfind('@');
  if (slash == absl::string_view::npos || at == absl::string_view::npos ||
      at < slash) {
    return false;
  }
  // The origin, "x-y-z": a host's place in the parent's grid. Digits are
  // checked first, so a stitched name's cubes build no error text.
  const absl::string_view origin = name.substr(at + 1);
  const int any = std::numeric_limits<int>::max();
  return std::count(origin.begin(), origin.end(), '-') == 2 &&
         std::all_of(
             origin.begin(), origin.end(),
             [](char c) { return absl::ascii_isdigit(c) || c == '-'; }) &&
         ParseHostCoords(origin, {any, any, any}).ok();
}

}  // namespace sliced::scheduler
