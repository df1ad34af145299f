// The engine snapshot across a commit group (Cluster + Txn over one
// SnapshotEditor): each op sees the committed snapshot with the group's
// earlier ops and its own changes; a failed op, or a failed delta inside an
// op, leaves no trace; a snapshot an op published (Txn::Snapshot) never
// changes afterwards; Install publishes the group's, Abandon drops it. Random
// commit groups of random ops against a model of nodes and allocations.
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/cluster.h"
#include "server/core/txn.h"
#include "storage/store.h"
#include "tests/scheduler/builders.h"

namespace sliced::server {
namespace {

using ::sliced::scheduler::Allocation;
using ::sliced::scheduler::InventorySnapshot;
using ::sliced::scheduler::Node;
using ::sliced::scheduler::SnapshotDelta;
using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Units;

// What a snapshot should hold: nodes and allocations as plain values.
struct Model {
  std::map<std::string, Node> nodes;
  std::map<std::string, Allocation> allocations;  // by PG id: one bundle

  int64_t FreeCpu(const std::string& node_id) const {
    int64_t free = nodes.at(node_id).resources.at("CPU");
    for (const auto& [pg, a] : allocations) {
      if (a.node_id == node_id) free -= a.resources.at("CPU");
    }
    return free;
  }
  std::string Text() const {
    std::string out;
    for (const auto& [id, n] : nodes) {
      absl::StrAppend(&out, id, " zone=", n.labels.at("zone"),
                      " free=", FreeCpu(id), ":");
      for (const auto& [pg, a] : allocations) {
        if (a.node_id == id) absl::StrAppend(&out, " ", pg);
      }
      out += "\n";
    }
    return out;
  }
};

std::string Text(const InventorySnapshot& s) {
  std::string out;
  for (uint32_t i = 0; i < s.index_end(); ++i) {
    if (!s.has_node(i)) continue;
    const auto& e = s.node(i);
    auto cpu = e.free.find("CPU");
    absl::StrAppend(&out, e.node.node_id, " zone=", e.node.labels.at("zone"),
                    " free=", cpu == e.free.end() ? 0 : cpu->second, ":");
    for (const Allocation& a : e.allocations)
      absl::StrAppend(&out, " ", a.pg_id);
    out += "\n";
  }
  return out;
}

Node ZonedNode(const std::string& id, const std::string& zone) {
  Node n = CpuNode(id, 8);
  n.labels = {{"zone", zone}};
  return n;
}

class ClusterSnapshotTest : public ::testing::Test {
 protected:
  int Int(int n) { return static_cast<int>(rng_() % n); }

  // One random change through `txn`, mirrored in `model` when it succeeds.
  void RandomChange(Txn& txn, Model& model) {
    switch (Int(6)) {
      case 0:
      case 1: {  // a new one-bundle group on a node with room
        auto it = model.nodes.begin();
        std::advance(it, Int(static_cast<int>(model.nodes.size())));
        const int64_t cpu = Units(1 + Int(3));
        if (model.FreeCpu(it->first) < cpu) return;
        Allocation a{
            absl::StrCat("pg-", next_++), 0, it->first, {{"CPU", cpu}}};
        SnapshotDelta delta;
        delta.add_allocations = {a};
        ASSERT_TRUE(txn.ApplyDelta(std::move(delta)).ok());
        model.allocations[a.pg_id] = a;
        return;
      }
      case 2: {  // a release
        if (model.allocations.empty()) return;
        auto it = model.allocations.begin();
        std::advance(it, Int(static_cast<int>(model.allocations.size())));
        SnapshotDelta delta;
        delta.release_pg_ids = {it->first};
        ASSERT_TRUE(txn.ApplyDelta(std::move(delta)).ok());
        model.allocations.erase(it);
        return;
      }
      case 3: {  // a node added or moved to another zone (a pending change)
        const std::string id =
            Int(3) == 0 ? absl::StrCat("n-", next_++)
                        : std::next(model.nodes.begin(),
                                    Int(static_cast<int>(model.nodes.size())))
                              ->first;
        Node n = ZonedNode(id, absl::StrCat("z", Int(3)));
        txn.PutNode(n);
        model.nodes[id] = n;
        return;
      }
      case 4: {  // a delta that fails part way: the first bundle fits
        auto it = model.nodes.begin();
        std::advance(it, Int(static_cast<int>(model.nodes.size())));
        SnapshotDelta delta;
        if (model.FreeCpu(it->first) >= Units(1)) {
          delta.add_allocations.push_back(
              Allocation{"fits", 0, it->first, {{"CPU", Units(1)}}});
        }
        delta.add_allocations.push_back(
            Allocation{"too-big", 0, it->first, {{"CPU", Units(100)}}});
        ASSERT_FALSE(txn.ApplyDelta(std::move(delta)).ok());
        return;
      }
      default: {  // published: kept to the end of the test
        auto snapshot = txn.Snapshot();
        ASSERT_TRUE(snapshot.ok());
        published_.emplace_back(*snapshot, model.Text());
        return;
      }
    }
  }

