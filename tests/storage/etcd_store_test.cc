// The etcd store beyond the conformance suite (tests/storage/store_test.cc):
// fencing, etcd's Txn limits, the schema key, log lines kept out of etcd, and
// the election that hands out the fence. Against a real etcd member on
// loopback (skipped only where /usr/bin/etcd is missing).
#include "storage/etcd/etcd_store.h"

#include <signal.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "storage/etcd/etcd_election.h"
#include "tests/storage/cuttable_proxy.h"
#include "tests/storage/etcd_fixture.h"
#include "tests/storage/etcd_test_cluster.h"

namespace sliced::storage {
namespace {

scheduler::Node Node(const std::string& id) {
  scheduler::Node n;
  n.node_id = id;
  n.address = id + ".local";
  n.resources = {{"CPU", 10000}};
  return n;
}

class EtcdStoreTest : public EtcdFixture {
 protected:
  // A store fenced on `leader`, a key put now; *fenced_why gets the reason
  // it was fenced, once it is.
  std::unique_ptr<Store> OpenFenced(const std::string& leader,
                                    std::string* fenced_why) {
    const int64_t revision = Put(leader);
    return Open({.fence_key = leader,
                 .fence_revision = revision,
                 .on_fenced = [fenced_why](absl::string_view why) {
                   *fenced_why = std::string(why);
                 }});
  }
};

TEST_F(EtcdStoreTest, AFencedCommitFailsOnceTheLeaderKeyIsGone) {
  const std::string leader = prefix_ + "leader/1";
  std::string fenced_why;
  auto store = OpenFenced(leader, &fenced_why);
  Mutation first;
  first.PutNode(Node("a"));
  ASSERT_TRUE(store->Commit(first).ok());

  Delete(leader);
  Put(leader);  // a new leader key of the same name: another revision
  Mutation second;
  second.PutNode(Node("b"));
  absl::Status s = store->Commit(second);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("lost leadership"), std::string::npos) << s;
  EXPECT_TRUE(IsDeposed(s)) << s;  // the API's "nothing was done"
  EXPECT_FALSE(fenced_why.empty());
  // Nothing of it landed, and the store never writes again.
  auto state = Open()->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->nodes.size(), 1u);
  EXPECT_EQ(state->nodes[0].node_id, "a");
  EXPECT_TRUE(IsDeposed(store->Commit(first)));
  // Nor reads it again (a resync of a deposed leader would only delay its
  // answers).
  EXPECT_TRUE(IsDeposed(store->Load().status()));
}

// An attempt that went unanswered may have landed. When the retry then
// fails its fence, the commit says so: not "nothing was written" (a
// DeposedError, which the API answers as a refusal after which nothing was
// done, so a client would take a remove that landed for one that did not).
TEST_F(EtcdStoreTest, AFenceFailureAfterAnUnansweredAttemptMayHaveLanded) {
  const std::string& endpoints = cluster_->endpoints();
  CuttableProxy proxy(std::stoi(endpoints.substr(endpoints.rfind(':') + 1)));
  auto client = EtcdClient::Create(
      {.endpoints = proxy.endpoint(), .call_timeout = absl::Milliseconds(300)});
  ASSERT_TRUE(client.ok());
  const std::string leader = prefix_ + "leader/1";
  EtcdStoreOptions options;
  options.prefix = prefix_;
  options.fence_key = leader;
  options.fence_revision = Put(leader);
  options.retry_for = absl::Seconds(20);
  auto store = OpenEtcdStore(*client, options);
  ASSERT_TRUE(store.ok()) << store.status();
  proxy.Cut();
  absl::SleepFor(absl::Milliseconds(100));  // the proxy's pump has cut
  absl::Status committed;
  std::thread commit([&] {
    Mutation m;
    m.PutNode(Node("a"));
    committed = (*store)->Commit(m);
  });
  absl::SleepFor(absl::Milliseconds(700));  // attempts go unanswered
  Delete(leader);
  proxy.Restore();
  commit.join();
  EXPECT_EQ(committed.code(), absl::StatusCode::kUnavailable) << committed;
  EXPECT_FALSE(IsDeposed(committed)) << committed;
  EXPECT_NE(committed.message().find("lost leadership"), std::string::npos)
      << committed;
  EXPECT_NE(committed.message().find("may or may not have been applied"),
            std::string::npos)
      << committed;
}

