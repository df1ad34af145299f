// Property tests: seeded random clusters and requests; every decision is
// checked against the invariants, against a shuffled rebuild of the same
// inventory, and (for strict strategies and single-slice requests) against an
// exhaustive search.
#include <algorithm>
#include <functional>
#include <random>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/solver.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::TpuHost;
using ::sliced::scheduler::testing::Units;

constexpr int kSeeds = 150;
constexpr int kStepsPerSeed = 40;

class World {
 public:
  explicit World(uint32_t seed) : rng_(seed) {
    const char* zones[] = {"z1", "z2"};
    const char* tiers[] = {"spot", "on-demand"};
    auto zone = [&] { return std::string(zones[rng_() % 2]); };
    auto tier = [&] { return std::string(tiers[rng_() % 2]); };
    for (int i = 0, n = rng_() % 6; i < n; ++i) {
      nodes_.push_back(
          CpuNode(absl::StrCat("cpu", i), 4 + rng_() % 13, zone(), tier()));
    }
    for (int i = 0, n = rng_() % 4; i < n; ++i) {
      for (Node& h :
           Slice(absl::StrCat("v6e16-", i), "TPU-V6E", "4x4", zone(), tier())) {
        nodes_.push_back(h);
      }
    }
    for (int i = 0, n = rng_() % 4; i < n; ++i) {
      nodes_.push_back(TpuHost(absl::StrCat("solo", i), "", "TPU-V6E", "2x4", 0,
                               8, zone(), tier()));
    }
    for (int i = 0, n = rng_() % 3; i < n; ++i) {
      for (Node& h :
           Slice(absl::StrCat("v4-", i), "TPU-V4", "2x2x2", zone(), tier())) {
        nodes_.push_back(h);
      }
    }
    for (Node& n : nodes_) {
      const int r = rng_() % 20;
      if (r == 0) n.state = NodeState::kDead;
      if (r == 1) n.state = NodeState::kDraining;
    }
    snap_ = *InventorySnapshot::Build(nodes_, {});
  }

  std::mt19937& rng() { return rng_; }
  const InventorySnapshot& snap() const { return *snap_; }
  const std::vector<Node>& nodes() const { return nodes_; }

  LabelSelector RandomSelector() {
    absl::btree_map<std::string, std::string> wire;
    switch (rng_() % 6) {
      case 0:
        wire[std::string(kLabelZone)] = rng_() % 2 ? "z1" : "z2";
        break;
      case 1:
        wire[std::string(kLabelCapacityTier)] = "!in(spot)";
        break;
      case 2:
        wire[std::string(kLabelAcceleratorType)] = "!TPU-V6E";
        break;
      default:
        break;
    }
    return *ParseLabelSelector(wire);
  }

  PlacementRequest RandomRequest() {
    PlacementRequest r;
    if (rng_() % 3 == 0) {
      SliceRequirement s;
      switch (rng_() % 4) {
        case 0:
          s.generation = TpuGeneration::kV4;
          s.topology = "2x2x2";
          break;
        case 1:
          s.topology = "2x4";
          break;
        case 2:
          s.topology = "8x8";  // never present
          break;
        default:
          s.topology = "4x4";
      }
      s.num_slices = 1 + rng_() % 3;
      if (rng_() % 3 == 0) s.selector = RandomSelector();
      if (rng_() % 4 == 0)
        s.resources_per_host = {{"TPU", Units(1)}, {"CPU", Units(8)}};
      r.slice = s;
    } else {
      r.strategy = static_cast<Strategy>(rng_() % 4);
      for (int b = 0, n = 1 + rng_() % 5; b < n; ++b) {
        Bundle bundle;
        if (rng_() % 3 == 0) {
          bundle.resources = {{"TPU", Units(1 + rng_() % 4)}};
        } else {
          bundle.resources = {{"CPU", Units(1 + rng_() % 8)}};
        }
        if (rng_() % 2) bundle.selector = RandomSelector();
        r.bundles.push_back(bundle);
      }
      if (rng_() % 5 == 0) {
        r.fallbacks.push_back({Bundle{{{"CPU", Units(1)}}, {}, ""}});
      }
    }
    if (rng_() % 4 == 0) {
      r.priorities = {
          *ParseLabelSelector({{std::string(kLabelCapacityTier), "spot"}}),
          *ParseLabelSelector(
              {{std::string(kLabelCapacityTier), "on-demand"}})};
    }
    return r;
  }

  // The bundles a placed decision stands for (slice requests expanded).
  static std::vector<Bundle> PlacedBundles(const PlacementRequest& r,
                                           const Decision& d) {
    std::vector<Bundle> bundles =
        d.fallback_index < 0 ? r.bundles : r.fallbacks[d.fallback_index];
    if (r.slice.has_value() && bundles.empty()) {
      const TpuShape shape =
          *ResolveTpuShape(r.slice->generation, r.slice->topology);
      Bundle b;
      b.resources =
          r.slice->resources_per_host.empty()
              ? ResourceSet{{"TPU", shape.chips_per_host * kResourceScale}}
              : r.slice->resources_per_host;
      bundles.assign(shape.hosts * r.slice->num_slices, b);
    }
    return bundles;
  }

