// One conformance suite over every Store implementation, plus RocksDB-only
// tests (reopen, lock, schema).
#include "storage/store.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "scheduler/labels.h"
#include "storage/fault_injecting_store.h"
#include "storage/records.h"
#ifdef SLICED_WITH_ETCD
#include "storage/etcd/etcd_store.h"
#include "tests/storage/etcd_test_cluster.h"
#endif

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

scheduler::Node Node(const std::string& id, int64_t cpu = 40000) {
  scheduler::Node n;
  n.node_id = id;
  n.address = id + ".local";
  n.labels = {{"ray.io/availability-zone", "z1"}};
  n.resources = {{"CPU", cpu}};
  return n;
}

// A placement group that uses every field the store keeps.
server::PlacementGroup FullGroup() {
  server::PlacementGroup g;
  g.id = "pg-1";
  g.state = server::PgState::kCreated;
  auto selector = scheduler::ParseLabelSelector(
      {{"ray.io/availability-zone", "in(z1,z2)"}, {"tier", "!spot"}});
  g.request.bundles.push_back(
      scheduler::Bundle{{{"CPU", 20000}}, *selector, ""});
  g.request.strategy = scheduler::Strategy::kStrictSpread;
  g.request.slice = scheduler::SliceRequirement{scheduler::TpuGeneration::kV7x,
                                                "2x2x2",
                                                2,
                                                {{"TPU", 40000}},
                                                *selector,
                                                2,
                                                scheduler::Subslicing::kAllowed};
  g.request.fallbacks.push_back({scheduler::Bundle{{{"CPU", 10000}}, {}, ""}});
  g.request.topology = {
      {"ray.io/gpu-domain", scheduler::Strategy::kStrictPack, 2},
      {"ray.io/availability-zone", scheduler::Strategy::kSpread, 0}};
  g.bundles.push_back(server::PlacedBundle{{{"CPU", 10000}}, {}, "a"});
  g.slice_names = {"s1", "s2"};
  g.job_id = "job";
  g.name = "name";
  g.request_id = "req";
  g.compute_class = "cost-optimized";
  g.priority = 7;
  g.priority_index = 1;
  g.fallback_index = 0;
  g.reason = "";
  g.placement_note = "2 CPU-only bundle(s) on whole free TPU capacity";
  g.create_time = absl::FromUnixMillis(1000);
  g.update_time = absl::FromUnixMillis(2000);
  g.queued_time = absl::FromUnixMillis(1500);
  g.sequence = 42;
  g.scaling_config = server::ScalingConfig{
      4,        true,         false,        "2x2x2", "TPU-V7X",
      "SPREAD", {{"TPU", 4}}, {{"k", "v"}}, 2,      false};
  return g;
}

// Writes key=value into column family `family` of the closed database at
// `path`, as another program (or a future sliced) might; deletes the key
// when `value` is nullopt.
void RawPut(const std::string& path, const std::string& family,
            const std::string& key, std::optional<std::string> value) {
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
          (value ? db->Put(rocksdb::WriteOptions(), handles[i], key, *value)
                 : db->Delete(rocksdb::WriteOptions(), handles[i], key))
              .ok());
    }
  }
  for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  delete db;
}

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<Store>(const TempDir&)> open;
  // Non-empty: why this store can't run here (its tests skip).
  std::function<std::string()> unavailable = [] { return std::string(); };
};

class StoreConformanceTest : public testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    std::string why = GetParam().unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }
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
  m.PutPlacementGroup(FullGroup());
  server::ComputeClass cc{
      "cost-optimized",
      {*scheduler::ParseLabelSelector({{"sliced.io/capacity-tier", "spot"}})},
      server::WhenUnsatisfiable::kFail};
  m.PutComputeClass(cc);
  server::LogLine log{absl::FromUnixMillis(5000), server::LogSeverity::kError,
                      "hello", "a"};
  m.PutLog("a\x01", log);
  ASSERT_TRUE(store->Commit(m).ok());

  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->nodes.size(), 2u);
  EXPECT_EQ(state->nodes[0], Node("a"));  // sorted by key
  EXPECT_EQ(state->nodes[1], Node("b"));
  ASSERT_EQ(state->placement_groups.size(), 1u);
  EXPECT_EQ(state->placement_groups[0], FullGroup());
  ASSERT_EQ(state->compute_classes.size(), 1u);
  EXPECT_EQ(state->compute_classes[0], cc);
  ASSERT_EQ(state->logs.size(), 1u);
  EXPECT_EQ(state->logs[0].second, log);
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
  EXPECT_EQ(state->nodes[0].resources.at("CPU"), 20000);
}

