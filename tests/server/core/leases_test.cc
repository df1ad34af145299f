// Node leases: a renewal keeps the later time, a node never renewed counts
// from the epoch, a forgotten node counts from the epoch again; Stale lists
// the late ones; renewals from many threads at once lose none.
#include "server/core/leases.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sliced::server {
namespace {

const absl::Time kEpoch = absl::FromUnixSeconds(1'800'000'000);

TEST(LeasesTest, LaterRenewalsWinAndUnknownNodesCountFromTheEpoch) {
  Leases leases(kEpoch);
  EXPECT_EQ(leases.Last("a"), kEpoch);
  leases.Renew("a", kEpoch + absl::Seconds(5));
  leases.Renew("a", kEpoch + absl::Seconds(3));  // late, out of order
  EXPECT_EQ(leases.Last("a"), kEpoch + absl::Seconds(5));
  // A renewal before the epoch (a clock behind) counts from the epoch.
  leases.Renew("b", kEpoch - absl::Seconds(1));
  EXPECT_EQ(leases.Last("b"), kEpoch);
  leases.Forget("a");
  EXPECT_EQ(leases.Last("a"), kEpoch);
}

TEST(LeasesTest, StaleListsTheLateOnesAndNobodyBeforeATimeoutPassed) {
  Leases leases(kEpoch);
  leases.Renew("early", kEpoch);
  leases.Renew("late", kEpoch + absl::Seconds(20));
  // Within one timeout of the epoch, nobody is late.
  EXPECT_TRUE(leases.Stale(kEpoch).empty());
  EXPECT_EQ(leases.Stale(kEpoch + absl::Seconds(10)),
            std::vector<std::string>{"early"});
  std::vector<std::string> both = leases.Stale(kEpoch + absl::Seconds(30));
  std::sort(both.begin(), both.end());
  EXPECT_EQ(both, (std::vector<std::string>{"early", "late"}));
  leases.Forget("early");
  EXPECT_EQ(leases.Stale(kEpoch + absl::Seconds(30)),
            std::vector<std::string>{"late"});
}

// A lease check that found a late lease with no node forgets it only if it
// is still late: a registration may have renewed it since (and installs
// its node after the check looked).
TEST(LeasesTest, ForgetIfStaleKeepsALeaseRenewedSince) {
  Leases leases(kEpoch);
  const absl::Time deadline = kEpoch + absl::Seconds(10);
  leases.Renew("x", kEpoch + absl::Seconds(1));
  ASSERT_EQ(leases.Stale(deadline), std::vector<std::string>{"x"});
  leases.Renew("x", kEpoch + absl::Seconds(15));  // re-registered meanwhile
  leases.ForgetIfStale("x", deadline);
  EXPECT_EQ(leases.Last("x"), kEpoch + absl::Seconds(15));
  leases.Renew("y", kEpoch + absl::Seconds(2));
  leases.ForgetIfStale("y", deadline);
  EXPECT_TRUE(leases.Stale(kEpoch + absl::Seconds(30)) ==
              std::vector<std::string>{"x"});
}

TEST(LeasesTest, ConcurrentRenewalsOfManyNodesAreAllKept) {
  Leases leases(kEpoch);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&leases, t] {
      for (int i = 0; i < 1000; ++i) {
        leases.Renew(absl::StrCat("n", i), kEpoch + absl::Seconds(t + 1));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(leases.Last(absl::StrCat("n", i)), kEpoch + absl::Seconds(4));
  }
}

}  // namespace
}  // namespace sliced::server
