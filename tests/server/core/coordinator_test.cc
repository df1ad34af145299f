// The commit engine through the cluster it writes: group commit, all-or-
// nothing ops, persist-then-install, resync after failed commits, recovery.
#include "server/core/coordinator.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "storage/fault_injecting_store.h"
#include "tests/server/core/harness.h"

namespace sliced::server {
namespace {

using testing::Core;

scheduler::Node Entry(const std::string& id) {
  scheduler::Node e;
  e.node_id = id;
  e.address = id;
  return e;
}

// An op that stores node `id`.
std::function<absl::Status(Txn&)> Put(const std::string& id) {
  return [id](Txn& t) {
    t.PutNode(Entry(id));
    return absl::OkStatus();
  };
}

size_t NodeCount(Core& c) {
  return c.cluster().Read(
      [](const ClusterState& s) { return s.snapshot->num_nodes(); });
}

std::unique_ptr<Core> StartCore(storage::MemoryStore& memory) {
  auto core = Core::Start(memory);
  EXPECT_TRUE(core.ok()) << core.status();
  return core.ok() ? *std::move(core) : nullptr;
}

TEST(CoordinatorTest, CommittedWritesAreVisibleAndDurable) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Op(Put("a")).ok());
  EXPECT_EQ(c->cluster().Read([](const ClusterState& s) {
    return s.snapshot->FindNode("a") != nullptr;
  }),
            true);
  EXPECT_EQ(memory.Load()->nodes.size(), 1u);
}

TEST(CoordinatorTest, FailedOpChangesNothingAndOthersInGroupProceed) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Op([](Txn& t) {
               t.PutNode(Entry("half"));
               return absl::InvalidArgumentError("nope");
             }).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(memory.Load()->nodes.empty());
  EXPECT_EQ(NodeCount(*c), 0u);
}

TEST(CoordinatorTest, CommitFailureAnswersUnavailableAndLeavesMemoryUnchanged) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  storage::FaultInjectingStore* faults = &c->faults();
  faults->FailWrites(1);
  EXPECT_EQ(c->Op(Put("a")).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NodeCount(*c), 0u);
  // Recovers once writes succeed again.
  EXPECT_TRUE(c->Op(Put("a")).ok());
  EXPECT_EQ(NodeCount(*c), 1u);
}

TEST(CoordinatorTest, SyncFailureLeavesMemoryMatchingTheStore) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  storage::FaultInjectingStore* faults = &c->faults();
  faults->FailSyncs(1);
  EXPECT_EQ(c->Op(Put("a")).code(), absl::StatusCode::kUnavailable);
  // The write reached the store although it was reported failed; memory was
  // re-read, so the next op sees "a" exactly as a restart would.
  EXPECT_EQ(c->cluster().Read([](const ClusterState& s) {
    return s.snapshot->FindNode("a") != nullptr;
  }),
            true);
  EXPECT_EQ(c->Op([](Txn& t) {
               return t.FindNode("a") ? absl::OkStatus()
                                      : absl::NotFoundError("a missing");
             }).code(),
            absl::StatusCode::kOk);
}

TEST(CoordinatorTest,
     UnreadableStoreAfterFailedCommitRefusesWritesUntilReadable) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  storage::FaultInjectingStore* faults = &c->faults();
  faults->FailSyncs(1);
  faults->FailLoads(2);  // the re-read after the failure, and the next try
  EXPECT_EQ(c->Op(Put("a")).code(), absl::StatusCode::kUnavailable);
  absl::Status refused = c->Op(Put("b"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("can't be re-read"), std::string::npos)
      << refused;
  EXPECT_TRUE(c->Op(Put("c")).ok());
  EXPECT_EQ(NodeCount(*c),
            2u);  // a, c
  EXPECT_EQ(memory.Load()->nodes.size(), 2u);
}

TEST(CoordinatorTest, RefusedOpsAreAnsweredWithoutRunning) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  // One op in a slow commit that then fails; two queued behind it.
  c->faults().SetCommitDelay(absl::Milliseconds(200));
  c->faults().FailSyncs(1);
  std::vector<absl::Status> answers(3);
  absl::Notification committing;
  absl::BlockingCounter answered(3);
  auto submit = [&](int i) {
    c->coordinator().Submit(WriteOp{[&, i](Txn& t) {
                                      if (i == 0) committing.Notify();
                                      return Put("n" + std::to_string(i))(t);
                                    },
                                    [&, i](const absl::Status& s) {
                                      answers[i] = s;
                                      answered.DecrementCount();
                                    }});
  };
  submit(0);
  committing.WaitForNotification();
  submit(1);
  submit(2);
  const absl::Status refusal = absl::UnavailableError("not the leader");
  c->coordinator().Refuse(refusal);
  EXPECT_EQ(c->Op(Put("late")), refusal);
  answered.Wait();
  EXPECT_EQ(answers[0].code(), absl::StatusCode::kUnavailable);  // the commit's
  EXPECT_NE(answers[0], refusal);
  EXPECT_EQ(answers[1], refusal);
  EXPECT_EQ(answers[2], refusal);
  // At most the failed commit's op reached the store (a failed sync).
  EXPECT_LE(memory.Load()->nodes.size(), 1u);
}