TEST_P(StoreConformanceTest, CountersRoundTripAndTheLastWriteWins) {
  auto store = Open();
  EXPECT_EQ(store->Load()->next_pg_sequence, 0u);  // none written yet
  Mutation m;
  m.PutNextPgSequence(7);
  m.PutNextPgSequence(9);
  ASSERT_TRUE(store->Commit(m).ok());
  EXPECT_EQ(store->Load()->next_pg_sequence, 9u);
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

#ifdef SLICED_WITH_ETCD
// One etcd member for the whole suite (started on first use, killed at
// exit); each test gets its own key prefix, named after its temp dir.
EtcdTestCluster& SharedEtcd() {
  static std::unique_ptr<EtcdTestCluster> cluster = [] {
    auto started = EtcdTestCluster::Start();
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
      std::abort();
    }
    return std::move(started).value();
  }();
  return *cluster;
}

std::unique_ptr<Store> OpenEtcdForTest(const TempDir& dir) {
  auto client = EtcdClient::Create({.endpoints = SharedEtcd().endpoints()});
  EXPECT_TRUE(client.ok()) << client.status();
  auto store = OpenEtcdStore(*client, {.prefix = "/sliced" + dir.path("")});
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}
#endif

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreConformanceTest,
    testing::Values(
#ifdef SLICED_WITH_ETCD
                    StoreFactory{"Etcd", OpenEtcdForTest,
                                 EtcdTestCluster::Unavailable},
#endif
                    StoreFactory{"Memory",
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

// Each appended mutation is a unit of its own, whether it is copied in or
// moved in; a moved one is left empty, a copied one as it was.
TEST(MutationTest, AppendKeepsEachAppendedMutationAsAUnit) {
  Mutation first;
  first.PutNode(Node("a"));
  first.PutNode(Node("b"));
  Mutation second;
  second.PutNode(Node("c"));
  Mutation group;
  group.PutNextPgSequence(7);  // a unit of the group's own
  group.Append(first);
  group.Append(std::move(second));
  ASSERT_EQ(group.size(), 4u);
  EXPECT_EQ(group.UnitEnds(), (std::vector<size_t>{1, 3, 4}));
  EXPECT_EQ(group.writes()[1].key, first.writes()[0].key);
  Mutation c;
  c.PutNode(Node("c"));
  EXPECT_EQ(group.writes()[3].key, c.writes()[0].key);
  EXPECT_EQ(group.writes()[3].value, c.writes()[0].value);
  EXPECT_EQ(first.size(), 2u);
  EXPECT_TRUE(second.empty());
  EXPECT_TRUE(second.UnitEnds().empty());
  // Both round-trip through a store.
  MemoryStore store;
  ASSERT_TRUE(store.Commit(group).ok());
  auto state = store.Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->nodes.size(), 3u);
  EXPECT_EQ(state->next_pg_sequence, 7u);
}

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
  EXPECT_EQ(state->nodes[0].address, "a.local");
}

// Each open starts a new write-ahead log. RocksDB 7.8 deletes the previous
// one only after a memtable flush, so an open that wrote nothing (a daemon
// in a crash loop, or one restarted with nothing to write) left an empty
// log behind for good, and every later open read them all. Open flushes
// them away.
int WalFiles(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".log") ++n;
  }
  return n;
}

TEST(RocksDbStoreTest, OpensThatWriteNothingLeaveNoLogsBehind) {
  TempDir dir;
  for (int i = 0; i < 6; ++i) {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(WalFiles(dir.path()), 1) << "open " << i;
    if (i == 2) {  // a commit in between changes nothing
      Mutation m;
      m.PutNode(Node("a"));
      ASSERT_TRUE((*store)->Commit(m).ok());
    }
  }
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->nodes.size(), 1u);
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

