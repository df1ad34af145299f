#include "scheduler/snapshot.h"

#include <algorithm>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "scheduler/internal/snapshot_state.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::internal::BundleKind;
using ::sliced::scheduler::internal::CowBitset;
using ::sliced::scheduler::internal::kNumRanks;
using ::sliced::scheduler::internal::StateOf;
using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::TpuHost;
using ::sliced::scheduler::testing::Units;

std::vector<Node> SmallCluster() {
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "4x4", "z1");
  for (Node& n : Slice("b", "TPU-V6E", "4x4", "z2")) nodes.push_back(n);
  for (Node& n : Slice("c", "TPU-V4", "2x2x2", "z1")) nodes.push_back(n);
  nodes.push_back(TpuHost("solo", "", "TPU-V6E", "2x4", 0, 8));
  nodes.push_back(CpuNode("cpu1"));
  nodes.push_back(CpuNode("cpu2", 4, "z2", "spot"));
  return nodes;
}

Allocation Alloc(std::string pg, int bundle, std::string node,
                 ResourceSet resources) {
  return Allocation{std::move(pg), bundle, std::move(node),
                    std::move(resources)};
}

// Everything observable about a snapshot, as text, for comparisons.
std::string Describe(const InventorySnapshot& s) {
  std::string out;
  for (uint32_t i = 0; i < s.index_end(); ++i) {
    if (!s.has_node(i)) continue;
    const auto& e = s.node(i);
    absl::StrAppend(&out, e.node.node_id, " ", NodeStateName(e.node.state),
                    " slice=", s.SliceIndexOf(e),
                    " rank=", StateOf(s).Rank(BundleKind::kCpuOnly, i), "/",
                    StateOf(s).Rank(BundleKind::kTpu, i), " free=");
    for (const auto& [k, v] : e.free) absl::StrAppend(&out, k, ":", v, ",");
    for (const auto& a : e.allocations) {
      absl::StrAppend(&out, " ", a.pg_id, "[", a.bundle_index, "]");
    }
    out += "\n";
    for (int kind = 0; kind < 2; ++kind) {
      for (int r = 0; r < kNumRanks; ++r) {
        if (StateOf(s).rank_set(static_cast<BundleKind>(kind), r).Test(i)) {
          absl::StrAppend(&out, "  in rank set ", kind, "/", r, "\n");
        }
      }
    }
  }
  for (const SliceState& st : s.ListSlices()) {
    absl::StrAppend(&out, "slice ", st.info.name, " intact=", st.info.intact,
                    " free=", st.free, " ", st.info.reason, "\n");
  }
  for (const auto& [key, set] : StateOf(s).free_slices()) {
    absl::StrAppend(&out, "free ", TpuGenerationName(key.generation), " ",
                    key.topology, " ", key.tier, " ", key.zone, ":");
    for (size_t i = set->NextSet(0); i < set->bits(); i = set->NextSet(i + 1)) {
      absl::StrAppend(&out, " ", s.slice(i).info.name);
    }
    absl::StrAppend(&out, " count=", set->count(), "\n");
  }
  for (const auto& [k, values] : StateOf(s).label_index()) {
    for (const auto& [v, list] : *values) {
      // Posting lists hold node slots; show the nodes' ids in index order
      // (indexes themselves depend on where gaps are).
      std::vector<uint32_t> indexes;
      for (uint32_t slot : *list)
        indexes.push_back(StateOf(s).IndexOfSlot(slot));
      std::sort(indexes.begin(), indexes.end());
      std::vector<std::string> ids;
      for (uint32_t i : indexes) ids.push_back(s.node(i).node.node_id);
      absl::StrAppend(&out, "label ", k, "=", v, ": ", absl::StrJoin(ids, ","),
                      "\n");
    }
  }
  absl::StrAppend(&out, "allocations=", s.num_allocations(), "\n");
  return out;
}