// Confirm(): whether this store may still answer from what it read, with
// no write: OK while its leader key stands; Unavailable, fenced for good,
// once it is gone. An unfenced store is not shared.
TEST_F(EtcdStoreTest, ConfirmChecksTheFenceWithoutWriting) {
  const std::string leader = prefix_ + "leader/1";
  std::string fenced_why;
  auto store = OpenFenced(leader, &fenced_why);
  EXPECT_TRUE(store->shared());
  EXPECT_FALSE(Open()->shared());
  EXPECT_TRUE(store->Confirm().ok());
  EXPECT_TRUE(fenced_why.empty());

  Delete(leader);
  absl::Status s = store->Confirm();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("lost leadership"), std::string::npos) << s;
  EXPECT_FALSE(fenced_why.empty());
  EXPECT_TRUE(IsDeposed(s)) << s;
  Put(leader);  // a new key of the same name does not bring it back
  EXPECT_TRUE(IsDeposed(store->Confirm()));
  Mutation m;
  m.PutNode(Node("a"));
  EXPECT_EQ(store->Commit(m).code(), absl::StatusCode::kUnavailable);
}

TEST_F(EtcdStoreTest, AMutationAboveTheTxnLimitIsSplitBetweenUnits) {
  auto store = Open({.max_txn_ops = 4});
  Mutation group;
  for (int unit = 0; unit < 5; ++unit) {
    Mutation op;
    for (int i = 0; i < 3; ++i) op.PutNode(Node(absl::StrCat(unit, "-", i)));
    op.PutNextPgSequence(unit + 1);
    group.Append(op);
  }
  ASSERT_TRUE(store->Commit(group).ok());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->nodes.size(), 15u);
  EXPECT_EQ(state->next_pg_sequence, 5u);
}

// When a later Txn of a split group fails (here for etcd's own request
// limit, below what sliced was told), the error says that the Txns before
// it were written, and they were: whole operations.
TEST_F(EtcdStoreTest, ASplitCommitThatFailsHalfWaySaysWhatWasWritten) {
  auto store = Open({.max_txn_ops = 4, .max_request_bytes = 64 << 20});
  Mutation small;
  for (int i = 0; i < 3; ++i) small.PutNode(Node(absl::StrCat("small-", i)));
  Mutation big;  // ~1.8 MB: above etcd's default 1.5 MiB
  for (int i = 0; i < 2; ++i) {
    scheduler::Node n = Node(absl::StrCat("big-", i));
    n.labels = {{"blob", std::string(900 << 10, 'x')}};
    big.PutNode(n);
  }
  Mutation group;
  group.Append(small);
  group.Append(big);
  absl::Status s = store->Commit(group);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_FALSE(IsDeposed(s)) << s;
  EXPECT_NE(s.message().find("of its 2 etcd Txns only the first 1 were "
                             "written"),
            std::string::npos)
      << s;
  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->nodes.size(), 3u);
}

TEST_F(EtcdStoreTest, OneUnitAboveTheLimitIsRefusedBeforeAnythingIsWritten) {
  auto store = Open({.max_txn_ops = 4});
  Mutation small;
  small.PutNode(Node("first"));
  Mutation big;
  for (int i = 0; i < 5; ++i) big.PutNode(Node(absl::StrCat("n", i)));
  Mutation group;
  group.Append(small);
  group.Append(big);
  absl::Status s = store->Commit(group);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--max-txn-ops"), std::string::npos) << s;
  EXPECT_TRUE(store->Load()->nodes.empty());
  // CheckUnit says the same of one op's writes before any commit (the
  // coordinator fails such an op alone); log lines do not go to etcd.
  EXPECT_EQ(store->CheckUnit(big).message(), s.message());
  EXPECT_TRUE(store->CheckUnit(small).ok());
  Mutation logged = small;
  for (int i = 0; i < 5; ++i) {
    logged.PutLog(absl::StrCat("a\x01", i),
                  server::LogLine{absl::FromUnixMillis(1),
                                  server::LogSeverity::kInfo, "hi", "a"});
  }
  EXPECT_TRUE(store->CheckUnit(logged).ok());
}