TEST(RocksDbStoreTest, AFirstStartCutBeforeItsSchemaVersionStartsAnew) {
  // Killed between creating the database and writing its schema version:
  // nothing in it, so it is still new.
  TempDir dir;
  { ASSERT_TRUE(OpenRocksDbStore({.path = dir.path()}).ok()); }
  RawPut(dir.path(), "meta", "schema_version", std::nullopt);
  {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    Mutation m;
    m.PutNode(Node("n1"));
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  // Records without a schema version are another matter: refused.
  RawPut(dir.path(), "meta", "schema_version", std::nullopt);
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("without a sliced schema version"),
            std::string::npos)
      << store.status();
}

// A first open that failed (ENOSPC) or was killed before RocksDB wrote
// CURRENT left its info log, lock, manifest and options: nothing was
// stored, so the next start begins anew. (Every start refused the directory
// as not sliced's.) A write-ahead log (written only after CURRENT) is not
// that.
TEST(RocksDbStoreTest, AFirstOpenCutBeforeCurrentStartsAnew) {
  TempDir dir;
  fs::create_directories(dir.path());
  for (const char* name : {"LOG", "LOCK", "IDENTITY", "MANIFEST-000001",
                           "OPTIONS-000005", "000003.dbtmp"}) {
    std::ofstream(dir.path() + "/" + name) << "";
  }
  { std::ofstream(dir.path() + "/LOG") << "rocksdb info log lines\n"; }
  {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok()) << store.status();
    Mutation m;
    m.PutNode(Node("n1"));
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  auto reopened = OpenRocksDbStore({.path = dir.path()});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->Load()->nodes.size(), 1u);

  TempDir logged;
  fs::create_directories(logged.path());
  { std::ofstream(logged.path() + "/LOG") << ""; }
  { std::ofstream(logged.path() + "/000004.log") << "records"; }
  auto refused = OpenRocksDbStore({.path = logged.path()});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("holds no sliced database"),
            std::string::npos)
      << refused.status();
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

// A restart decodes in chunks on several threads: every record still comes
// back once, each table in key order, whatever thread decoded it.
TEST(RocksDbStoreTest, ManyRecordsLoadOnceInKeyOrder) {
  TempDir dir;
  constexpr int kNodes = 5000, kGroups = 3000;
  {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok());
    Mutation m;
    for (int i = kNodes - 1; i >= 0; --i) {
      m.PutNode(Node(absl::StrFormat("n%05d", i), i));
    }
    for (int i = 0; i < kGroups; ++i) {
      server::PlacementGroup g = FullGroup();
      g.id = absl::StrFormat("pg-%05d", i);
      g.sequence = i;
      m.PutPlacementGroup(g);
    }
    m.PutNextPgSequence(kGroups + 7);
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  auto store = OpenRocksDbStore({.path = dir.path()});
  ASSERT_TRUE(store.ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->nodes.size(), size_t{kNodes});
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(state->nodes[i].node_id, absl::StrFormat("n%05d", i));
    ASSERT_EQ(state->nodes[i].resources.at("CPU"), i);
  }
  ASSERT_EQ(state->placement_groups.size(), size_t{kGroups});
  for (int i = 0; i < kGroups; ++i) {
    ASSERT_EQ(state->placement_groups[i].id, absl::StrFormat("pg-%05d", i));
    ASSERT_EQ(state->placement_groups[i].sequence, uint64_t(i));
  }
  EXPECT_EQ(state->next_pg_sequence, uint64_t{kGroups + 7});
}

// Two bad records in different chunks: the error names the first in key
// order, however the chunks were shared out.
TEST(RocksDbStoreTest, FirstCorruptRecordInKeyOrderIsReported) {
  TempDir dir;
  {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok());
    Mutation m;
    for (int i = 0; i < 5000; ++i) m.PutNode(Node(absl::StrFormat("n%05d", i)));
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  RawPut(dir.path(), "nodes", "n03000x", std::string("\xff\xff\xff", 3));
  RawPut(dir.path(), "nodes", "n00100x", std::string("\xff\xff\xff", 3));
  for (int i = 0; i < 3; ++i) {
    auto store = OpenRocksDbStore({.path = dir.path()});
    ASSERT_TRUE(store.ok());
    auto state = (*store)->Load();
    ASSERT_FALSE(state.ok());
    EXPECT_EQ(state.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(state.status().message().find("nodes/n00100x"), std::string::npos)
        << state.status();
  }
}

}  // namespace
}  // namespace sliced::storage
