// The RocksDB store on a full disk: a small tmpfs is filled, commits fail
// Unavailable without killing the process, and once space is freed commits
// succeed again; what was acknowledged survives a reopen, what failed is not
// there. Needs mount(2) (root, as in CI); skips with a message where mounting
// is not permitted.
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "storage/records.h"
#include "storage/store.h"

namespace sliced::storage {
namespace {

namespace fs = std::filesystem;

// A tmpfs of `size` mounted on a new directory under /tmp; unmounted and
// removed by the destructor.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(const std::string& size) {
    char tmpl[] = "/tmp/sliced-disk-full-XXXXXX";
    path_ = mkdtemp(tmpl);
    const std::string data = "size=" + size;
    if (mount("tmpfs", path_.c_str(), "tmpfs", 0, data.c_str()) != 0) {
      error_ = std::strerror(errno);
    }
  }
  ~SmallTmpfs() {
    if (error_.empty()) umount2(path_.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  bool mounted() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string error_;
};

// Writes `path` until the file system is full.
void FillDisk(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << std::strerror(errno);
  const std::string block(4096, 'f');
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) {
  }
  std::fclose(f);
}

// One node record of about 16 KB (a large label), so a commit never fits in
// the WAL's last partly written page.
Mutation PutBigNode(const std::string& id) {
  scheduler::Node n;
  n.node_id = id;
  n.address = id + ".local";
  n.labels = {{"example.com/padding", std::string(16 << 10, 'p')}};
  n.resources = {{"CPU", 40000}};
  Mutation m;
  m.PutNode(n);
  return m;
}

std::set<std::string> NodeIds(Store& store) {
  absl::StatusOr<StoredState> state = store.Load();
  EXPECT_TRUE(state.ok()) << state.status();
  std::set<std::string> ids;
  if (state.ok()) {
    for (const scheduler::Node& n : state->nodes) ids.insert(n.node_id);
  }
  return ids;
}

TEST(RocksDbDiskFullTest, FailsUnavailableThenRecoversWhenSpaceIsFreed) {
  SmallTmpfs disk("4m");
  if (!disk.mounted()) {
    GTEST_SKIP() << "mounting a tmpfs is not permitted here (" << disk.error()
                 << "); the disk-full test needs root";
  }
  const std::string db_path = disk.path() + "/db";
  const std::string filler = disk.path() + "/filler";
  std::set<std::string> acknowledged;
  {
    auto store = OpenRocksDbStore({.path = db_path});
    ASSERT_TRUE(store.ok()) << store.status();
    for (std::string id : {"before-0", "before-1"}) {
      ASSERT_TRUE((*store)->Commit(PutBigNode(id)).ok());
      acknowledged.insert(id);
    }

    FillDisk(filler);
    // The disk is full: commits fail Unavailable, again and again. Nor can
    // the store be read: a failed write is read back only by a reopen (what
    // a restart would read), which needs the space.
    for (int i = 0; i < 3; ++i) {
      absl::Status s = (*store)->Commit(PutBigNode("full-" + std::to_string(i)));
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    }
    EXPECT_EQ((*store)->Load().status().code(), absl::StatusCode::kUnavailable);

    // Space is back: the next commits succeed.
    fs::remove(filler);
    for (std::string id : {"after-0", "after-1", "after-2"}) {
      absl::Status s = (*store)->Commit(PutBigNode(id));
      ASSERT_TRUE(s.ok()) << id << ": " << s;
      acknowledged.insert(id);
    }
    EXPECT_EQ(NodeIds(**store), acknowledged);

    // A second episode on the same store instance.
    FillDisk(filler);
    EXPECT_EQ((*store)->Commit(PutBigNode("full-again")).code(),
              absl::StatusCode::kUnavailable);
    fs::remove(filler);
    ASSERT_TRUE((*store)->Commit(PutBigNode("after-again")).ok());
    acknowledged.insert("after-again");
  }

  auto reopened = OpenRocksDbStore({.path = db_path});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(NodeIds(**reopened), acknowledged);
}

}  // namespace
}  // namespace sliced::storage
