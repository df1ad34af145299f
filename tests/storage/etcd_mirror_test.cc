// The hot standby's copy (storage/etcd/etcd_mirror.h) against a real etcd
// member on loopback: it follows puts and deletes through its watch, a new
// leader's store loads it instead of reading etcd, Take waits for every
// earlier leader key to go, and a watch broken by a lost connection comes
// back (reloading when its revision was compacted meanwhile). The broken
// connection is a loopback TCP proxy the test cuts (cuttable_proxy.h).
// Skipped only where /usr/bin/etcd is missing.
#include "storage/etcd/etcd_mirror.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/etcd/etcd_election.h"
#include "storage/etcd/etcd_store.h"
#include "tests/storage/cuttable_proxy.h"
#include "tests/storage/etcd_fixture.h"

namespace sliced::storage {
namespace {

scheduler::Node Node(const std::string& id, int64_t cpu = 10000) {
  scheduler::Node n;
  n.node_id = id;
  n.address = id + ".local";
  n.resources = {{"CPU", cpu}};
  return n;
}

std::vector<std::string> NodeIds(const StoredState& state) {
  std::vector<std::string> ids;
  for (const scheduler::Node& n : state.nodes) ids.push_back(n.node_id);
  return ids;
}

class EtcdMirrorTest : public EtcdFixture {
 protected:
  std::shared_ptr<EtcdMirror> Mirror(std::shared_ptr<EtcdClient> client) {
    return std::make_shared<EtcdMirror>(
        client ? client : client_,
        EtcdMirrorOptions{.prefix = prefix_,
                          .election = prefix_ + "leader",
                          .retry_pause = absl::Milliseconds(50)});
  }
  // Waits (up to 10 s) for `done` on the mirror's stats.
  template <typename Done>
  bool WaitFor(const EtcdMirror& mirror, Done done) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!done(mirror.stats())) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }
};

TEST_F(EtcdMirrorTest, ANewLeaderLoadsTheStandbysCopyWithEveryEarlierWrite) {
  EtcdElectionOptions options{.name = prefix_ + "leader", .value = "a:1",
                              .ttl = absl::Seconds(2)};
  auto first = std::make_unique<EtcdElection>(client_, options);
  auto led = first->Campaign();
  ASSERT_TRUE(led.ok()) << led.status();
  auto leader =
      Open({.fence_key = led->key, .fence_revision = led->revision});
  Mutation before;  // loaded by the standby's first read
  before.PutNode(Node("a"));
  before.PutNode(Node("b"));
  before.PutNextPgSequence(3);
  server::ComputeClass cc;
  cc.name = "cheap";
  before.PutComputeClass(cc);
  ASSERT_TRUE(leader->Commit(before).ok());

  auto mirror = Mirror(nullptr);
  mirror->Start();
  ASSERT_TRUE(WaitFor(*mirror, [](const EtcdMirrorStats& s) {
    return s.watching;
  }));
  Mutation after;  // seen through the watch
  after.PutNode(Node("a", 20000));
  after.DeleteNode("b");
  after.PutNode(Node("c"));
  after.PutNextPgSequence(9);
  ASSERT_TRUE(leader->Commit(after).ok());

  options.value = "b:2";
  EtcdElection second(client_, options);
  absl::StatusOr<Leadership> won;
  std::thread standby([&] { won = second.Campaign(); });
  Mutation last;  // the old leader's last write, just before it goes
  last.PutNode(Node("d"));
  ASSERT_TRUE(leader->Commit(last).ok());
  first->Stop();
  first->AwaitLost();
  standby.join();
  ASSERT_TRUE(won.ok()) << won.status();

  std::string loaded_from;
  auto store = Open({.fence_key = won->key,
                     .fence_revision = won->revision,
                     .mirror = mirror,
                     .loaded_from = &loaded_from});
  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_NE(loaded_from.find("standby's copy"), std::string::npos)
      << loaded_from;
  EXPECT_FALSE(mirror->stats().running);  // taken: the copy is dropped
  auto read = Open()->Load();  // the same from etcd
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(NodeIds(*state), (std::vector<std::string>{"a", "c", "d"}));
  EXPECT_EQ(state->nodes, read->nodes);
  EXPECT_EQ(state->nodes[0].resources.at("CPU"), 20000);
  EXPECT_EQ(state->compute_classes, read->compute_classes);
  EXPECT_EQ(state->next_pg_sequence, 9u);
  EXPECT_GE(mirror->stats().events, 3);
}

