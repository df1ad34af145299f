// One conformance suite over every Store implementation, plus RocksDB-only
// tests (reopen, lock, schema).
#include "storage/store.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/fault_injecting_store.h"
#include "storage/records.h"

namespace sliced::storage {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sliced-store-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path(const std::string& sub = "db") const {
    return path_ + "/" + sub;
  }

 private:
  std::string path_;
};

NodeRecord Node(const std::string& id, int64_t cpu = 40000) {
  scheduler::Node n;
  n.node_id = id;
  n.address = id + ".local";
  n.labels = {{"ray.io/availability-zone", "z1"}};
  n.resources = {{"CPU", cpu}};
  return ToRecord(n);
}

// Writes key=value into column family `family` of the closed database at
// `path`, as another program (or a future sliced) might.
void RawPut(const std::string& path, const std::string& family,
            const std::string& key, const std::string& value) {
  rocksdb::DBOptions options;
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, path, &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const auto& n : names)
    families.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, path, families, &handles, &db).ok());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == family) {
      ASSERT_TRUE(
          db->Put(rocksdb::WriteOptions(), handles[i], key, value).ok());
    }
  }
  for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  delete db;
}

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<Store>(const TempDir&)> open;
};

class StoreConformanceTest : public testing::TestWithParam<StoreFactory> {
 protected:
  std::unique_ptr<Store> Open() { return GetParam().open(dir_); }
  TempDir dir_;
};

TEST_P(StoreConformanceTest, EmptyStoreLoadsNothing) {
  auto store = Open();
  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->nodes.empty());
  EXPECT_TRUE(state->placement_groups.empty());
}

TEST_P(StoreConformanceTest, CommitThenLoadRoundTripsEveryTable) {
  auto store = Open();
  Mutation m;
  m.PutNode(Node("b"));
  m.PutNode(Node("a"));
  PlacementGroupRecord pg;
  pg.set_placement_group_id("pg-1");
  pg.set_job_id("job");
  m.PutPlacementGroup(pg);
  ComputeClassRecord cc;
  cc.set_name("cost-optimized");
  m.PutComputeClass(cc);
  LogRecord log;
  log.set_text("hello");
  m.PutLog("a\x01", log);
  ASSERT_TRUE(store->Commit(m).ok());

  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->nodes.size(), 2u);
  EXPECT_EQ(state->nodes[0].node_id(), "a");  // sorted by key
  EXPECT_EQ(state->nodes[1].node_id(), "b");
  ASSERT_EQ(state->placement_groups.size(), 1u);
  EXPECT_EQ(state->placement_groups[0].job_id(), "job");
  ASSERT_EQ(state->compute_classes.size(), 1u);
  ASSERT_EQ(state->logs.size(), 1u);
  EXPECT_EQ(state->logs[0].second.text(), "hello");
}

TEST_P(StoreConformanceTest, LaterWritesInOneMutationWin) {
  auto store = Open();
  Mutation m;
  m.PutNode(Node("a", 10000));
  m.PutNode(Node("a", 20000));
  m.PutNode(Node("gone"));
  m.DeleteNode("gone");
  ASSERT_TRUE(store->Commit(m).ok());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->nodes.size(), 1u);
  EXPECT_EQ(state->nodes[0].resources().at("CPU"), 20000);
}

TEST_P(StoreConformanceTest, DeleteOfMissingKeyIsNoOp) {
  auto store = Open();
  Mutation m;
  m.DeleteNode("never");
  m.DeletePlacementGroup("never");
  EXPECT_TRUE(store->Commit(m).ok());
  EXPECT_TRUE(store->Commit(Mutation()).ok());
  EXPECT_TRUE(store->Load()->nodes.empty());
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreConformanceTest,
    testing::Values(StoreFactory{"Memory",
                                 [](const TempDir&) {
                                   return std::make_unique<MemoryStore>();
                                 }},
                    StoreFactory{"RocksDb",
                                 [](const TempDir& dir) {
                                   auto store =
                                       OpenRocksDbStore({.path = dir.path()});
                                   EXPECT_TRUE(store.ok()) << store.status();
                                   return std::move(store).value();
                                 }}),
    [](const testing::TestParamInfo<StoreFactory>& info) {
      return info.param.name;
    });

TEST(FaultInjectingStoreTest, WriteFailureAppliesNothingSyncFailureAppliesAll) {
  MemoryStore memory;
  FaultInjectingStore store(&memory);
  Mutation m;
  m.PutNode(Node("a"));
  store.FailWrites(1);
  EXPECT_EQ(store.Commit(m).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(memory.Load()->nodes.empty());
  store.FailSyncs(1);
  EXPECT_EQ(store.Commit(m).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(memory.Load()->nodes.size(),
            1u);  // written, though reported failed
  store.FailLoads(1);
  EXPECT_EQ(store.Load().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(store.Load().ok());
  EXPECT_TRUE(store.Commit(m).ok());
  EXPECT_EQ(store.commits(), 3);
}

TEST(RocksDbStoreTest, ReopenFindsCommittedRecords) {
  TempDir dir;
  {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    Mutation m;
    m.PutNode(Node("a"));
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->nodes.size(), 1u);
  EXPECT_EQ(state->nodes[0].address(), "a.local");
}

TEST(RocksDbStoreTest, SecondOpenWhileLockedIsRefused) {
  TempDir dir;
  auto first = OpenRocksDbStore({.path = dir.path()});
  ASSERT_TRUE(first.ok());
  auto second = OpenRocksDbStore({.path = dir.path()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("locked"), std::string::npos)
      << second.status();
}

TEST(RocksDbStoreTest, NewerSchemaIsRefused) {
  TempDir dir;
  { ASSERT_TRUE(OpenRocksDbStore({.path = dir.path()}).ok()); }
  RawPut(dir.path(), "meta", "schema_version", "99");  // a future sliced
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version 99"),
            std::string::npos)
      << store.status();
}

TEST(RocksDbStoreTest, ForeignDirectoryIsRefused) {
  TempDir dir;
  fs::create_directories(dir.path());
  { std::ofstream(dir.path() + "/notes.txt") << "not a database"; }
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("holds no sliced database"),
            std::string::npos);
}

TEST(RocksDbStoreTest, CorruptRecordIsDataLossNamingTheKey) {
  TempDir dir;
  {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok());
    Mutation m;
    m.PutNode(Node("good"));
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  RawPut(dir.path(), "nodes", "x", std::string("\xff\xff\xff", 3));
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_TRUE(store.ok());
  auto state = (*store)->Load();
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(state.status().message().find("nodes/x"), std::string::npos)
      << state.status();
}

}  // namespace
}  // namespace sliced::storage
