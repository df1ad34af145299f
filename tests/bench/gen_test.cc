// The fleet and trace generators are deterministic and well formed.
#include <algorithm>

#include "bench/gen/fleet.h"
#include "bench/gen/trace.h"
#include "gtest/gtest.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"

namespace sliced::bench {
namespace {

TEST(FleetTest, SameSeedSameFleetOtherSeedOtherFleet) {
  const Fleet a = GenerateFleet({2000, 7});
  const Fleet b = GenerateFleet({2000, 7});
  const Fleet c = GenerateFleet({2000, 8});
  EXPECT_EQ(a.nodes, b.nodes);
  EXPECT_EQ(Fingerprint(a), Fingerprint(b));
  EXPECT_NE(Fingerprint(a), Fingerprint(c));
}

TEST(FleetTest, ExactSizeAndEverySliceIntact) {
  for (int64_t n : {1000, 3000}) {
    const Fleet fleet = GenerateFleet({n, 3});
    ASSERT_EQ(static_cast<int64_t>(fleet.nodes.size()), n);
    auto snap = scheduler::InventorySnapshot::Build(fleet.nodes, {});
    ASSERT_TRUE(snap.ok()) << snap.status();
    int64_t slices = 0;
    for (const auto& s : fleet.shapes) slices += s.slices;
    const auto listed = (*snap)->ListSlices();
    EXPECT_EQ(static_cast<int64_t>(listed.size()), slices);
    for (const auto& s : listed) EXPECT_TRUE(s.info.intact) << s.info.name << s.info.reason;
    EXPECT_GT(fleet.cpu_nodes, 0);
    EXPECT_GT(fleet.shapes.size(), 8u);
  }
}

TEST(TraceTest, SameSeedSameTraceAndWellFormed) {
  const Fleet fleet = GenerateFleet({2000, 1});
  TraceOptions options;
  options.jobs = 1500;
  options.seed = 5;
  const std::vector<Job> a = GenerateTrace(fleet, options);
  const std::vector<Job> b = GenerateTrace(fleet, options);
  options.seed = 6;
  const std::vector<Job> c = GenerateTrace(fleet, options);
  EXPECT_EQ(Fingerprint(a), Fingerprint(b));
  EXPECT_NE(Fingerprint(a), Fingerprint(c));
  ASSERT_EQ(a.size(), 1500u);
  int multi = 0, classed = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(scheduler::ValidateRequest(a[i].request).ok()) << a[i].shape;
    if (i > 0) {
      EXPECT_GE(a[i].arrival_s, a[i - 1].arrival_s);
    }
    EXPECT_GT(a[i].duration_s, 0);
    multi += a[i].kind == JobKind::kMultiSlice;
    classed += !a[i].compute_class.empty();
  }
  EXPECT_GT(multi, 0);
  EXPECT_GT(classed, 0);
}

TEST(TraceTest, SliceBatchIsDeterministicAndOversubscribed) {
  const Fleet fleet = GenerateFleet({1000, 2});
  const std::vector<Job> a = GenerateSliceBatch(fleet, 9, 1.3);
  EXPECT_EQ(Fingerprint(a), Fingerprint(GenerateSliceBatch(fleet, 9, 1.3)));
  int64_t asked = 0, slices = 0;
  for (const Job& j : a) {
    ASSERT_TRUE(j.request.slice.has_value());
    asked += j.request.slice->num_slices;
  }
  for (const auto& s : fleet.shapes) slices += s.slices;
  EXPECT_GE(asked, slices * 13 / 10);
}

}  // namespace
}  // namespace sliced::bench