  void Commit(const std::string& pg, const std::vector<Bundle>& bundles,
              const Decision& d, bool replace = false) {
    SnapshotDelta delta;
    if (replace) {
      delta.release_pg_ids = {pg};
      std::erase_if(allocations_,
                    [&](const Allocation& a) { return a.pg_id == pg; });
      std::erase(pgs_, pg);
    }
    for (size_t b = 0; b < bundles.size(); ++b) {
      Allocation a{pg, static_cast<int>(b), d.bundle_nodes[b],
                   bundles[b].resources};
      delta.add_allocations.push_back(a);
      allocations_.push_back(a);
    }
    auto next = snap_->Apply(delta);
    ASSERT_TRUE(next.ok()) << next.status();  // never over-committed
    snap_ = *next;
    pgs_.push_back(pg);
  }

  // A random generic PG currently placed, or "" when there is none.
  std::string RandomGenericPg() {
    std::vector<std::string> generic;
    for (const std::string& pg : pgs_) {
      if (generic_.contains(pg)) generic.push_back(pg);
    }
    return generic.empty() ? "" : generic[rng_() % generic.size()];
  }
  void RememberGeneric(const std::string& pg, const PlacementRequest& r) {
    generic_[pg] = r;
  }
  const PlacementRequest& RequestOf(const std::string& pg) {
    return generic_[pg];
  }

  // Turns a node DEAD (a missed heartbeat).
  void Kill(const std::string& node_id) {
    Node n = *snap_->FindNode(node_id);
    n.state = NodeState::kDead;
    SnapshotDelta delta;
    delta.upsert_nodes = {n};
    snap_ = *snap_->Apply(delta);
    for (Node& m : nodes_) {
      if (m.node_id == node_id) m.state = NodeState::kDead;
    }
  }

  void ReleaseRandom() {
    if (pgs_.empty()) return;
    const size_t k = rng_() % pgs_.size();
    const std::string pg = pgs_[k];
    pgs_.erase(pgs_.begin() + k);
    SnapshotDelta delta;
    delta.release_pg_ids = {pg};
    snap_ = *snap_->Apply(delta);
    std::erase_if(allocations_,
                  [&](const Allocation& a) { return a.pg_id == pg; });
  }

  // The same inventory built from shuffled input.
  std::shared_ptr<const InventorySnapshot> Shuffled() {
    std::vector<Node> nodes = nodes_;
    std::vector<Allocation> allocations = allocations_;
    std::shuffle(nodes.begin(), nodes.end(), rng_);
    std::shuffle(allocations.begin(), allocations.end(), rng_);
    return *InventorySnapshot::Build(nodes, allocations);
  }

  // Everything free and ALIVE.
  std::shared_ptr<const InventorySnapshot> Pristine() const {
    std::vector<Node> nodes = nodes_;
    for (Node& n : nodes) n.state = NodeState::kAlive;
    return *InventorySnapshot::Build(nodes, {});
  }

 private:
  std::mt19937 rng_;
  std::vector<Node> nodes_;
  std::vector<Allocation> allocations_;
  std::vector<std::string> pgs_;
  absl::flat_hash_map<std::string, PlacementRequest> generic_;
  std::shared_ptr<const InventorySnapshot> snap_;
};

LabelSelector Effective(const PlacementRequest& r, const Decision& d,
                        const Bundle& b) {
  LabelSelector s = b.selector;
  if (d.priority_index >= 0) {
    for (const auto& t : r.priorities[d.priority_index].terms)
      s.terms.push_back(t);
  }
  if (r.slice.has_value()) {
    for (const auto& t : r.slice->selector.terms) s.terms.push_back(t);
  }
  return s;
}

bool FitsFree(const InventorySnapshot& snap, uint32_t i,
              const ResourceSet& res) {
  for (const auto& [name, amount] : res) {
    auto it = snap.node(i).free.find(name);
    if ((it == snap.node(i).free.end() ? 0 : it->second) < amount) return false;
  }
  return true;
}

bool Usable(const InventorySnapshot& snap, uint32_t i, const LabelSelector& sel,
            const ResourceSet& res) {
  return snap.node(i).node.state == NodeState::kAlive &&
         Matches(sel, snap.node(i).node.labels) && FitsFree(snap, i, res);
}

