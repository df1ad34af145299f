// The live-group table (PgTable), the queue indexes of the cluster state
// (`queue`, `waiting`, `waiting_since`, `created_by_priority`, `waiting_asks`,
// the preemption checks' three, `pgs_by_job`, `pgs_by_state`) and the Txn
// queries answered from them plus the commit group's changes (PendingQueue,
// QueueSize, ForEachWaitingSince, LowestCreatedPriority, ForEachWaitingAsk)
// against a walk of every group, over random commit groups of random ops,
// installed or abandoned, and across a restart.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/cluster.h"
#include "server/core/pg_spec.h"
#include "server/core/txn.h"
#include "storage/store.h"

namespace sliced::server {
namespace {

constexpr PgState kStates[] = {PgState::kPending, PgState::kRescheduling,
                               PgState::kInfeasible, PgState::kCreated,
                               PgState::kPreempting};

using Waiting = std::set<std::pair<absl::Time, std::string>>;

// What the indexes should say, from a walk of the groups: the queue (or
// its waiting part) in queue order.
std::vector<std::string> QueueByWalk(const Txn& txn, bool with_infeasible) {
  std::set<QueueKey> keys;
  txn.ForEachPg([&](const PlacementGroup& pg) {
    if (with_infeasible ? IsQueued(pg.state) : Waits(pg.state)) {
      keys.insert(QueueKeyOf(pg));
    }
    return true;
  });
  std::vector<std::string> ids;
  for (const auto& [p, s, id] : keys) ids.push_back(id);
  return ids;
}
Waiting WaitingByWalk(const Txn& txn, absl::Time cutoff) {
  Waiting w;
  txn.ForEachPg([&](const PlacementGroup& pg) {
    if (Waits(pg.state) && pg.queued_time <= cutoff) {
      w.emplace(pg.queued_time, pg.id);
    }
    return true;
  });
  return w;
}
std::optional<int32_t> LowestCreatedByWalk(const Txn& txn) {
  std::optional<int32_t> lowest;
  txn.ForEachPg([&](const PlacementGroup& pg) {
    if (pg.state == PgState::kCreated) {
      lowest = std::min(lowest.value_or(pg.priority), pg.priority);
    }
    return true;
  });
  return lowest;
}
using Asks = std::set<scheduler::ResourceSet>;
Asks WaitingAsksByWalk(const Txn& txn) {
  Asks asks;
  txn.ForEachPg([&](const PlacementGroup& pg) {
    if (Waits(pg.state)) asks.insert(LeastAskOfANode(pg.request));
    return true;
  });
  return asks;
}
Asks WaitingAsksByIndex(const Txn& txn) {
  Asks asks;
  txn.ForEachWaitingAsk([&](const scheduler::ResourceSet& ask) {
    EXPECT_TRUE(asks.insert(ask).second) << "an ask visited twice";
  });
  return asks;
}
Waiting WaitingByIndex(const Txn& txn, absl::Time cutoff) {
  Waiting w;
  txn.ForEachWaitingSince(cutoff, [&](const PlacementGroup& pg) {
    EXPECT_TRUE(w.emplace(pg.queued_time, pg.id).second)
        << pg.id << " visited twice";
  });
  return w;
}

class ClusterQueueTest : public ::testing::Test {
 protected:
  // A random change to one of 40 groups: put in a random state, queued at
  // a random time of the last minute, or delete.
  void RandomChange(Txn& txn) {
    const std::string id = absl::StrCat("pg-", rng_() % 40);
    if (rng_() % 5 == 0) {
      if (txn.FindPg(id) != nullptr) txn.DeletePg(id);
      return;
    }
    const PlacementGroup* current = txn.FindPg(id);
    PlacementGroup pg = current != nullptr ? *current : PlacementGroup{};
    pg.id = id;
    pg.state = kStates[rng_() % std::size(kStates)];
    pg.priority = static_cast<int32_t>(rng_() % 4) - 1;
    if (pg.sequence == 0) pg.sequence = txn.NextSequence();
    // Re-queued groups get a new time; others sometimes keep theirs.
    if (current == nullptr || rng_() % 2 == 0) {
      pg.queued_time = txn.now() - absl::Seconds(rng_() % 60);
    }
    // One of a few requests, so that groups share asks or not.
    if (current == nullptr || rng_() % 3 == 0) {
      scheduler::Bundle bundle;
      bundle.resources["CPU"] = static_cast<int64_t>(1 + rng_() % 3);
      pg.request.bundles = {bundle};
    }
    // What the preemption checks' indexes key on.
    pg.preempting.clear();
    if (rng_() % 3 == 0) pg.preempting = {absl::StrCat("pg-", rng_() % 40)};
    pg.preemption_deadline =
        txn.now() + absl::Seconds(rng_() % 60) - absl::Seconds(30);
    pg.preemption_policy = rng_() % 4 == 0
                               ? PreemptionPolicy::kNever
                               : PreemptionPolicy::kPreemptLowerPriority;
    if (current == nullptr || rng_() % 2 == 0) {
      pg.placed_time = txn.now() - absl::Seconds(rng_() % 60);
    }
    if (current == nullptr) pg.job_id = absl::StrCat("job-", rng_() % 4);
    if (pg.job_id == "job-0") pg.job_id.clear();  // some name no job
    txn.PutPg(pg);
  }

