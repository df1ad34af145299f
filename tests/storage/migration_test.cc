// A data dir written by sliced at schema version 1 (before the store owned
// its enums and selectors) opens, is migrated once, and loads everything it
// held. testdata/schema_v1_datadir.tar.gz was made with the daemon at
// fd46a2f: the demo fleet (examples/fleet.json), cpu-2 drained, the
// cost-optimized class, five groups (SPREAD with an in() selector, a
// STRICT_PACK placed on its fallback, an INFEASIBLE one by class, a v6e 4x4
// ScalingConfig, a PENDING one waiting for that slice) and two log lines.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/container/btree_map.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "scheduler/labels.h"
#include "storage/store.h"

namespace sliced::storage {
namespace {

namespace fs = std::filesystem;

class MigrationTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sliced-migration-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    const std::string command = "tar -C " + dir_ + " -xzf " +
                                SLICED_TESTDATA_DIR +
                                "/schema_v1_datadir.tar.gz";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path() const { return dir_ + "/data"; }

  std::string SchemaVersion() {
    rocksdb::DB* db = nullptr;
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"meta", {}}};
    std::vector<std::string> names;
    EXPECT_TRUE(rocksdb::DB::ListColumnFamilies({}, path(), &names).ok());
    families.clear();
    for (const auto& n : names)
      families.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    EXPECT_TRUE(
        rocksdb::DB::OpenForReadOnly({}, path(), families, &handles, &db).ok());
    std::string value;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "meta") {
        EXPECT_TRUE(db->Get({}, handles[i], "schema_version", &value).ok());
      }
    }
    for (auto* h : handles) EXPECT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    delete db;
    return value;
  }

  std::string dir_;
};

const server::PlacementGroup* Find(const StoredState& s,
                                   const std::string& id) {
  for (const auto& g : s.placement_groups) {
    if (g.id == id) return &g;
  }
  return nullptr;
}

TEST_F(MigrationTest, OpensAVersionOneDataDirAndKeepsEverything) {
  EXPECT_EQ(SchemaVersion(), "1");
  auto store = OpenRocksDbStore({.path = path()});
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();

  ASSERT_EQ(state->nodes.size(), 9u);
  EXPECT_EQ(state->nodes[2].node_id, "cpu-2");
  EXPECT_EQ(state->nodes[2].state, scheduler::NodeState::kDraining);

  ASSERT_EQ(state->compute_classes.size(), 1u);
  const server::ComputeClass& cls = state->compute_classes[0];
  EXPECT_EQ(cls.name, "cost-optimized");
  ASSERT_EQ(cls.priorities.size(), 3u);
  EXPECT_EQ(cls.priorities[1],
            *scheduler::ParseLabelSelector(
                {{"sliced.io/capacity-tier", "flex-start"}}));
  EXPECT_EQ(cls.when_unsatisfiable, server::WhenUnsatisfiable::kWait);

  ASSERT_EQ(state->placement_groups.size(), 5u);
  const auto* spread = Find(*state, "pg-000000000001");
  ASSERT_NE(spread, nullptr);
  EXPECT_EQ(spread->state, server::PgState::kCreated);
  EXPECT_EQ(spread->request.strategy, scheduler::Strategy::kSpread);
  EXPECT_EQ(spread->request_id, "req-a");
  EXPECT_EQ(spread->priority, 3);
  ASSERT_EQ(spread->request.bundles.size(), 2u);
  EXPECT_EQ(spread->request.bundles[0].selector,
            *scheduler::ParseLabelSelector(
                {{"ray.io/availability-zone", "in(us-east5-b,us-east5-a)"}}));
  ASSERT_EQ(spread->bundles.size(), 2u);
  EXPECT_FALSE(spread->bundles[0].node_id.empty());

  const auto* fallback = Find(*state, "pg-000000000002");
  ASSERT_NE(fallback, nullptr);
  EXPECT_EQ(fallback->request.strategy, scheduler::Strategy::kStrictPack);
  EXPECT_EQ(fallback->fallback_index, 0);
  ASSERT_EQ(fallback->request.fallbacks.size(), 1u);
  EXPECT_EQ(
      fallback->request.fallbacks[0][0].selector,
      *scheduler::ParseLabelSelector({{"sliced.io/capacity-tier", "!spot"}}));

  const auto* infeasible = Find(*state, "pg-000000000003");
  ASSERT_NE(infeasible, nullptr);
  EXPECT_EQ(infeasible->state, server::PgState::kInfeasible);
  EXPECT_EQ(infeasible->compute_class, "cost-optimized");

  const auto* tpu = Find(*state, "pg-000000000004");
  ASSERT_NE(tpu, nullptr);
  EXPECT_EQ(tpu->state, server::PgState::kCreated);
  ASSERT_TRUE(tpu->request.slice.has_value());
  EXPECT_EQ(tpu->request.slice->generation, scheduler::TpuGeneration::kV6e);
  EXPECT_EQ(tpu->request.slice->topology, "4x4");
  EXPECT_EQ(tpu->slice_names, std::vector<std::string>{"v6e-a"});
  ASSERT_EQ(tpu->bundles.size(), 4u);
  EXPECT_EQ(tpu->bundles[3].node_id, "v6e-a-w3");
  ASSERT_TRUE(tpu->scaling_config.has_value());
  EXPECT_EQ(tpu->scaling_config->num_workers, 4);
  EXPECT_EQ(tpu->request_id, "tpu-1");

  const auto* pending = Find(*state, "pg-000000000005");
  ASSERT_NE(pending, nullptr);
  EXPECT_EQ(pending->state, server::PgState::kPending);
  EXPECT_TRUE(pending->bundles.empty());

  ASSERT_EQ(state->logs.size(), 2u);
  EXPECT_EQ(state->logs[0].second.severity, server::LogSeverity::kWarning);
  EXPECT_EQ(state->logs[0].second.time, absl::FromUnixSeconds(1790000000));
  EXPECT_EQ(state->logs[1].second.severity, server::LogSeverity::kInfo);
}

TEST_F(MigrationTest, MigratesOnceAndDurably) {
  {
    auto store = OpenRocksDbStore({.path = path()});
    ASSERT_TRUE(store.ok()) << store.status();
  }
  EXPECT_EQ(SchemaVersion(), std::to_string(kSchemaVersion));
  auto reopened = OpenRocksDbStore({.path = path()});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto state = (*reopened)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->placement_groups.size(), 5u);
}

}  // namespace
}  // namespace sliced::storage