TEST_F(EtcdStoreTest, LogLinesStayInThisProcess) {
  auto store = Open();
  Mutation m;
  m.PutLog("a\x01", server::LogLine{absl::FromUnixMillis(1),
                                     server::LogSeverity::kInfo, "hi", "a"});
  m.PutNode(Node("a"));
  ASSERT_TRUE(store->Commit(m).ok());
  EXPECT_EQ(store->Load()->logs.size(), 1u);
  auto other = Open()->Load();  // another daemon: facts only
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->logs.empty());
  EXPECT_EQ(other->nodes.size(), 1u);
}

// A commit of log lines only sends etcd nothing to write, but its ops were
// answered from this daemon's state: the fence is checked all the same, and
// a deposed leader keeps none of the lines.
TEST_F(EtcdStoreTest, ACommitOfLogLinesOnlyStillChecksTheFence) {
  const std::string leader = prefix_ + "leader/1";
  std::string fenced_why;
  auto store = OpenFenced(leader, &fenced_why);
  auto log_only = [](const std::string& key) {
    Mutation m;
    m.PutLog(key, server::LogLine{absl::FromUnixMillis(1),
                                  server::LogSeverity::kInfo, "hi", "a"});
    return m;
  };
  ASSERT_TRUE(store->Commit(log_only("a\x01")).ok());
  EXPECT_TRUE(fenced_why.empty());
  Delete(leader);
  absl::Status s = store->Commit(log_only("a\x02"));
  EXPECT_TRUE(IsDeposed(s)) << s;
  EXPECT_FALSE(fenced_why.empty());
}

TEST_F(EtcdStoreTest, AnotherSchemaVersionIsRefused) {
  ASSERT_NE(Open(), nullptr);  // writes version kSchemaVersion
  etcdserverpb::TxnRequest txn;
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(prefix_ + "meta/schema_version");
  put->set_value("99");
  ASSERT_TRUE(client_->Txn(txn).ok());
  auto store = OpenEtcdStore(client_, {.prefix = prefix_});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version 99"),
            std::string::npos)
      << store.status();
}

TEST_F(EtcdStoreTest, AnAmbiguousCommitIsResentUntilEtcdConfirmsIt) {
  auto client = EtcdClient::Create({.endpoints = cluster_->endpoints(),
                                    .call_timeout = absl::Milliseconds(300)});
  ASSERT_TRUE(client.ok());
  auto store = OpenEtcdStore(*client, {.prefix = prefix_,
                                       .retry_for = absl::Seconds(10)});
  ASSERT_TRUE(store.ok()) << store.status();
  cluster_->Signal(0, SIGSTOP);  // the first attempts time out
  std::thread resume([&] {
    absl::SleepFor(absl::Seconds(1));
    cluster_->Signal(0, SIGCONT);
  });
  Mutation m;
  m.PutNode(Node("a"));
  const absl::Time start = absl::Now();
  absl::Status s = (*store)->Commit(m);
  resume.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));  // not acknowledged before
  EXPECT_EQ((*store)->Load()->nodes.size(), 1u);
}

TEST_F(EtcdStoreTest, AnUnconfirmedCommitIsUnavailableAfterRetryFor) {
  auto client = EtcdClient::Create({.endpoints = cluster_->endpoints(),
                                    .call_timeout = absl::Milliseconds(200)});
  ASSERT_TRUE(client.ok());
  auto store = OpenEtcdStore(*client, {.prefix = prefix_,
                                       .retry_for = absl::Seconds(1)});
  ASSERT_TRUE(store.ok()) << store.status();
  cluster_->Signal(0, SIGSTOP);
  Mutation m;
  m.PutNode(Node("a"));
  absl::Status s = (*store)->Commit(m);
  cluster_->Signal(0, SIGCONT);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("may or may not"), std::string::npos) << s;
}