  // Every query against the walk, at a few cutoffs.
  void CheckQueries(const Txn& txn) {
    const std::vector<std::string> queue = QueueByWalk(txn, true);
    EXPECT_EQ(txn.PendingQueue(), queue);
    EXPECT_EQ(txn.PendingQueue(false), QueueByWalk(txn, false));
    EXPECT_EQ(txn.QueueSize(), static_cast<int64_t>(queue.size()));
    EXPECT_EQ(txn.LowestCreatedPriority(), LowestCreatedByWalk(txn));
    EXPECT_EQ(WaitingAsksByIndex(txn), WaitingAsksByWalk(txn));
    for (int back : {0, 20, 45, 100}) {
      const absl::Time cutoff = txn.now() - absl::Seconds(back);
      EXPECT_EQ(WaitingByIndex(txn, cutoff), WaitingByWalk(txn, cutoff))
          << "cutoff now-" << back << "s";
    }
  }

  // The committed state's preemption indexes against a walk.
  static void CheckPreemptionIndexes(const ClusterState& s) {
    std::set<std::pair<absl::Time, std::string>> preemptors;
    std::map<int32_t, int64_t> may_preempt;
    std::set<std::tuple<absl::Time, int32_t, std::string>> created;
    std::set<std::pair<std::string, std::string>> by_job;
    std::set<std::pair<PgState, std::string>> by_state;
    s.pgs.ForEach([&](const PlacementGroup& pg) {
      if (!pg.job_id.empty()) by_job.emplace(pg.job_id, pg.id);
      by_state.emplace(pg.state, pg.id);
      if (!pg.preempting.empty()) {
        preemptors.emplace(pg.preemption_deadline, pg.id);
      }
      if (pg.state == PgState::kPending && pg.preempting.empty() &&
          pg.preemption_policy != PreemptionPolicy::kNever) {
        ++may_preempt[pg.priority];
      }
      if (pg.state == PgState::kCreated) {
        created.emplace(pg.placed_time, pg.priority, pg.id);
      }
      return true;
    });
    EXPECT_EQ(std::set(s.preemptors_by_deadline.begin(),
                       s.preemptors_by_deadline.end()),
              preemptors);
    EXPECT_EQ(std::map(s.may_preempt_by_priority.begin(),
                       s.may_preempt_by_priority.end()),
              may_preempt);
    EXPECT_EQ(std::set(s.created_by_placed_time.begin(),
                       s.created_by_placed_time.end()),
              created);
    EXPECT_EQ(std::set(s.pgs_by_job.begin(), s.pgs_by_job.end()), by_job);
    EXPECT_EQ(std::set(s.pgs_by_state.begin(), s.pgs_by_state.end()), by_state);
  }

  // A Txn over the committed state alone.
  void CheckCommitted(Cluster& cluster, absl::Time now) {
    cluster.Read([](const ClusterState& s) {
      CheckPreemptionIndexes(s);
      return 0;
    });
    storage::Mutation writes;
    cluster.BeginGroup(now);
    ASSERT_TRUE(cluster
                    .RunOp(
                        [&](Txn& txn) {
                          CheckQueries(txn);
                          return absl::OkStatus();
                        },
                        writes, {})
                    .ok());
    cluster.Abandon();
  }

