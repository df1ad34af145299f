#include "server/coordinator.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/placement.h"
#include "sliced/v1/sliced.pb.h"
#include "storage/fault_injecting_store.h"
#include "storage/records.h"

namespace sliced::server {
namespace {

NodeEntry Entry(const std::string& id) {
  NodeEntry e;
  e.node.node_id = id;
  e.node.address = id;
  return e;
}

absl::Status RunOp(Coordinator& c, std::function<absl::Status(Txn&)> apply) {
  absl::Notification done;
  absl::Status result;
  c.Submit(WriteOp{std::move(apply), [&](const absl::Status& s) {
                     result = s;
                     done.Notify();
                   }});
  done.WaitForNotification();
  return result;
}

Coordinator::Options NoLeases() {
  Coordinator::Options o;
  o.heartbeat_timeout = absl::ZeroDuration();
  return o;
}

// An op that stores node `id`.
std::function<absl::Status(Txn&)> Put(const std::string& id) {
  return [id](Txn& t) {
    t.PutNode(Entry(id));
    return absl::OkStatus();
  };
}

size_t NodeCount(const Coordinator& c) {
  return c.Read([](const ClusterState& s) { return s.nodes.size(); });
}

// A coordinator without leases on `memory` behind a fault-injecting store.
absl::StatusOr<std::unique_ptr<Coordinator>> StartFaulty(
    storage::MemoryStore& memory, storage::FaultInjectingStore** faults) {
  auto store = std::make_unique<storage::FaultInjectingStore>(&memory);
  *faults = store.get();
  return Coordinator::Start(std::move(store), NoLeases());
}

TEST(CoordinatorTest, CommittedWritesAreVisibleAndDurable) {
  storage::MemoryStore memory;
  auto c = Coordinator::Start(
      std::make_unique<storage::FaultInjectingStore>(&memory), NoLeases());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(RunOp(**c, Put("a")).ok());
  EXPECT_EQ(
      (*c)->Read([](const ClusterState& s) { return s.nodes.count("a"); }), 1u);
  EXPECT_EQ(memory.Load()->nodes.size(), 1u);
}

TEST(CoordinatorTest, FailedOpChangesNothingAndOthersInGroupProceed) {
  storage::MemoryStore memory;
  auto c = Coordinator::Start(
      std::make_unique<storage::FaultInjectingStore>(&memory), NoLeases());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(RunOp(**c,
                  [](Txn& t) {
                    t.PutNode(Entry("half"));
                    return absl::InvalidArgumentError("nope");
                  })
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(memory.Load()->nodes.empty());
  EXPECT_EQ(NodeCount(**c), 0u);
}

TEST(CoordinatorTest, CommitFailureAnswersUnavailableAndLeavesMemoryUnchanged) {
  storage::MemoryStore memory;
  storage::FaultInjectingStore* faults = nullptr;
  auto c = StartFaulty(memory, &faults);
  ASSERT_TRUE(c.ok()) << c.status();
  faults->FailWrites(1);
  EXPECT_EQ(RunOp(**c, Put("a")).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NodeCount(**c), 0u);
  // Recovers once writes succeed again.
  EXPECT_TRUE(RunOp(**c, Put("a")).ok());
  EXPECT_EQ(NodeCount(**c), 1u);
}

TEST(CoordinatorTest, SyncFailureLeavesMemoryMatchingTheStore) {
  storage::MemoryStore memory;
  storage::FaultInjectingStore* faults = nullptr;
  auto c = StartFaulty(memory, &faults);
  ASSERT_TRUE(c.ok()) << c.status();
  faults->FailSyncs(1);
  EXPECT_EQ(RunOp(**c, Put("a")).code(), absl::StatusCode::kUnavailable);
  // The write reached the store although it was reported failed; memory was
  // re-read, so the next op sees "a" exactly as a restart would.
  EXPECT_EQ(
      (*c)->Read([](const ClusterState& s) { return s.nodes.count("a"); }), 1u);
  EXPECT_EQ(RunOp(**c,
                  [](Txn& t) {
                    return t.FindNode("a") ? absl::OkStatus()
                                           : absl::NotFoundError("a missing");
                  })
                .code(),
            absl::StatusCode::kOk);
}

TEST(CoordinatorTest,
     UnreadableStoreAfterFailedCommitRefusesWritesUntilReadable) {
  storage::MemoryStore memory;
  storage::FaultInjectingStore* faults = nullptr;
  auto c = StartFaulty(memory, &faults);
  ASSERT_TRUE(c.ok()) << c.status();
  faults->FailSyncs(1);
  faults->FailLoads(2);  // the re-read after the failure, and the next try
  EXPECT_EQ(RunOp(**c, Put("a")).code(), absl::StatusCode::kUnavailable);
  absl::Status refused = RunOp(**c, Put("b"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("can't be re-read"), std::string::npos)
      << refused;
  EXPECT_TRUE(RunOp(**c, Put("c")).ok());
  EXPECT_EQ(NodeCount(**c),
            2u);  // a, c
  EXPECT_EQ(memory.Load()->nodes.size(), 2u);
}

TEST(CoordinatorTest, SlowCommitsGroupWaitingOps) {
  storage::MemoryStore memory;
  auto store = std::make_unique<storage::FaultInjectingStore>(&memory);
  store->SetCommitDelay(absl::Milliseconds(20));
  storage::FaultInjectingStore* faults = store.get();
  auto c = Coordinator::Start(std::move(store), NoLeases());
  ASSERT_TRUE(c.ok());
  constexpr int kOps = 40;
  std::atomic<int> finished{0};
  absl::Notification all_done;
  for (int i = 0; i < kOps; ++i) {
    (*c)->Submit(WriteOp{[i](Txn& t) {
                           t.PutNode(Entry("n" + std::to_string(i)));
                           return absl::OkStatus();
                         },
                         [&](const absl::Status& s) {
                           EXPECT_TRUE(s.ok());
                           if (++finished == kOps) all_done.Notify();
                         }});
  }
  all_done.WaitForNotification();
  // While one commit sleeps, the others queue and go in the next batch.
  EXPECT_LT(faults->commits(), kOps / 2);
  EXPECT_EQ(memory.Load()->nodes.size(), static_cast<size_t>(kOps));
}

TEST(CoordinatorTest, QueuedOpsShareOneCommitAndSeeEarlierOps) {
  storage::MemoryStore memory;
  storage::FaultInjectingStore* counting = nullptr;
  auto c = StartFaulty(memory, &counting);
  ASSERT_TRUE(c.ok()) << c.status();
  // Block the writer so that the next ops queue up behind this one.
  absl::Notification release, blocked;
  (*c)->Submit(WriteOp{[&](Txn&) {
                         blocked.Notify();
                         release.WaitForNotification();
                         return absl::OkStatus();
                       },
                       [](const absl::Status&) {}});
  blocked.WaitForNotification();
  const int64_t before = counting->commits();
  std::atomic<int> ok{0};
  std::atomic<int> conflicts{0};
  absl::Notification all_done;
  constexpr int kOps = 10;
  std::atomic<int> finished{0};
  for (int i = 0; i < kOps; ++i) {
    (*c)->Submit(WriteOp{[](Txn& t) {
                           // Only the first op of the group may create "x".
                           if (t.FindNode("x") != nullptr) {
                             return absl::AlreadyExistsError("x exists");
                           }
                           t.PutNode(Entry("x"));
                           return absl::OkStatus();
                         },
                         [&](const absl::Status& s) {
                           (s.ok() ? ok : conflicts)++;
                           if (++finished == kOps) all_done.Notify();
                         }});
  }
  release.Notify();
  all_done.WaitForNotification();
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(conflicts, kOps - 1);
  // The blocking op's group, then one group for all ten.
  EXPECT_EQ(counting->commits() - before, 2);
}

TEST(CoordinatorTest, ExpiredLeaseMarksNodeDeadDurably) {
  storage::MemoryStore memory;
  std::atomic<int64_t> now_ms{1000000};
  Coordinator::Options o;
  o.heartbeat_timeout = absl::Seconds(10);
  o.lease_check_interval = absl::Milliseconds(5);
  o.clock = [&] { return absl::FromUnixMillis(now_ms.load()); };
  auto c = Coordinator::Start(
      std::make_unique<storage::FaultInjectingStore>(&memory), o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(RunOp(**c, [](Txn& t) {
                NodeEntry e = Entry("a");
                e.last_heartbeat = t.now();
                t.PutNode(e);
                return absl::OkStatus();
              }).ok());
  now_ms += 11000;  // past the lease
  for (int i = 0; i < 2000; ++i) {
    if ((*c)->Read([](const ClusterState& s) {
          return s.nodes.at("a").node.state == scheduler::NodeState::kDead;
        })) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto stored = memory.Load();
  ASSERT_EQ(stored->nodes.size(), 1u);
  EXPECT_EQ(stored->nodes[0].state(), storage::NODE_DEAD);
}

}  // namespace
}  // namespace sliced::server

namespace sliced::server {
namespace {

storage::PlacementGroupRecord HeldPg(const std::string& id,
                                     const std::string& node, int64_t cpu) {
  storage::PlacementGroupRecord r;
  r.set_placement_group_id(id);
  r.set_state(v1::CREATED);
  r.set_sequence(1);
  storage::BundleRecord* b = r.add_bundles();
  (*b->mutable_resources())["CPU"] = cpu;
  b->set_node_id(node);
  return r;
}

TEST(CoordinatorRecoveryTest, RefusesStoredPlacementsThatHoldCapacityTwice) {
  storage::MemoryStore memory;
  storage::Mutation m;
  scheduler::Node node;
  node.node_id = "n1";
  node.address = "n1";
  node.resources = {{"CPU", 40000}};
  m.PutNode(storage::ToRecord(node));
  m.PutPlacementGroup(HeldPg("pg-a", "n1", 30000));
  m.PutPlacementGroup(HeldPg("pg-b", "n1", 30000));
  ASSERT_TRUE(memory.Commit(m).ok());
  Coordinator::Options o = NoLeases();
  o.parse_pg = RequestFromRecord;
  auto c = Coordinator::Start(
      std::make_unique<storage::FaultInjectingStore>(&memory), o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("n1"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("refusing to serve"), std::string::npos);
}

TEST(CoordinatorRecoveryTest, RefusesPlacementsOnUnknownNodes) {
  storage::MemoryStore memory;
  storage::Mutation m;
  m.PutPlacementGroup(HeldPg("pg-a", "ghost", 10000));
  ASSERT_TRUE(memory.Commit(m).ok());
  Coordinator::Options o = NoLeases();
  o.parse_pg = RequestFromRecord;
  auto c = Coordinator::Start(
      std::make_unique<storage::FaultInjectingStore>(&memory), o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("ghost"), std::string::npos)
      << c.status();
}

TEST(CoordinatorRecoveryTest, ReloadsPlacementsAndQueue) {
  storage::MemoryStore memory;
  storage::Mutation m;
  scheduler::Node node;
  node.node_id = "n1";
  node.address = "n1";
  node.resources = {{"CPU", 40000}};
  m.PutNode(storage::ToRecord(node));
  m.PutPlacementGroup(HeldPg("pg-a", "n1", 30000));
  storage::PlacementGroupRecord waiting = HeldPg("pg-b", "", 30000);
  waiting.set_state(v1::PENDING);
  waiting.set_sequence(2);
  m.PutPlacementGroup(waiting);
  ASSERT_TRUE(memory.Commit(m).ok());
  Coordinator::Options o = NoLeases();
  o.parse_pg = RequestFromRecord;
  auto c = Coordinator::Start(
      std::make_unique<storage::FaultInjectingStore>(&memory), o);
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->Read([](const ClusterState& s) {
    EXPECT_EQ(*s.snapshot->FreeResources("n1"),
              (scheduler::ResourceSet{{"CPU", 10000}}));
    EXPECT_EQ(s.queue.size(), 1u);
    EXPECT_EQ(s.next_sequence, 3u);
    return 0;
  });
}

}  // namespace
}  // namespace sliced::server