// A commit whose outcome etcd never confirmed may still sit in a member's
// queue when the leader re-reads etcd (Load). Sent again after that read, a
// copy of it must not land: it would change what the daemon just read.
TEST_F(EtcdStoreTest, ACommitCopyArrivingAfterTheReReadIsRefused) {
  const std::string leader = prefix_ + "leader/1";
  std::string fenced_why;
  auto store = OpenFenced(leader, &fenced_why);
  ASSERT_TRUE(store->Load().ok());
  // What the store sends for a commit now: its fence and write token
  // compared (read back from etcd), then its puts.
  etcdserverpb::RangeRequest get;
  get.set_key(prefix_ + "meta/writer");
  auto token = client_->Range(get);
  ASSERT_TRUE(token.ok()) << token.status();
  ASSERT_EQ(token->kvs_size(), 1);
  etcdserverpb::RangeRequest fence;
  fence.set_key(leader);
  auto leader_kv = client_->Range(fence);
  ASSERT_TRUE(leader_kv.ok() && leader_kv->kvs_size() == 1);
  auto copy_of_a_commit = [&](const std::string& key) {
    etcdserverpb::TxnRequest txn;
    auto* c = txn.add_compare();
    c->set_key(leader);
    c->set_target(etcdserverpb::Compare::CREATE);
    c->set_result(etcdserverpb::Compare::EQUAL);
    c->set_create_revision(leader_kv->kvs(0).create_revision());
    c = txn.add_compare();
    c->set_key(prefix_ + "meta/writer");
    c->set_target(etcdserverpb::Compare::VALUE);
    c->set_result(etcdserverpb::Compare::EQUAL);
    c->set_value(token->kvs(0).value());
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value("late");
    return txn;
  };
  // Before a re-read, such a copy lands (it is this leader's own write).
  auto before = client_->Txn(copy_of_a_commit(prefix_ + "probe/before"));
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->succeeded());
  // The re-read after a failed commit; then the late copy arrives.
  ASSERT_TRUE(store->Load().ok());
  auto after = client_->Txn(copy_of_a_commit(prefix_ + "probe/after"));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->succeeded());
  etcdserverpb::RangeRequest probe;
  probe.set_key(prefix_ + "probe/after");
  EXPECT_EQ(client_->Range(probe)->kvs_size(), 0);
  // The leader itself writes on, under its new token.
  Mutation m;
  m.PutNode(Node("a"));
  EXPECT_TRUE(store->Commit(m).ok());
  EXPECT_TRUE(store->Confirm().ok());
  EXPECT_TRUE(fenced_why.empty()) << fenced_why;
  EXPECT_EQ(store->Load()->nodes.size(), 1u);
}

TEST_F(EtcdStoreTest, TheLeaderCompactsOldRevisions) {
  auto store = Open({.keep_revisions = 5});
  for (int i = 0; i < 20; ++i) {
    Mutation m;
    m.PutNode(Node("a"));
    ASSERT_TRUE(store->Commit(m).ok());
  }
  etcdserverpb::RangeRequest old;
  old.set_key(prefix_ + "nodes/a");
  old.set_revision(1);
  auto read = client_->Range(old);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("compacted"), std::string::npos)
      << read.status();
}

TEST_F(EtcdStoreTest, TheStandbyWinsWhenTheLeaderResignsAndFencesItsStore) {
  EtcdElectionOptions options{.name = prefix_ + "leader", .value = "a:1",
                              .ttl = absl::Seconds(2)};
  auto first = std::make_unique<EtcdElection>(client_, options);
  auto led = first->Campaign();
  ASSERT_TRUE(led.ok()) << led.status();
  EXPECT_EQ(*first->LeaderValue(), "a:1");
  auto fenced = Open({.fence_key = led->key, .fence_revision = led->revision});
  Mutation m;
  m.PutNode(Node("a"));
  ASSERT_TRUE(fenced->Commit(m).ok());

  options.value = "b:2";
  EtcdElection second(client_, options);
  absl::StatusOr<Leadership> won;
  std::thread standby([&] { won = second.Campaign(); });
  first->Stop();
  EXPECT_EQ(first->AwaitLost(), "");  // stopped; the lease is revoked
  standby.join();
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_NE(won->revision, led->revision);
  EXPECT_EQ(*second.LeaderValue(), "b:2");
  EXPECT_EQ(fenced->Commit(m).code(), absl::StatusCode::kUnavailable);
}