// Exhaustive answers for the cases the solver must always get right; only for
// requests without priorities/fallbacks/pins. Returns -1 when not applicable,
// else 1 if a placement exists, 0 if none does.
int ExistsPlacement(const InventorySnapshot& snap, const PlacementRequest& r) {
  if (!r.priorities.empty() || !r.fallbacks.empty()) return -1;
  const uint32_t n = snap.index_end();  // gaps are never Usable below
  if (r.slice.has_value()) {
    if (r.slice->num_slices != 1) return -1;
    auto shape = ResolveTpuShape(r.slice->generation, r.slice->topology);
    Decision dummy;
    dummy.fallback_index = -1;
    std::vector<Bundle> bundles = World::PlacedBundles(r, dummy);
    for (const SliceState& s : snap.ListSlices()) {
      if (!s.info.intact || !s.free || s.info.pod_type != shape->pod_type)
        continue;
      bool ok = true;
      for (int64_t w = 0; w < shape->hosts; ++w) {
        const uint32_t i = snap.NodeIndex(s.info.node_ids[w]);
        ok = ok && Usable(snap, i, Effective(r, dummy, bundles[w]),
                          bundles[w].resources);
      }
      if (ok) return 1;
    }
    return 0;
  }
  Decision none;
  if (r.strategy == Strategy::kStrictPack) {
    ResourceSet sum;
    LabelSelector all;
    for (const Bundle& b : r.bundles) {
      for (const auto& [k, v] : b.resources) sum[k] += v;
      for (const auto& t : b.selector.terms) all.terms.push_back(t);
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (snap.has_node(i) && Usable(snap, i, all, sum)) return 1;
    }
    return 0;
  }
  if (r.strategy == Strategy::kStrictSpread) {
    // Bipartite matching, bundles to distinct nodes.
    std::vector<int> owner(n, -1);
    std::function<bool(size_t, std::vector<bool>&)> augment =
        [&](size_t b, std::vector<bool>& seen) {
          for (uint32_t i = 0; i < n; ++i) {
            if (seen[i] || !snap.has_node(i) ||
                !Usable(snap, i, r.bundles[b].selector,
                        r.bundles[b].resources)) {
              continue;
            }
            seen[i] = true;
            if (owner[i] < 0 || augment(owner[i], seen)) {
              owner[i] = b;
              return true;
            }
          }
          return false;
        };
    for (size_t b = 0; b < r.bundles.size(); ++b) {
      std::vector<bool> seen(n, false);
      if (!augment(b, seen)) return 0;
    }
    return 1;
  }
  return -1;
}

void CheckPlaced(const InventorySnapshot& snap, const PlacementRequest& r,
                 const Decision& d) {
  const std::vector<Bundle> bundles = World::PlacedBundles(r, d);
  ASSERT_EQ(d.bundle_nodes.size(), bundles.size()) << d.diagnosis.summary;
  absl::flat_hash_map<std::string, ResourceSet> used;
  for (size_t b = 0; b < bundles.size(); ++b) {
    const Node* node = snap.FindNode(d.bundle_nodes[b]);
    ASSERT_NE(node, nullptr);
    EXPECT_EQ(node->state, NodeState::kAlive) << node->node_id;
    EXPECT_TRUE(Matches(Effective(r, d, bundles[b]), node->labels))
        << "bundle " << b << " on " << node->node_id;
    for (const auto& [k, v] : bundles[b].resources) used[node->node_id][k] += v;
  }
  // What a re-placed PG holds now is given back by the same commit.
  for (const Allocation& a : snap.AllocationsOf(r.replacing_pg_id)) {
    for (const auto& [k, v] : a.resources) used[a.node_id][k] -= v;
  }
  for (const auto& [id, res] : used) {
    EXPECT_TRUE(FitsFree(snap, snap.NodeIndex(id), res))
        << "over-commits " << id;
  }
  absl::flat_hash_set<std::string> distinct(d.bundle_nodes.begin(),
                                            d.bundle_nodes.end());
  if (r.slice.has_value()) {
    const TpuShape shape =
        *ResolveTpuShape(r.slice->generation, r.slice->topology);
    ASSERT_EQ(d.slice_names.size(), static_cast<size_t>(r.slice->num_slices));
    absl::flat_hash_set<std::string> slices(d.slice_names.begin(),
                                            d.slice_names.end());
    EXPECT_EQ(slices.size(), d.slice_names.size());
    for (size_t s = 0; s < d.slice_names.size(); ++s) {
      auto state = snap.GetSlice(d.slice_names[s]);
      ASSERT_TRUE(state.ok());
      EXPECT_TRUE(state->info.intact && state->free) << d.slice_names[s];
      EXPECT_EQ(state->info.pod_type, shape.pod_type);
      for (int64_t w = 0; w < shape.hosts; ++w) {
        EXPECT_EQ(d.bundle_nodes[s * shape.hosts + w], state->info.node_ids[w])
            << "slice " << d.slice_names[s] << " worker " << w;
      }
    }
  } else if (r.strategy == Strategy::kStrictPack) {
    EXPECT_EQ(distinct.size(), 1u);
  } else if (r.strategy == Strategy::kStrictSpread) {
    EXPECT_EQ(distinct.size(), d.bundle_nodes.size());
  }
}