TEST(AllocationListTest, KeepsKeyOrderAndCopiesShareTheAllocations) {
  AllocationList list;
  for (const auto& [pg, index] : std::vector<std::pair<std::string, int>>{
           {"pg-b", 1}, {"pg-a", 2}, {"pg-b", 0}, {"pg-a", 10}, {"pg-c", 0}}) {
    list.Insert(Allocation{pg, index, "n1", {{"CPU", 1}}});
  }
  std::vector<std::string> order;
  for (const Allocation& a : list) {
    order.push_back(absl::StrCat(a.pg_id, "[", a.bundle_index, "]"));
  }
  EXPECT_EQ(absl::StrJoin(order, " "),
            "pg-a[2] pg-a[10] pg-b[0] pg-b[1] pg-c[0]");
  AllocationList copy = list;
  EXPECT_EQ(&copy[0], &list[0]);  // shared, not copied
  EXPECT_TRUE(copy.Erase("pg-b", 0));
  EXPECT_FALSE(copy.Erase("pg-b", 0));
  EXPECT_FALSE(copy.Erase("pg-a", 3));
  EXPECT_FALSE(copy.Erase("pg-z", 0));
  EXPECT_EQ(copy.size(), 4u);
  EXPECT_EQ(list.size(), 5u);  // the original keeps it
  EXPECT_EQ(list[2].pg_id, "pg-b");
  EXPECT_EQ(list[2].bundle_index, 0);
}

TEST(SnapshotTest, BuildIndexesNodesSlicesAndFreeCapacity) {
  auto snap = InventorySnapshot::Build(
      SmallCluster(), {Alloc("pg1", 0, "b-w2", {{"TPU", Units(4)}}),
                       Alloc("pg1", 1, "cpu1", {{"CPU", Units(2.5)}})});
  ASSERT_TRUE(snap.ok()) << snap.status();
  const InventorySnapshot& s = **snap;
  EXPECT_EQ(s.num_nodes(), 13u);
  EXPECT_EQ(s.node(0).node.node_id, "a-w0");  // sorted by id
  EXPECT_EQ((*s.FreeResources("cpu1"))["CPU"], Units(5.5));
  EXPECT_EQ((*s.FreeResources("b-w2"))["TPU"], 0);
  EXPECT_EQ(s.FreeResources("nope").status().code(),
            absl::StatusCode::kNotFound);

  auto slices = s.ListSlices();
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[0].info.name, "a");
  EXPECT_TRUE(slices[0].free);
  EXPECT_EQ(slices[1].info.name, "b");
  EXPECT_TRUE(slices[1].info.intact);
  EXPECT_FALSE(slices[1].free);
  EXPECT_EQ(slices[3].info.name, "solo");
  EXPECT_TRUE(slices[3].free);

  // Free intact index: a (v6e 4x4 z1), c (v4 2x2x2 z1), solo (v6e 2x4).
  int64_t free_total = 0;
  for (const auto& [key, set] : StateOf(s).free_slices())
    free_total += set->count();
  EXPECT_EQ(free_total, 3);
  SliceKey key{TpuGeneration::kV6e, "4x4", "on-demand", "z2"};
  EXPECT_FALSE(StateOf(s).free_slices().contains(key));

  EXPECT_EQ(s.AllocationsOf("pg1").size(), 2u);
  EXPECT_TRUE(s.AllocationsOf("pg2").empty());
  EXPECT_TRUE(s.CheckNotOverCommitted().ok());

  // Ranks: cpu1 used CPU node ranks first for CPU bundles.
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kCpuOnly, s.NodeIndex("cpu1")), 0);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kCpuOnly, s.NodeIndex("cpu2")), 1);
  // b is held by TPU work alone: after free single-host nodes (whole again
  // when that work ends); a is free and whole: after that.
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kCpuOnly, s.NodeIndex("b-w0")), 5);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kCpuOnly, s.NodeIndex("solo")), 4);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kCpuOnly, s.NodeIndex("a-w0")), 6);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kTpu, s.NodeIndex("cpu1")), kNumRanks);
  // b-w2's 4 chips are all held: it ranks last for TPU bundles, but a CPU
  // bundle may still use it (a slice only TPU work holds, so rank 5).
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kTpu, s.NodeIndex("b-w2")),
            kNumRanks - 1);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kCpuOnly, s.NodeIndex("b-w2")), 5);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kTpu, s.NodeIndex("solo")), 2);
  EXPECT_EQ(StateOf(s).Rank(BundleKind::kTpu, s.NodeIndex("a-w0")), 5);
}

