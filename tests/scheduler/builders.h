// Builders for engine tests: nodes, TPU slices and clusters.
//
// Plain helper functions; no shared state.
#ifndef SLICED_TESTS_SCHEDULER_BUILDERS_H_
#define SLICED_TESTS_SCHEDULER_BUILDERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/snapshot.h"
#include "scheduler/tpu.h"
#include "scheduler/types.h"

namespace sliced::scheduler::testing {

inline int64_t Units(double v) {
  return static_cast<int64_t>(v * kResourceScale);
}

// A CPU-only node.
inline Node CpuNode(std::string id, double cpu = 8, std::string zone = "z1",
                    std::string tier = "on-demand") {
  Node n;
  n.node_id = std::move(id);
  n.address = n.node_id + ".internal";
  n.labels = {{std::string(kLabelZone), zone},
              {std::string(kLabelCapacityTier), tier}};
  n.resources = {{"CPU", Units(cpu)}, {"memory", Units(32e9)}};
  return n;
}

// One host of a TPU slice.
inline Node TpuHost(std::string id, std::string slice, std::string accelerator,
                    std::string topology, int worker, double chips,
                    std::string zone = "z1", std::string tier = "on-demand") {
  Node n;
  n.node_id = std::move(id);
  n.address = n.node_id + ".internal";
  n.labels = {{std::string(kLabelAcceleratorType), accelerator},
              {std::string(kLabelTpuTopology), topology},
              {std::string(kLabelTpuWorkerId), absl::StrCat(worker)},
              {std::string(kLabelZone), zone},
              {std::string(kLabelCapacityTier), tier}};
  if (!slice.empty()) n.labels[std::string(kLabelTpuSliceName)] = slice;
  n.resources = {
      {"CPU", Units(96)}, {"TPU", Units(chips)}, {"memory", Units(64e9)}};
  return n;
}

// All hosts of an intact slice named `slice`: node ids "<slice>-w<i>".
inline std::vector<Node> Slice(const std::string& slice,
                               const std::string& accelerator,
                               const std::string& topology,
                               std::string zone = "z1",
                               std::string tier = "on-demand") {
  auto gen = ParseTpuGeneration(accelerator);
  auto shape = ResolveTpuShape(*gen, topology);
  std::vector<Node> hosts;
  for (int i = 0; i < shape->hosts; ++i) {
    hosts.push_back(
        TpuHost(absl::StrCat(slice, "-w", i), slice, accelerator, topology, i,
                static_cast<double>(shape->chips_per_host), zone, tier));
  }
  if (shape->hosts > 1) {
    hosts[0].resources[absl::StrCat("TPU-", shape->pod_type, "-head")] =
        kResourceScale;
  }
  return hosts;
}

// A snapshot of `nodes` holding `allocations`; a failed build fails the
// test.
inline std::shared_ptr<const InventorySnapshot> Snap(
    std::vector<Node> nodes, std::vector<Allocation> allocations = {}) {
  auto snap =
      InventorySnapshot::Build(std::move(nodes), std::move(allocations));
  EXPECT_TRUE(snap.ok()) << snap.status();
  return *snap;
}

inline ResourceSet Cpu(double n) { return {{"CPU", Units(n)}}; }
inline ResourceSet Tpu(double n) { return {{"TPU", Units(n)}}; }

inline void Append(std::vector<Node>& to, const std::vector<Node>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

inline std::vector<const Node*> Pointers(const std::vector<Node>& nodes) {
  std::vector<const Node*> out;
  for (const Node& n : nodes) out.push_back(&n);
  return out;
}

}  // namespace sliced::scheduler::testing

#endif  // SLICED_TESTS_SCHEDULER_BUILDERS_H_
