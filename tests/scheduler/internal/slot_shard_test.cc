// SlotShard: a name -> slot shard that keeps hashes, not names.
#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "scheduler/internal/snapshot_state.h"

namespace sliced::scheduler::internal {
namespace {

// Slot -> name, as a node or slice table is; a missing slot is free.
struct Names {
  std::map<uint32_t, std::string> by_slot;
  absl::string_view operator()(uint32_t slot) const {
    auto it = by_slot.find(slot);
    return it == by_slot.end() ? absl::string_view() : it->second;
  }
};

// Names whose hashes agree are told apart by the name in the table.
TEST(SlotShardTest, AHashSharedByTwoNamesFindsEachByItsName) {
  const Names names{{{1, "node-a"}, {7, "node-b"}}};
  SlotShard shard;
  const uint64_t same = 0x1234'5678'9abc'def0;
  shard.Add(same, 1);
  shard.Add(same, 7);
  EXPECT_EQ(shard.Find("node-a", same, names), 1);
  EXPECT_EQ(shard.Find("node-b", same, names), 7);
  EXPECT_EQ(shard.Find("node-c", same, names), -1);
  EXPECT_EQ(shard.Find("node-a", same ^ (uint64_t{1} << 40), names), -1)
      << "another hash is another name";
}

// Removing one slot leaves the others; a freed slot is never found.
TEST(SlotShardTest, RemoveDropsOneSlotOnly) {
  Names names{{{3, "x"}, {4, "y"}, {5, "z"}}};
  SlotShard shard;
  shard.Add(30, 3);
  shard.Add(40, 4);
  shard.Add(50, 5);
  shard.Remove(4);
  names.by_slot.erase(4);
  EXPECT_EQ(shard.size(), 2u);
  EXPECT_EQ(shard.Find("x", 30, names), 3);
  EXPECT_EQ(shard.Find("y", 40, names), -1);
  EXPECT_EQ(shard.Find("z", 50, names), 5);
  shard.Remove(9);  // not there: nothing changes
  EXPECT_EQ(shard.size(), 2u);
  // A slot taken again by another name answers to that name only.
  names.by_slot[4] = "w";
  shard.Add(41, 4);
  EXPECT_EQ(shard.Find("w", 41, names), 4);
  EXPECT_EQ(shard.Find("y", 40, names), -1);
}

}  // namespace
}  // namespace sliced::scheduler::internal