// Each slice keeps its least host per resource; slices with equal minima
// share one set, and a change to one host changes only its slice's.
TEST(SnapshotTest, SlicesKeepAndShareTheirLeastHost) {
  std::vector<Node> nodes;
  for (const char* name : {"a", "b", "c"}) {
    for (Node& n : Slice(name, "TPU-V6E", "4x4")) nodes.push_back(n);
  }
  nodes[9].resources["TPU"] = Units(2);  // c-w1
  nodes[9].resources.erase("CPU");
  auto built = InventorySnapshot::Build(nodes, {});
  ASSERT_TRUE(built.ok()) << built.status();
  const InventorySnapshot& s = **built;
  auto least = [](const InventorySnapshot& snap, const std::string& slice) {
    return snap.slice(snap.SliceIndex(slice)).host_min;
  };
  const ResourceSet full = *least(s, "a");
  EXPECT_EQ(full.at("TPU"), Units(4));
  EXPECT_TRUE(full.contains("CPU"));
  EXPECT_FALSE(full.contains("TPU-v6e-16-head"));  // only worker 0 has it
  EXPECT_EQ(least(s, "a"), least(s, "b"));  // shared
  EXPECT_EQ(least(s, "c")->at("TPU"), Units(2));
  EXPECT_FALSE(least(s, "c")->contains("CPU"));

  // A drain keeps the set (in place); fewer chips on b-w3 change b's only.
  Node drained = nodes[0];
  drained.state = NodeState::kDraining;
  Node smaller = nodes[7];  // b-w3
  smaller.resources["TPU"] = Units(1);
  SnapshotDelta delta;
  delta.upsert_nodes = {drained, smaller};
  auto next = s.Apply(delta);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(least(**next, "a"), least(s, "a"));
  EXPECT_EQ(least(**next, "b")->at("TPU"), Units(1));
  EXPECT_EQ(*least(s, "b"), full);  // the source is untouched
}

// Per key: the slices not intact, and its least host, kept by deltas as a
// full build would make them.
TEST(SnapshotTest, KeysKnowTheirBrokenSlicesAndTheirLeastHost) {
  std::vector<Node> nodes;
  for (const char* name : {"a", "b"}) {
    for (Node& n : Slice(name, "TPU-V6E", "4x4")) nodes.push_back(n);
  }
  auto built = InventorySnapshot::Build(nodes, {});
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_EQ((*built)->slices_by_key().size(), 1u);
  const SliceKey key = (*built)->slices_by_key().begin()->first;
  auto least_cpu = [&](const InventorySnapshot& snap) {
    return StateOf(snap).key_hosts().Find(key)->least->at("CPU");
  };
  auto broken = [&](const InventorySnapshot& snap) {
    std::vector<std::string> names;
    const CowBitset* set = StateOf(snap).broken_slices().Find(key);
    if (set == nullptr) return names;
    for (size_t i = set->NextSet(0); i < set->bits(); i = set->NextSet(i + 1)) {
      names.push_back(snap.slice(i).info.name);
    }
    return names;
  };
  const int64_t cpus = nodes[7].resources.at("CPU");
  ASSERT_GT(cpus, Units(1));
  EXPECT_EQ(least_cpu(**built), cpus);
  EXPECT_TRUE(broken(**built).empty());

  Node smaller = nodes[7];  // b-w3, fewer CPUs (still intact)
  smaller.resources["CPU"] = Units(1);
  Node dead = nodes[1];  // a-w1
  dead.state = NodeState::kDead;
  SnapshotDelta shrink;
  shrink.upsert_nodes = {smaller, dead};
  auto shrunk = (*built)->Apply(shrink);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_EQ(least_cpu(**shrunk), Units(1));
  EXPECT_EQ(broken(**shrunk), std::vector<std::string>{"a"});
  EXPECT_EQ(least_cpu(**built), cpus);  // the source is untouched

  SnapshotDelta mend;
  mend.upsert_nodes = {nodes[7], nodes[1]};
  auto mended = (*shrunk)->Apply(mend);
  ASSERT_TRUE(mended.ok()) << mended.status();
  EXPECT_EQ((*mended)->slice(1).host_min->at("CPU"), cpus);
  EXPECT_EQ(least_cpu(**mended), cpus);
  EXPECT_TRUE(broken(**mended).empty());
  // Shared with the slices when they all have one set.
  EXPECT_EQ(StateOf(**mended).key_hosts().Find(key)->least.get(),
            (*mended)->slice(0).host_min.get());

  // A removed slice takes its hosts out of the key's least; a new one
  // brings its own.
  SnapshotDelta replace;
  for (int w = 4; w < 8; ++w)
    replace.remove_node_ids.push_back(nodes[w].node_id);
  for (Node& n : Slice("c", "TPU-V6E", "4x4")) {
    n.resources["CPU"] = Units(2);
    replace.upsert_nodes.push_back(n);
  }
  auto replaced = (*mended)->Apply(replace);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(least_cpu(**replaced), Units(2));
  SnapshotDelta drop_c;
  for (const Node& n : replace.upsert_nodes) {
    drop_c.remove_node_ids.push_back(n.node_id);
  }
  auto dropped = (*replaced)->Apply(drop_c);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(least_cpu(**dropped), cpus);
}