  std::mt19937 rng_{17};
};

TEST(PgTableTest, FindsByIdAndWalksInIdOrder) {
  PgTable table;
  for (const char* id : {"pg-3", "pg-1", "pg-2", "pg-10"}) {
    PlacementGroup pg;
    pg.id = id;
    pg.name = std::string("first ") + id;
    table.Put(pg);
  }
  PlacementGroup again;
  again.id = "pg-2";
  again.name = "second";
  table.Put(again);  // replaces, keeps one entry
  table.Erase("pg-3");
  table.Erase("pg-404");  // absent: nothing happens

  EXPECT_EQ(table.size(), 3u);
  ASSERT_NE(table.Find("pg-2"), nullptr);
  EXPECT_EQ(table.Find("pg-2")->name, "second");
  EXPECT_EQ(table.Find("pg-3"), nullptr);
  EXPECT_TRUE(table.Contains("pg-10"));
  EXPECT_FALSE(table.Contains("pg-3"));

  auto walk = [&](absl::string_view after, size_t stop_after) {
    std::vector<std::string> ids;
    table.ForEach(
        [&](const PlacementGroup& pg) {
          ids.push_back(pg.id);
          return ids.size() < stop_after;
        },
        after);
    return ids;
  };
  using Ids = std::vector<std::string>;
  EXPECT_EQ(walk("", 99), (Ids{"pg-1", "pg-10", "pg-2"}));  // string order
  EXPECT_EQ(walk("pg-1", 99), (Ids{"pg-10", "pg-2"}));      // after, not at
  EXPECT_EQ(walk("pg-10", 99), (Ids{"pg-2"}));
  EXPECT_EQ(walk("pg-2", 99), Ids{});
  EXPECT_EQ(walk("", 2), (Ids{"pg-1", "pg-10"}));  // stops when told
  // A copy is independent of the original.
  PgTable copy = table;
  table.Erase("pg-1");
  EXPECT_NE(copy.Find("pg-1"), nullptr);
  EXPECT_EQ(walk("", 99), (Ids{"pg-10", "pg-2"}));
}

TEST(LeastAskOfANodeTest, IsTheLeastOfEveryBundleItMayPlace) {
  auto bundle = [](scheduler::ResourceSet r) {
    scheduler::Bundle b;
    b.resources = std::move(r);
    return b;
  };
  scheduler::PlacementRequest r;
  r.bundles = {bundle({{"CPU", 2}, {"memory", 4}}), bundle({{"CPU", 5}})};
  EXPECT_EQ(LeastAskOfANode(r), (scheduler::ResourceSet{{"CPU", 2}}));
  // Fallback lists count too; a resource one bundle does not ask drops.
  r.fallbacks = {{bundle({{"CPU", 1}, {"GPU", 1}})}};
  EXPECT_EQ(LeastAskOfANode(r), (scheduler::ResourceSet{{"CPU", 1}}));
  r.fallbacks = {{bundle({{"GPU", 1}})}};
  EXPECT_EQ(LeastAskOfANode(r), scheduler::ResourceSet{});
  // A slice requirement without bundles: its per-host bundle (v6e 4x4:
  // 4 chips a host).
  scheduler::PlacementRequest slice;
  slice.slice = scheduler::SliceRequirement{};
  slice.slice->generation = scheduler::TpuGeneration::kV6e;
  slice.slice->topology = "4x4";
  slice.slice->num_slices = 2;
  slice.slice->tpu_resource_per_chip = 1;
  const std::vector<scheduler::Bundle> hosts = ExpandSliceBundles(slice);
  ASSERT_EQ(hosts.size(), 8u);
  EXPECT_EQ(LeastAskOfANode(slice), hosts[0].resources);
  EXPECT_EQ(hosts[0].resources,
            (scheduler::ResourceSet{{std::string(scheduler::kResourceTpu),
                                     4 * scheduler::kResourceScale}}));
}

TEST_F(ClusterQueueTest, IndexesMatchAWalkOfEveryGroup) {
  Cluster cluster(nullptr);
  storage::Mutation repair;
  ASSERT_TRUE(cluster.Restore(storage::StoredState{}, repair).ok());
  absl::Time now = absl::FromUnixSeconds(1700000000);
  for (int round = 0; round < 300; ++round) {
    now += absl::Seconds(rng_() % 10);
    cluster.BeginGroup(now);
    storage::Mutation writes;
    const int ops = 1 + static_cast<int>(rng_() % 6);
    for (int op = 0; op < ops; ++op) {
      const bool fail = rng_() % 6 == 0;  // a failed op changes nothing
      absl::Status status = cluster.RunOp(
          [&](Txn& txn) {
            CheckQueries(txn);  // the group's changes so far
            const int changes = 1 + static_cast<int>(rng_() % 4);
            for (int c = 0; c < changes; ++c) {
              RandomChange(txn);
              CheckQueries(txn);  // and the op's own
            }
            return fail ? absl::InternalError("op fails") : absl::OkStatus();
          },
          writes, {});
      ASSERT_EQ(status.ok(), !fail);
    }
    cluster.EndGroup(writes, {});
    if (rng_() % 4 == 0) {
      cluster.Abandon();  // as after a failed commit
    } else {
      cluster.Install();
    }
    CheckCommitted(cluster, now);
    if (HasFailure()) FAIL() << "round " << round;
  }

  // A restart builds the same indexes from the stored groups.
  storage::StoredState stored;
  ClusterState before = cluster.Read([](const ClusterState& s) { return s; });
  before.pgs.ForEach([&](const PlacementGroup& pg) {
    stored.placement_groups.push_back(pg);
    return true;
  });
  ASSERT_GT(before.waiting.size(), 3u);  // the test covers something
  Cluster restarted(nullptr);
  ASSERT_TRUE(restarted.Restore(std::move(stored), repair).ok());
  restarted.Read([&](const ClusterState& after) {
    EXPECT_EQ(after.queue, before.queue);
    EXPECT_EQ(after.waiting, before.waiting);
    EXPECT_EQ(after.waiting_since, before.waiting_since);
    EXPECT_EQ(after.created_by_priority, before.created_by_priority);
    EXPECT_EQ(after.waiting_asks, before.waiting_asks);
    EXPECT_EQ(after.preemptors_by_deadline, before.preemptors_by_deadline);
    EXPECT_EQ(after.may_preempt_by_priority, before.may_preempt_by_priority);
    EXPECT_EQ(after.created_by_placed_time, before.created_by_placed_time);
    EXPECT_EQ(after.pgs_by_job, before.pgs_by_job);
    EXPECT_EQ(after.pgs_by_state, before.pgs_by_state);
    CheckPreemptionIndexes(after);
    return 0;
  });
}

}  // namespace
}  // namespace sliced::server