// A node of a placed PG dies; the coordinator re-places only the lost
// bundles, pinning the survivors and releasing the old allocations in the
// same commit.
TEST(SolverPropertyTest, ReplacesLostBundlesOnly) {
  int replaced = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    World world(1000 + seed);
    for (int step = 0; step < kStepsPerSeed; ++step) {
      SCOPED_TRACE(absl::StrCat("seed ", seed, " step ", step));
      PlacementRequest r = world.RandomRequest();
      if (r.slice.has_value()) continue;
      r.fallbacks.clear();
      Decision d = Solve(world.snap(), r);
      if (d.outcome == Decision::kPlaced) {
        const std::string pg = absl::StrCat("pg", step);
        world.Commit(pg, r.bundles, d);
        world.RememberGeneric(pg, r);
      }
      if (world.rng()() % 3 != 0) continue;
      const std::string victim_pg = world.RandomGenericPg();
      if (victim_pg.empty()) continue;
      const std::vector<Allocation> held =
          world.snap().AllocationsOf(victim_pg);
      const std::string dead = held[world.rng()() % held.size()].node_id;
      world.Kill(dead);
      PlacementRequest again = world.RequestOf(victim_pg);
      again.replacing_pg_id = victim_pg;
      for (const Allocation& a : held) {
        if (a.node_id != dead)
          again.bundles[a.bundle_index].pinned_node_id = a.node_id;
      }
      const Decision redo = Solve(world.snap(), again);
      ASSERT_EQ(Solve(*world.Shuffled(), again), redo);
      if (redo.outcome != Decision::kPlaced) continue;
      ++replaced;
      for (const Allocation& a : held) {
        if (a.node_id != dead) {
          EXPECT_EQ(redo.bundle_nodes[a.bundle_index], a.node_id);
        } else {
          EXPECT_NE(redo.bundle_nodes[a.bundle_index], dead);
        }
      }
      CheckPlaced(world.snap(), again, redo);
      if (HasFailure()) return;
      world.Commit(victim_pg, again.bundles, redo, /*replace=*/true);
      ASSERT_TRUE(world.snap().CheckNotOverCommitted().ok());
    }
  }
  EXPECT_GT(replaced, 100);
  std::printf("re-placed %d PGs\n", replaced);
}

TEST(SolverPropertyTest, RandomClustersAndRequests) {
  int placed = 0, unschedulable = 0, infeasible = 0, exhaustive = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    World world(seed);
    for (int step = 0; step < kStepsPerSeed; ++step) {
      SCOPED_TRACE(absl::StrCat("seed ", seed, " step ", step));
      if (world.rng()() % 5 == 0) world.ReleaseRandom();
      const PlacementRequest r = world.RandomRequest();
      const Decision d = Solve(world.snap(), r);
      // Same answer, diagnosis included, from a shuffled rebuild.
      ASSERT_EQ(Solve(*world.Shuffled(), r), d) << d.diagnosis.summary;

      const int exists = ExistsPlacement(world.snap(), r);
      if (exists >= 0) {
        ++exhaustive;
        EXPECT_EQ(d.outcome == Decision::kPlaced, exists == 1)
            << d.diagnosis.summary;
      }
      if (d.outcome == Decision::kInfeasible) {
        ++infeasible;
        EXPECT_NE(Solve(*world.Pristine(), r).outcome, Decision::kPlaced)
            << "infeasible, yet fits an empty cluster: " << d.diagnosis.summary;
        continue;
      }
      if (d.outcome == Decision::kUnschedulable) {
        ++unschedulable;
        EXPECT_FALSE(d.diagnosis.summary.empty());
        continue;
      }
      ++placed;
      CheckPlaced(world.snap(), r, d);
      if (HasFailure()) return;
      const std::string pg = absl::StrCat("pg", seed, "-", step);
      world.Commit(pg, World::PlacedBundles(r, d), d);
      if (!r.slice.has_value() && d.fallback_index < 0)
        world.RememberGeneric(pg, r);
      ASSERT_TRUE(world.snap().CheckNotOverCommitted().ok());
    }
  }
  // The generator exercises every outcome.
  EXPECT_GT(placed, 1000);
  EXPECT_GT(unschedulable, 200);
  EXPECT_GT(infeasible, 200);
  EXPECT_GT(exhaustive, 500);
  std::printf(
      "placed %d, unschedulable %d, infeasible %d, exhaustive checks %d\n",
      placed, unschedulable, infeasible, exhaustive);
}

}  // namespace
}  // namespace sliced::scheduler