TEST(SnapshotTest, BuildRejectsCorruptInput) {
  auto unknown = InventorySnapshot::Build(
      SmallCluster(), {Alloc("pg", 0, "ghost", {{"CPU", 1}})});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  auto duplicate_bundle = InventorySnapshot::Build(
      SmallCluster(), {Alloc("pg", 0, "cpu1", {{"CPU", 1}}),
                       Alloc("pg", 0, "cpu2", {{"CPU", 1}})});
  EXPECT_EQ(duplicate_bundle.status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<Node> dup = SmallCluster();
  dup.push_back(CpuNode("cpu1"));
  EXPECT_EQ(InventorySnapshot::Build(dup, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SnapshotTest, OverCommitIsReportedAtRecovery) {
  auto snap = InventorySnapshot::Build(
      SmallCluster(), {Alloc("pg1", 0, "solo", {{"TPU", Units(8)}}),
                       Alloc("pg2", 0, "solo", {{"TPU", Units(1)}})});
  ASSERT_TRUE(snap.ok());
  absl::Status s = (*snap)->CheckNotOverCommitted();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("solo"), std::string::npos) << s;
  EXPECT_NE(s.message().find("pg2[0]"), std::string::npos) << s;
}

TEST(SnapshotTest, ApplyRejectsBadDeltasAndLeavesSourceUntouched) {
  auto snap = *InventorySnapshot::Build(SmallCluster(), {});
  const std::string before = Describe(*snap);
  SnapshotDelta unknown;
  unknown.add_allocations = {Alloc("pg", 0, "ghost", {{"CPU", 1}})};
  EXPECT_EQ(snap->Apply(unknown).status().code(), absl::StatusCode::kNotFound);
  SnapshotDelta too_big;
  too_big.add_allocations = {Alloc("pg", 0, "cpu1", {{"CPU", Units(2)}}),
                             Alloc("pg", 1, "cpu1", {{"CPU", Units(7)}})};
  EXPECT_EQ(snap->Apply(too_big).status().code(),
            absl::StatusCode::kFailedPrecondition);
  SnapshotDelta remove_busy;
  remove_busy.add_allocations = {Alloc("pg", 0, "cpu1", {{"CPU", 1}})};
  auto busy = *snap->Apply(remove_busy);
  SnapshotDelta remove;
  remove.remove_node_ids = {"cpu1"};
  EXPECT_EQ(busy->Apply(remove).status().code(),
            absl::StatusCode::kFailedPrecondition);
  remove.remove_node_ids = {"ghost"};
  EXPECT_EQ(snap->Apply(remove).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Describe(*snap), before);
}

// A group's allocation list is shared between snapshots and copied on its
// first write in a derivation: older snapshots keep theirs.
TEST(SnapshotTest, AGroupsAllocationsChangeOnlyInTheSnapshotsDerived) {
  auto bundles = [](const InventorySnapshot& s) {
    std::vector<int> out;
    for (const Allocation& a : s.AllocationsOf("pg")) {
      out.push_back(a.bundle_index);
    }
    return out;
  };
  SnapshotDelta first;
  first.add_allocations = {Alloc("pg", 0, "cpu1", {{"CPU", 1}})};
  auto s1 = *(*InventorySnapshot::Build(SmallCluster(), {}))->Apply(first);
  SnapshotDelta two_more;  // two writes to one list in one derivation
  two_more.add_allocations = {Alloc("pg", 2, "cpu1", {{"CPU", 1}}),
                              Alloc("pg", 1, "cpu2", {{"CPU", 1}})};
  auto s2 = *s1->Apply(two_more);
  SnapshotDelta one_more;
  one_more.add_allocations = {Alloc("pg", 3, "cpu2", {{"CPU", 1}})};
  auto s3 = *s2->Apply(one_more);
  SnapshotDelta release;
  release.release_pg_ids = {"pg"};
  auto s4 = *s3->Apply(release);
  EXPECT_EQ(bundles(*s1), (std::vector<int>{0}));
  EXPECT_EQ(bundles(*s2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(bundles(*s3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(bundles(*s4).empty());
  // A duplicate bundle is refused whichever snapshot holds the list.
  EXPECT_EQ(s3->Apply(one_more).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s4->Apply(one_more).ok());
}

// The PG index's shards spread their groups over buckets that double as
// groups arrive (when built and when derived), so that a write copies a
// bucket, not a shard; every snapshot keeps exactly its own groups.
TEST(SnapshotTest, PgIndexShardsSplitAndEachSnapshotKeepsItsGroups) {
  constexpr int kNodes = 600, kPerNode = 100;  // 60,000 one-bundle groups
  std::vector<Node> nodes;
  for (int n = 0; n < kNodes; ++n) {
    nodes.push_back(CpuNode(absl::StrCat("n", n), kPerNode));
  }
  auto group = [](int g) { return absl::StrCat("pg-", g); };
  auto alloc = [&](int g) {
    return Alloc(group(g), 0, absl::StrCat("n", g % kNodes), {{"CPU", 1}});
  };
  constexpr int kGroups = kNodes * kPerNode;
  std::vector<Allocation> built;
  for (int g = 0; g < kGroups / 2; ++g) built.push_back(alloc(g));
  auto s1 = *InventorySnapshot::Build(nodes, built);
  SnapshotDelta more;
  for (int g = kGroups / 2; g < kGroups; ++g) {
    more.add_allocations.push_back(alloc(g));
  }
  auto s2 = *s1->Apply(more);
  SnapshotDelta release;
  for (int g = 0; g < kGroups; g += 3)
    release.release_pg_ids.push_back(group(g));
  auto s3 = *s2->Apply(release);

  auto holds = [&](const InventorySnapshot& s, int g) {
    std::vector<Allocation> held = s.AllocationsOf(group(g));
    return held.size() == 1 && held[0].node_id == absl::StrCat("n", g % kNodes);
  };
  for (int g = 0; g < kGroups; ++g) {
    SCOPED_TRACE(group(g));
    EXPECT_EQ(holds(*s1, g), g < kGroups / 2);
    EXPECT_TRUE(holds(*s2, g));
    EXPECT_EQ(holds(*s3, g), g % 3 != 0);
    if (HasFailure()) break;
  }
  EXPECT_EQ(s1->num_allocations(), kGroups / 2);
  EXPECT_EQ(s3->num_allocations(), kGroups - (kGroups + 2) / 3);
  // Every shard's count is its groups', and at 60,000 groups most shards
  // have split (4,096 shards of 8 groups a bucket hold 32,768 unsplit).
  size_t groups = 0, split = 0;
  const auto& state = StateOf(*s2);
  for (size_t i = 0; i < internal::SnapshotState::kPgShards; ++i) {
    groups += state.pg_shard(i).size();
    split += state.pg_shard(i).num_buckets() > 1 ? 1 : 0;
  }
  EXPECT_EQ(groups, static_cast<size_t>(kGroups));
  EXPECT_GT(split, internal::SnapshotState::kPgShards / 2);
  // A rebuild from the same allocations sees the same nodes.
  std::vector<Allocation> all;
  for (int g = 0; g < kGroups; ++g) {
    if (g % 3 != 0) all.push_back(alloc(g));
  }
  EXPECT_EQ(Describe(**InventorySnapshot::Build(nodes, all)), Describe(*s3));
}

// The daemon's ids ("pg-" and a counter in hex) come in order, a commit
// group's creates one after another: runs of 16 share a shard and a bucket
// (one copy of each per commit group), and the runs still fill every shard
// alike. Other ids are hashed.
TEST(SnapshotTest, ConsecutiveGroupIdsShareAShardAndABucket) {
  using internal::SnapshotState;
  auto hash = [](uint64_t seq) {
    return SnapshotState::PgHash(absl::StrFormat("pg-%012x", seq));
  };
  auto shard = [&](uint64_t seq) {
    return SnapshotState::PgShardOf(hash(seq));
  };
  for (uint64_t seq = 0x12340; seq < 0x12350; ++seq) {
    EXPECT_EQ(hash(seq), hash(0x12340)) << seq;
  }
  EXPECT_EQ(shard(0x12350), (shard(0x12340) + 1) % SnapshotState::kPgShards);
  std::vector<int> per_shard(SnapshotState::kPgShards);
  // Four laps round the shards, from the start of one: 64 groups each.
  constexpr uint64_t kLap = 16 * SnapshotState::kPgShards;
  for (uint64_t seq = 3 * kLap; seq < 7 * kLap; ++seq) ++per_shard[shard(seq)];
  EXPECT_EQ(*std::min_element(per_shard.begin(), per_shard.end()), 64);
  EXPECT_EQ(*std::max_element(per_shard.begin(), per_shard.end()), 64);
  // Names are hashed: neither neighbours nor one shard.
  per_shard.assign(SnapshotState::kPgShards, 0);
  for (int i = 0; i < 16 * SnapshotState::kPgShards; ++i) {
    ++per_shard[SnapshotState::PgShardOf(
        SnapshotState::PgHash(absl::StrCat("train-", i, "-job")))];
  }
  EXPECT_LT(*std::max_element(per_shard.begin(), per_shard.end()), 64);
}

TEST(SnapshotTest, SliceBecomesHeldAndFreeAgain) {
  auto snap = *InventorySnapshot::Build(SmallCluster(), {});
  SnapshotDelta hold;
  hold.add_allocations = {Alloc("pg", 0, "a-w3", {{"TPU", Units(1)}})};
  auto held = *snap->Apply(hold);
  EXPECT_FALSE(held->GetSlice("a")->free);
  EXPECT_TRUE(snap->GetSlice("a")->free);  // the source is unchanged
  EXPECT_EQ(StateOf(*held).Rank(BundleKind::kCpuOnly, held->NodeIndex("a-w0")),
            5);  // held by TPU work alone
  SnapshotDelta release;
  release.release_pg_ids = {"pg"};
  auto freed = *held->Apply(release);
  EXPECT_TRUE(freed->GetSlice("a")->free);
  EXPECT_EQ(Describe(*freed), Describe(*snap));
}

TEST(SnapshotTest, DeadHostBreaksSliceIncrementally) {
  auto snap = *InventorySnapshot::Build(SmallCluster(), {});
  std::vector<Node> nodes = SmallCluster();
  Node dead = *snap->FindNode("a-w1");
  dead.state = NodeState::kDead;
  SnapshotDelta delta;
  delta.upsert_nodes = {dead};
  auto next = *snap->Apply(delta);
  auto a = *next->GetSlice("a");
  EXPECT_FALSE(a.info.intact);
  EXPECT_NE(a.info.reason.find("a-w1 is DEAD"), std::string::npos);
  for (Node& n : nodes) {
    if (n.node_id == "a-w1") n.state = NodeState::kDead;
  }
  EXPECT_EQ(Describe(*next), Describe(**InventorySnapshot::Build(nodes, {})));
}

// Random deltas applied one by one give the same snapshot as a full build of
// the resulting state.
TEST(SnapshotTest, ApplyMatchesFullRebuild) {
  std::mt19937 rng(7);
  std::vector<Node> nodes = SmallCluster();
  for (Node& n : Slice("d", "TPU-V5P", "2x2x1", "z2", "spot"))
    nodes.push_back(n);
  for (int i = 0; i < 6; ++i) nodes.push_back(CpuNode(absl::StrCat("n", i)));
  std::vector<Allocation> allocations;
  auto snap = *InventorySnapshot::Build(nodes, allocations);
  int next_pg = 0;
  for (int step = 0; step < 300; ++step) {
    SnapshotDelta delta;
    const int op = rng() % 6;
    if (op <= 1) {  // allocate 1-3 bundles
      const std::string pg = absl::StrCat("pg", next_pg++);
      const int count = 1 + rng() % 3;
      for (int b = 0; b < count; ++b) {
        const Node& n = nodes[rng() % nodes.size()];
        const std::string res =
            n.resources.contains("TPU") && rng() % 2 ? "TPU" : "CPU";
        const int64_t free = (*snap->FreeResources(n.node_id))[res];
        const int64_t want = Units(1);
        bool taken = false;
        for (const Allocation& a : delta.add_allocations)
          taken |= a.node_id == n.node_id;
        if (free < want || taken) continue;
        delta.add_allocations.push_back(Alloc(pg, b, n.node_id, {{res, want}}));
      }
    } else if (op == 2 && !allocations.empty()) {  // release a PG
      delta.release_pg_ids = {allocations[rng() % allocations.size()].pg_id};
    } else if (op == 3) {  // change a node's state or a plain label
      Node n = nodes[rng() % nodes.size()];
      n.state = static_cast<NodeState>(rng() % 3);
      if (rng() % 2) n.labels["team"] = absl::StrCat("t", rng() % 3);
      delta.upsert_nodes = {n};
    } else if (op == 4) {  // add or remove a CPU node (full rebuild path)
      const std::string id = absl::StrCat("extra", rng() % 3);
      bool exists = snap->FindNode(id) != nullptr;
      bool busy =
          exists && !snap->node(snap->NodeIndex(id)).allocations.empty();
      if (!exists) {
        delta.upsert_nodes = {CpuNode(id, 2)};
      } else if (!busy) {
        delta.remove_node_ids = {id};
      }
    } else {  // change TPU count of a host (breaks/unbreaks its slice)
      Node n = nodes[rng() % 12];
      if (n.resources.contains("TPU")) {
        n.resources["TPU"] = Units(rng() % 2 ? 4 : 8);
        int64_t used = 0;
        for (const auto& a :
             snap->node(snap->NodeIndex(n.node_id)).allocations) {
          if (a.resources.contains("TPU")) used += a.resources.at("TPU");
        }
        if (n.resources["TPU"] >= used) delta.upsert_nodes = {n};
      }
    }
    auto next = snap->Apply(delta);
    ASSERT_TRUE(next.ok()) << step << ": " << next.status();
    snap = *next;
    // Mirror the delta on the plain state.
    for (const Node& n : delta.upsert_nodes) {
      bool replaced = false;
      for (Node& m : nodes) {
        if (m.node_id == n.node_id) {
          m = n;
          replaced = true;
        }
      }
      if (!replaced) nodes.push_back(n);
    }
    for (const std::string& id : delta.remove_node_ids) {
      std::erase_if(nodes, [&](const Node& m) { return m.node_id == id; });
    }
    for (const std::string& pg : delta.release_pg_ids) {
      std::erase_if(allocations,
                    [&](const Allocation& a) { return a.pg_id == pg; });
    }
    for (const Allocation& a : delta.add_allocations) allocations.push_back(a);
    auto rebuilt = InventorySnapshot::Build(nodes, allocations);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    ASSERT_EQ(Describe(*snap), Describe(**rebuilt)) << "step " << step;
  }
}

TEST(SnapshotTest, MatchingNodesUsesSelectorSemantics) {
  auto snap = *InventorySnapshot::Build(SmallCluster(), {});
  auto ids = [&](absl::btree_map<std::string, std::string> wire) {
    std::vector<std::string> out;
    for (uint32_t i : snap->MatchingNodes(*ParseLabelSelector(wire))) {
      out.push_back(snap->node(i).node.node_id);
    }
    return absl::StrJoin(out, ",");
  };
  EXPECT_EQ(ids({{"sliced.io/capacity-tier", "spot"}}), "cpu2");
  EXPECT_EQ(ids({{"ray.io/tpu-slice-name", "in(a, c)"},
                 {"ray.io/tpu-worker-id", "!in(0,2)"}}),
            "a-w1,a-w3,c-w1");
  EXPECT_EQ(ids({{"ray.io/accelerator-type", "!TPU-V6E"}}),
            "c-w0,c-w1,cpu1,cpu2");
  EXPECT_EQ(ids({{"nokey", "x"}}), "");
  EXPECT_EQ(snap->MatchingNodes(LabelSelector{}).size(), 13u);
}

}  // namespace
}  // namespace sliced::scheduler