TEST_F(EtcdStoreTest, ALeaseThatExpiresIsLostLeadership) {
  EtcdElection election(client_, {.name = prefix_ + "leader",
                                  .value = "a:1",
                                  .ttl = absl::Seconds(1)});
  auto led = election.Campaign();
  ASSERT_TRUE(led.ok()) << led.status();
  ASSERT_TRUE(client_->RevokeLease(led->lease).ok());  // as if it expired
  EXPECT_NE(election.AwaitLost().find("expired"), std::string::npos);
}

// An operator's `etcdctl del` of the leader key: the leader notices at its
// next renewal (TTL/3), not only at its next commit. Until then it would
// serve reads and take heartbeats beside the new leader.
TEST_F(EtcdStoreTest, ADeletedLeaderKeyIsLostLeadershipWithoutACommit) {
  EtcdElection election(client_, {.name = prefix_ + "leader",
                                  .value = "a:1",
                                  .ttl = absl::Seconds(3)});
  auto led = election.Campaign();
  ASSERT_TRUE(led.ok()) << led.status();
  Delete(led->key);
  std::string why = "(still leading after 5 s)";
  absl::Notification lost;
  std::thread waiter([&] {
    why = election.AwaitLost();
    lost.Notify();
  });
  if (!lost.WaitForNotificationWithTimeout(absl::Seconds(5))) {
    election.Stop();  // AwaitLost returns "" then
    lost.WaitForNotification();
    why = "(still leading after 5 s)";
  }
  waiter.join();
  EXPECT_NE(why.find("was deleted"), std::string::npos) << why;
}

// A standby whose lease is lost while it waits behind the leader (paused
// past its TTL, say, so that etcd let the lease go): etcd's campaign waits
// only for the keys before its own, so it would win on its dead key when the
// leader goes, and its store's first write would fail the fence. It starts
// over on a new lease instead, and wins on a key that exists.
TEST_F(EtcdStoreTest, AStandbyWhoseLeaseIsLostWhileItWaitsCampaignsAnew) {
  EtcdElectionOptions options{
      .name = prefix_ + "leader", .value = "a:1", .ttl = absl::Seconds(2)};
  EtcdElection first(client_, options);
  auto led = first.Campaign();
  ASSERT_TRUE(led.ok()) << led.status();
  options.value = "b:2";
  EtcdElection second(client_, options);
  absl::StatusOr<Leadership> won;
  std::thread standby([&] { won = second.Campaign(); });
  // The election's keys (name/<lease>); the standby's is the one on
  // another lease than the leader's.
  auto standby_lease = [&](int64_t other_than) -> int64_t {
    etcdserverpb::RangeRequest keys;
    keys.set_key(options.name + "/");
    keys.set_range_end(options.name + "0");  // '/' + 1
    absl::StatusOr<etcdserverpb::RangeResponse> found = client_->Range(keys);
    if (!found.ok()) return 0;
    for (const auto& kv : found->kvs()) {
      if (kv.lease() != led->lease && kv.lease() != other_than) {
        return kv.lease();
      }
    }
    return 0;
  };
  auto wait_for_standby = [&](int64_t other_than) -> int64_t {
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (absl::Now() < until) {
      if (int64_t lease = standby_lease(other_than); lease != 0) return lease;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return 0;
  };
  // No ASSERT until the standby's thread is joined.
  const int64_t lost = wait_for_standby(0);
  EXPECT_NE(lost, 0) << "the standby made no key";
  if (lost != 0) {
    EXPECT_TRUE(client_->RevokeLease(lost).ok());  // as if it expired
    // Its next renewal (TTL/3) finds the lease gone; it campaigns anew.
    EXPECT_NE(wait_for_standby(lost), 0) << "no new campaign within 5 s";
  }
  first.Stop();
  EXPECT_EQ(first.AwaitLost(), "");  // stopped; its lease is revoked
  standby.join();
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_NE(won->lease, lost);
  etcdserverpb::RangeRequest key;
  key.set_key(won->key);
  absl::StatusOr<etcdserverpb::RangeResponse> found = client_->Range(key);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->kvs_size(), 1) << "won on a key that is gone: " << won->key;
  EXPECT_EQ(found->kvs(0).create_revision(), won->revision);
  second.Stop();
}