  std::mt19937 rng_{23};
  int next_ = 0;
  std::vector<std::pair<std::shared_ptr<const InventorySnapshot>, std::string>>
      published_;
};

TEST_F(ClusterSnapshotTest, OpsSeeTheGroupsChangesAndFailedOpsLeaveNone) {
  Model committed;
  storage::StoredState stored;
  for (int i = 0; i < 10; ++i) {
    Node n = ZonedNode(absl::StrCat("n-", 100 + i), "z0");
    committed.nodes[n.node_id] = n;
    stored.nodes.push_back(n);
  }
  Cluster cluster(nullptr);
  storage::Mutation repair;
  ASSERT_TRUE(cluster.Restore(std::move(stored), repair).ok());
  absl::Time now = absl::FromUnixSeconds(1700000000);
  int failed_ops = 0, installed = 0;
  for (int round = 0; round < 300; ++round) {
    now += absl::Seconds(1);
    cluster.BeginGroup(now);
    storage::Mutation writes;
    Model group = committed;
    const int ops = 1 + Int(8);
    for (int op = 0; op < ops; ++op) {
      const bool fail = Int(4) == 0;
      Model own = group;
      absl::Status status = cluster.RunOp(
          [&](Txn& txn) {
            for (int c = 1 + Int(4); c > 0; --c) {
              RandomChange(txn, own);
              auto view = txn.View();
              EXPECT_TRUE(view.ok());
              if (!view.ok() || HasFailure()) break;
              EXPECT_EQ(Text(**view), own.Text())
                  << "round " << round << " op " << op;
            }
            return fail ? absl::InternalError("op fails") : absl::OkStatus();
          },
          writes, {});
      ASSERT_FALSE(HasFailure()) << "round " << round << " op " << op;
      ASSERT_EQ(status.ok(), !fail);
      if (fail) {
        ++failed_ops;
      } else {
        group = own;
      }
    }
    // What the next op would see.
    ASSERT_TRUE(cluster
                    .RunOp(
                        [&](Txn& txn) {
                          auto view = txn.View();
                          EXPECT_TRUE(view.ok());
                          if (view.ok()) {
                            EXPECT_EQ(Text(**view), group.Text());
                          }
                          return absl::InternalError("look only");
                        },
                        writes, {})
                    .code() == absl::StatusCode::kInternal);
    ASSERT_FALSE(HasFailure()) << "round " << round;
    if (Int(4) == 0) {
      cluster.Abandon();  // as after a failed commit
    } else {
      cluster.Install();
      committed = group;
      ++installed;
    }
    ASSERT_EQ(Text(*cluster.Snapshot()), committed.Text()) << "round " << round;
    for (const auto& [snapshot, text] : published_) {
      ASSERT_EQ(Text(*snapshot), text)
          << "round " << round << ": a published snapshot changed";
    }
  }
  EXPECT_GT(failed_ops, 100);
  EXPECT_GT(installed, 150);
  EXPECT_GT(published_.size(), 200u);
}

}  // namespace
}  // namespace sliced::server
