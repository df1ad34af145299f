// The web view's reads (server/core/fleet_view.h) on the core with the
// MemoryStore: slice groups counted by state per shape/tier/zone, slice
// pages with each host's state and holders, the queue in order; and the
// TelemetryStore's compact series.
#include "server/core/fleet_view.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/cluster_summary.h"
#include "tests/scheduler/builders.h"
#include "tests/server/core/harness.h"

namespace sliced::server {
namespace {

using scheduler::testing::Slice;
using testing::Core;

PgSpec V6eSlice(int32_t priority = 0) {
  scheduler::PlacementRequest r;
  r.slice = scheduler::SliceRequirement{
      scheduler::TpuGeneration::kV6e, "4x4", 1, {}, {}, 1};
  PgOwner owner;
  owner.job_id = "job";
  owner.priority = priority;
  auto spec = NewPgSpec(std::move(r), owner, Limits());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::vector<scheduler::Node> Fleet() {
  std::vector<scheduler::Node> nodes;
  for (const char* name : {"a", "b", "c"}) {
    for (auto& n : Slice(name, "TPU-V6E", "4x4", "z1", "spot")) {
      nodes.push_back(std::move(n));
    }
  }
  for (auto& n : Slice("d", "TPU-V6E", "4x4", "z2", "spot")) {
    nodes.push_back(std::move(n));
  }
  return nodes;
}

class FleetViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto core = Core::Start(memory_);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
    ASSERT_TRUE(core_->Register(Fleet()).ok());
  }
  template <typename Fn>
  auto Read(Fn fn) {
    return core_->cluster().Read(fn);
  }
  const scheduler::InventorySnapshot& Snapshot() {
    snapshot_ = Read([](const ClusterState& s) { return s.snapshot; });
    return *snapshot_;
  }
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot_;
  storage::MemoryStore memory_;
  std::unique_ptr<Core> core_;
};

TEST_F(FleetViewTest, GroupsCountSlicesByStatePerShapeTierAndZone) {
  auto held = core_->Create(V6eSlice());
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(core_->Drain("b-w1").ok());  // b: broken
  auto rows = SliceGroups(Snapshot());
  ASSERT_EQ(rows.size(), 2u);
  const SliceGroupRow& z1 = rows[0];
  EXPECT_EQ(z1.zone, "z1");
  EXPECT_EQ(z1.tier, "spot");
  EXPECT_EQ(z1.pod_type, "v6e-16");
  EXPECT_EQ(z1.hosts_per_slice, 4);
  EXPECT_EQ(z1.total, 3);
  EXPECT_EQ(z1.held, 1);
  EXPECT_EQ(z1.broken, 1);
  EXPECT_EQ(z1.free, 1);
  EXPECT_EQ(z1.total_chips, 48);
  EXPECT_EQ(z1.free_chips, 16 + 12);  // c whole, b without the drained host
  EXPECT_EQ(rows[1].zone, "z2");
  EXPECT_EQ(rows[1].free, 1);
  // The summary's fragmentation of the shape: 12 of 44 free chips are not
  // in a whole free slice.
  EXPECT_NEAR(z1.fragmentation, 12.0 / 44.0, 1e-9);
  auto summary = Summarize(core_->cluster(), absl::Now()).summary;
  EXPECT_NEAR(summary.fragmentation_by_shape.at({"TPU-V6E", "4x4"}),
              z1.fragmentation, 1e-9);
}

TEST_F(FleetViewTest, SlicePagesShowHostsAndHoldersAndFilter) {
  auto held = core_->Create(V6eSlice());
  ASSERT_TRUE(held.ok());
  const std::string slice = held->group.slice_names.at(0);
  ASSERT_TRUE(core_->Drain("d-w2").ok());

  auto page = SliceMap(Snapshot(), SliceFilter{}, "", 2);
  EXPECT_EQ(page.total, 4);
  ASSERT_EQ(page.slices.size(), 2u);
  EXPECT_EQ(page.next, "b");
  auto rest = SliceMap(Snapshot(), SliceFilter{}, page.next, 2);
  ASSERT_EQ(rest.slices.size(), 2u);
  EXPECT_EQ(rest.slices[0].info.name, "c");
  EXPECT_EQ(rest.next, "");

  SliceFilter z2;
  z2.zone = "z2";
  auto one = SliceMap(Snapshot(), z2, "", 10);
  ASSERT_EQ(one.slices.size(), 1u);
  const SliceRow& d = one.slices[0];
  EXPECT_EQ(d.status, SliceStatus::kBroken);
  EXPECT_EQ(d.host_grid, "2x2x1");
  ASSERT_EQ(d.hosts.size(), 4u);
  EXPECT_EQ(d.hosts[2].node_id, "d-w2");
  EXPECT_EQ(d.hosts[2].state, scheduler::NodeState::kDraining);

  SliceFilter held_only;
  held_only.status = "held";
  auto mine = SliceMap(Snapshot(), held_only, "", 10);
  ASSERT_EQ(mine.slices.size(), 1u);
  EXPECT_EQ(mine.slices[0].info.name, slice);
  for (const HostCell& h : mine.slices[0].hosts) {
    EXPECT_EQ(h.pg_ids, std::vector<std::string>{held->group.id});
  }
}

TEST_F(FleetViewTest, QueueInOrderWithOffset) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(core_->Create(V6eSlice()).ok());
  auto low = core_->Create(V6eSlice(0));
  auto high = core_->Create(V6eSlice(5));
  ASSERT_TRUE(low.ok() && high.ok());
  auto page = Read([](const ClusterState& s) { return Queue(s, 0, 1); });
  EXPECT_EQ(page.total, 2);
  ASSERT_EQ(page.groups.size(), 1u);
  EXPECT_EQ(page.groups[0].id, high->group.id);  // priority first
  page = Read([](const ClusterState& s) { return Queue(s, 1, 5); });
  EXPECT_EQ(page.first_position, 1);
  ASSERT_EQ(page.groups.size(), 1u);
  EXPECT_EQ(page.groups[0].id, low->group.id);
}

TEST(TelemetrySeriesTest, KeepsRecentCompactSamplesPerNode) {
  TelemetryStore store(absl::Seconds(60));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < TelemetryStore::kSeriesSamples + 5; ++i) {
    ChipMetrics chip;
    chip.chip_index = 1;
    chip.duty_cycle = i % 101;
    chip.hbm_used_bytes = 1;
    chip.hbm_total_bytes = 3;
    ASSERT_TRUE(store.Put({{"n", {chip}}}, t0 + absl::Seconds(i)).ok());
  }
  const absl::Time now = t0 + absl::Seconds(TelemetryStore::kSeriesSamples + 5);
  TelemetryStore::Series series = store.SeriesOf("n", now);
  ASSERT_EQ(series.samples.size(),
            static_cast<size_t>(TelemetryStore::kSeriesSamples));
  EXPECT_EQ(series.samples.front().time, t0 + absl::Seconds(5));
  const TelemetryStore::ChipSample& last = series.samples.back().chips.at(1);
  EXPECT_EQ(last.duty_cycle, TelemetryStore::kSeriesSamples + 4);
  EXPECT_EQ(last.hbm_used_percent, 33);
  EXPECT_FALSE(last.tensorcore_utilization.has_value());
  ASSERT_TRUE(series.latest.has_value());
  // Stale: nothing; forgotten: nothing.
  EXPECT_TRUE(store.SeriesOf("n", now + absl::Minutes(2)).samples.empty());
  store.Forget("n");
  EXPECT_TRUE(store.SeriesOf("n", now).samples.empty());
}

}  // namespace
}  // namespace sliced::server