TEST(CoordinatorTest, SlowCommitsGroupWaitingOps) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  c->faults().SetCommitDelay(absl::Milliseconds(20));
  constexpr int kOps = 40;
  std::atomic<int> finished{0};
  absl::Notification all_done;
  const int64_t before = c->faults().commits();
  for (int i = 0; i < kOps; ++i) {
    c->coordinator().Submit(WriteOp{[i](Txn& t) {
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
  EXPECT_LT(c->faults().commits() - before, kOps / 2);
  EXPECT_EQ(memory.Load()->nodes.size(), static_cast<size_t>(kOps));
}

TEST(CoordinatorTest, QueuedOpsShareOneCommitAndSeeEarlierOps) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  // Block the writer so that the next ops queue up behind this one.
  absl::Notification release, blocked;
  c->coordinator().Submit(WriteOp{[&](Txn& t) {
                                    blocked.Notify();
                                    release.WaitForNotification();
                                    t.PutNode(Entry("blocker"));  // a write
                                    return absl::OkStatus();
                                  },
                                  [](const absl::Status&) {}});
  blocked.WaitForNotification();
  const int64_t before = c->faults().commits();
  std::atomic<int> ok{0};
  std::atomic<int> conflicts{0};
  absl::Notification all_done;
  constexpr int kOps = 10;
  std::atomic<int> finished{0};
  for (int i = 0; i < kOps; ++i) {
    c->coordinator().Submit(WriteOp{[](Txn& t) {
                                      // Only the first op of the group may
                                      // create "x".
                                      if (t.FindNode("x") != nullptr) {
                                        return absl::AlreadyExistsError(
                                            "x exists");
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
  EXPECT_EQ(c->faults().commits() - before, 2);
}

// Runs `ops` in one commit group (the writer held until all are queued);
// their answers, in order.
std::vector<absl::Status> InOneGroup(
    Core& c, std::vector<std::function<absl::Status(Txn&)>> ops) {
  std::vector<absl::Status> answers(ops.size());
  absl::BlockingCounter answered(static_cast<int>(ops.size()));
  c.InOneGroup([&] {
    for (size_t i = 0; i < ops.size(); ++i) {
      c.coordinator().Submit(WriteOp{ops[i], [&, i](const absl::Status& s) {
                                       answers[i] = s;
                                       answered.DecrementCount();
                                     }});
    }
  });
  answered.Wait();
  return answers;
}

// An op whose writes the store could never commit (etcd: above one Txn's
// limits) fails alone, before the commit: the others of its group commit,
// and nothing is re-read. (Before, the whole group failed with its error
// and the store was re-read.)
TEST(CoordinatorTest, AnOpTooLargeForTheStoreFailsAlone) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  c->faults().LimitUnitWrites(2);
  const int64_t loads_before = c->faults().loads();
  std::vector<absl::Status> answers =
      InOneGroup(*c, {Put("a"),
                      [](Txn& t) {
                        for (const char* id : {"x", "y", "z"})
                          t.PutNode(Entry(id));
                        return absl::OkStatus();
                      },
                      Put("b")});
  EXPECT_TRUE(answers[0].ok()) << answers[0];
  EXPECT_EQ(answers[1].code(), absl::StatusCode::kFailedPrecondition)
      << answers[1];
  EXPECT_NE(answers[1].message().find("writes 3 keys"), std::string::npos)
      << answers[1];
  EXPECT_TRUE(answers[2].ok()) << answers[2];
  EXPECT_EQ(memory.Load()->nodes.size(), 2u);  // a, b
  EXPECT_EQ(NodeCount(*c), 2u);
  EXPECT_EQ(c->faults().loads(), loads_before);
}

// On a store other daemons write (etcd under an election), a failed op's
// answer comes from this daemon's state, current only while it leads: it is
// given once the group's commit passed the fence (or Confirm(), when the
// group wrote nothing), and Unavailable once another daemon leads.
TEST(CoordinatorTest, OnASharedStoreAFailedOpIsAnsweredOnlyWhileLeading) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  auto not_found = [](Txn& t) {
    return t.FindNode("ghost") == nullptr ? absl::NotFoundError("no ghost")
                                          : absl::OkStatus();
  };
  c->faults().SetShared();
  EXPECT_EQ(c->Op(not_found), absl::NotFoundError("no ghost"));
  EXPECT_EQ(InOneGroup(*c, {Put("a"), not_found}),
            (std::vector<absl::Status>{absl::OkStatus(),
                                       absl::NotFoundError("no ghost")}));

  // A Confirm() that fails while the fence holds (etcd out of reach for a
  // moment) makes that answer Unavailable, and nothing more: the group wrote
  // nothing, so the store is not re-read (here it could not be).
  c->faults().FailConfirms(1);
  c->faults().FailLoads(100);
  const absl::Status unconfirmed = c->Op(not_found);
  EXPECT_EQ(unconfirmed.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(storage::IsDeposed(unconfirmed));
  EXPECT_TRUE(c->Op(Put("b")).ok());
  c->faults().FailLoads(0);

  c->faults().Depose();  // another daemon leads now
  // Every answer is the store's DeposedError, which the API answers as a
  // refusal that did nothing: the failed confirm above is not one.
  EXPECT_TRUE(storage::IsDeposed(c->Op(not_found)));
  for (const absl::Status& s : InOneGroup(*c, {Put("c"), not_found})) {
    EXPECT_TRUE(storage::IsDeposed(s)) << s;
  }
  // The failed commit left the store to re-read, which a deposed store
  // refuses: what the writer answers then still says so.
  const absl::Status unread = c->Op(Put("d"));
  EXPECT_TRUE(storage::IsDeposed(unread)) << unread;
  EXPECT_NE(unread.message().find("can't be re-read"), std::string::npos)
      << unread;
}

// A failed op is answered once its group's commit is settled, on a store
// only this daemon writes too: its failure may rest on an earlier op of the
// group (here "a exists"), which a failed commit undoes. (It was answered
// at once, and kept its answer whatever became of the commit.)
TEST(CoordinatorTest, AFailedOpIsAnsweredWithItsGroupsCommit) {
  storage::MemoryStore memory;
  auto c = StartCore(memory);
  ASSERT_NE(c, nullptr);
  auto create_a = [](Txn& t) {
    if (t.FindNode("a") != nullptr) return absl::AlreadyExistsError("a exists");
    t.PutNode(Entry("a"));
    return absl::OkStatus();
  };
  c->faults().FailWrites(1);
  std::vector<absl::Status> answers = InOneGroup(*c, {create_a, create_a});
  EXPECT_EQ(answers[0].code(), absl::StatusCode::kUnavailable) << answers[0];
  EXPECT_EQ(answers[1].code(), absl::StatusCode::kUnavailable) << answers[1];
  EXPECT_EQ(NodeCount(*c), 0u);
  // With the commit through, the failure stands.
  answers = InOneGroup(*c, {create_a, create_a});
  EXPECT_TRUE(answers[0].ok()) << answers[0];
  EXPECT_EQ(answers[1], absl::AlreadyExistsError("a exists"));
}

TEST(CoordinatorTest, OpsSubmittedBeforeRunWaitForTheWriter) {
  storage::MemoryStore memory;
  Cluster cluster(nullptr);
  auto coordinator = Coordinator::Open(
      std::make_unique<storage::FaultInjectingStore>(&memory), &cluster, {});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::Notification committed;
  (*coordinator)->Submit(WriteOp{Put("early"), [&](const absl::Status& s) {
                                   EXPECT_TRUE(s.ok()) << s;
                                   committed.Notify();
                                 }});
  EXPECT_FALSE(committed.HasBeenNotified());
  (*coordinator)->Run();
  committed.WaitForNotification();
  EXPECT_EQ(memory.Load()->nodes.size(), 1u);
}

}  // namespace
}  // namespace sliced::server

namespace sliced::server {
namespace {

PlacementGroup HeldPg(const std::string& id, const std::string& node,
                      int64_t cpu, uint64_t sequence = 1) {
  PlacementGroup g;
  g.id = id;
  g.state = PgState::kCreated;
  g.sequence = sequence;
  g.request.bundles.push_back(scheduler::Bundle{{{"CPU", cpu}}, {}, ""});
  g.bundles.push_back(PlacedBundle{{{"CPU", cpu}}, {}, node});
  return g;
}

scheduler::Node Node(const std::string& id, int64_t cpu) {
  scheduler::Node node;
  node.node_id = id;
  node.address = id;
  node.resources = {{"CPU", cpu}};
  return node;
}

TEST(CoordinatorRecoveryTest, RefusesStoredPlacementsThatHoldCapacityTwice) {
  storage::MemoryStore memory;
  storage::Mutation m;
  m.PutNode(Node("n1", 40000));
  m.PutPlacementGroup(HeldPg("pg-a", "n1", 30000));
  m.PutPlacementGroup(HeldPg("pg-b", "n1", 30000));
  ASSERT_TRUE(memory.Commit(m).ok());
  auto c = Core::Start(memory);
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
  auto c = Core::Start(memory);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("ghost"), std::string::npos)
      << c.status();
}

TEST(CoordinatorRecoveryTest, ReloadsPlacementsAndQueue) {
  storage::MemoryStore memory;
  storage::Mutation m;
  m.PutNode(Node("n1", 40000));
  m.PutPlacementGroup(HeldPg("pg-a", "n1", 30000));
  PlacementGroup waiting = HeldPg("pg-b", "", 30000, 2);
  waiting.state = PgState::kPending;
  m.PutPlacementGroup(waiting);
  ASSERT_TRUE(memory.Commit(m).ok());
  auto c = Core::Start(memory);
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->cluster().Read([](const ClusterState& s) {
    EXPECT_EQ(*s.snapshot->FreeResources("n1"),
              (scheduler::ResourceSet{{"CPU", 10000}}));
    EXPECT_EQ(s.queue.size(), 1u);
    EXPECT_EQ(s.next_sequence, 3u);
    return 0;
  });
}

}  // namespace
}  // namespace sliced::server