// Leadership lost while etcd can't be reached (so the lease can't be
// revoked): the next campaign revokes it first, and wins at once instead of
// waiting behind its own old key for the rest of that lease's TTL.
TEST_F(EtcdStoreTest, AnUnrevokedLeaseIsRevokedByTheNextCampaign) {
  const std::string& endpoints = cluster_->endpoints();
  CuttableProxy proxy(std::stoi(endpoints.substr(endpoints.rfind(':') + 1)));
  auto client = EtcdClient::Create({.endpoints = proxy.endpoint(),
                                    .call_timeout = absl::Milliseconds(300)});
  ASSERT_TRUE(client.ok());
  EtcdElection election(*client, {.name = prefix_ + "leader",
                                  .value = "a:1",
                                  .ttl = absl::Seconds(5)});
  auto led = election.Campaign();
  ASSERT_TRUE(led.ok()) << led.status();
  proxy.Cut();  // the revoke does not reach etcd
  absl::SleepFor(absl::Milliseconds(100));  // the proxy's pump has cut
  election.MarkLost("the test");
  EXPECT_EQ(election.AwaitLost(), "the test");
  etcdserverpb::RangeRequest old_key;
  old_key.set_key(led->key);
  EXPECT_EQ(client_->Range(old_key)->kvs_size(), 1);  // revoking failed
  proxy.Restore();
  const absl::Time start = absl::Now();
  auto again = election.Campaign();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // not the lease's 5 s
  EXPECT_NE(again->key, led->key);
  EXPECT_EQ(client_->Range(old_key)->kvs_size(), 0);
  election.Stop();
}

// A member that stops answering without closing its connections (SIGSTOP:
// its kernel still acknowledges TCP, as a partition dropping packets would
// leave it) is left for the next member once a keepalive ping goes
// unanswered. Without keepalive every call would time out on it until TCP
// gives up (never, here).
TEST(EtcdClientTest, AMemberThatStopsAnsweringIsLeftForTheNext) {
  std::string why = EtcdTestCluster::Unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  auto cluster = EtcdTestCluster::Start(3, {"--grpc-keepalive-min-time=500ms"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = EtcdClient::Create({.endpoints = (*cluster)->endpoints(),
                                    .call_timeout = absl::Seconds(1),
                                    .keepalive_time = absl::Seconds(1),
                                    .keepalive_timeout = absl::Seconds(1)});
  ASSERT_TRUE(client.ok()) << client.status();
  etcdserverpb::RangeRequest get;
  get.set_key("k");
  ASSERT_TRUE((*client)->Range(get).ok());  // connected, to the first member
  (*cluster)->Signal(0, SIGSTOP);
  const absl::Time start = absl::Now();
  absl::Status last = absl::UnknownError("no call yet");
  while (!last.ok() && absl::Now() - start < absl::Seconds(30)) {
    last = (*client)->Range(get).status();
  }
  (*cluster)->Signal(0, SIGCONT);
  EXPECT_TRUE(last.ok()) << last;
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

// The test cluster itself: a member that exits while the cluster comes up
// is seen at once (not after the 20 s wait), and the error shows why.
TEST(EtcdTestClusterTest, AMemberThatExitsAtStartIsReportedWithItsLog) {
  std::string why = EtcdTestCluster::Unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  const absl::Time start = absl::Now();
  auto started = EtcdTestCluster::Start(1, {"--no-such-flag"});
  ASSERT_FALSE(started.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_NE(started.status().message().find("m0 (exited)"), std::string::npos)
      << started.status();
  // etcd's own words follow the header (here its usage text).
  const std::string message(started.status().message());
  const std::string header = "end of its log:\n";
  const size_t at = message.find(header);
  ASSERT_NE(at, std::string::npos) << message;
  EXPECT_GT(message.size(), at + header.size() + 10) << message;
}

}  // namespace
}  // namespace sliced::storage