TEST_F(EtcdMirrorTest, TakeWaitsUntilEveryEarlierLeaderKeyIsGone) {
  Put(prefix_ + "leader/a");
  const int64_t mine = Put(prefix_ + "leader/b");
  auto mirror = Mirror(nullptr);
  mirror->Start();
  auto early = mirror->Take(mine, absl::Milliseconds(300));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded)
      << early.status();
  EXPECT_FALSE(mirror->stats().running);

  mirror->Start();
  std::thread old_leader([&] {
    absl::SleepFor(absl::Milliseconds(300));
    auto store = Open();
    Mutation m;
    m.PutNode(Node("late"));
    ASSERT_TRUE(store->Commit(m).ok());
    Delete(prefix_ + "leader/a");  // its key goes after its last write
  });
  auto state = mirror->Take(mine, absl::Seconds(10));
  old_leader.join();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(NodeIds(*state), (std::vector<std::string>{"late"}));
}

TEST_F(EtcdMirrorTest, AStoreFallsBackToEtcdWhenTheCopyIsNotThere) {
  const int64_t mine = Put(prefix_ + "leader/a");
  auto writer = Open();
  Mutation m;
  m.PutNode(Node("a"));
  ASSERT_TRUE(writer->Commit(m).ok());
  auto stopped = Mirror(nullptr);  // never started
  std::string loaded_from;
  auto store = Open({.fence_key = prefix_ + "leader/a",
                     .fence_revision = mine,
                     .mirror = stopped,
                     .loaded_from = &loaded_from});
  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(NodeIds(*state), (std::vector<std::string>{"a"}));
  EXPECT_NE(loaded_from.find("stopped"), std::string::npos) << loaded_from;
  // A mirror needs a fence to catch up to.
  auto unfenced = OpenEtcdStore(
      client_, {.prefix = prefix_, .mirror = Mirror(nullptr)});
  EXPECT_EQ(unfenced.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EtcdMirrorTest, ABrokenWatchResumesAndACompactedOneReloads) {
  CuttableProxy proxy(std::stoi(cluster_->endpoints().substr(
      cluster_->endpoints().rfind(':') + 1)));
  auto proxied = EtcdClient::Create({.endpoints = proxy.endpoint(),
                                     .call_timeout = absl::Seconds(1)});
  ASSERT_TRUE(proxied.ok());
  auto writer = Open();
  auto mirror = Mirror(*proxied);
  mirror->Start();
  ASSERT_TRUE(WaitFor(*mirror, [](const EtcdMirrorStats& s) {
    return s.watching;
  }));

  // Cut: the stream breaks; writes made meanwhile come through the new one.
  proxy.Cut();
  ASSERT_TRUE(WaitFor(*mirror, [](const EtcdMirrorStats& s) {
    return !s.watching;
  }));
  Mutation m;
  m.PutNode(Node("while-cut"));
  ASSERT_TRUE(writer->Commit(m).ok());
  proxy.Restore();
  ASSERT_TRUE(WaitFor(*mirror, [](const EtcdMirrorStats& s) {
    return s.watching && s.records == 1;
  }));
  EXPECT_EQ(mirror->stats().loads, 1);
  EXPECT_GE(mirror->stats().watch_restarts, 1);

  // Cut again, and compact past the copy's revision: the new stream is
  // refused (compacted) and the copy is read again.
  proxy.Cut();
  ASSERT_TRUE(WaitFor(*mirror, [](const EtcdMirrorStats& s) {
    return !s.watching;
  }));
  Mutation more;
  more.DeleteNode("while-cut");
  more.PutNode(Node("after-compaction"));
  ASSERT_TRUE(writer->Commit(more).ok());
  const int64_t head = Put(prefix_ + "meta/probe");
  ASSERT_TRUE(client_->Compact(head).ok());
  proxy.Restore();
  ASSERT_TRUE(WaitFor(*mirror, [](const EtcdMirrorStats& s) {
    return s.watching && s.loads == 2;
  }));
  const int64_t mine = Put(prefix_ + "leader/z");
  auto state = mirror->Take(mine, absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(NodeIds(*state), (std::vector<std::string>{"after-compaction"}));
}

}  // namespace
}  // namespace sliced::storage
