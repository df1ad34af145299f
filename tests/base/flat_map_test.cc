#include "base/flat_map.h"

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace sliced {
namespace {

using Map = FlatMap<std::string, int>;

std::vector<std::pair<std::string, int>> Entries(const Map& m) {
  return {m.begin(), m.end()};
}

TEST(FlatMapTest, KeepsKeysSortedAndFirstEntryWins) {
  Map m{{"b", 1}, {"a", 2}, {"b", 3}, {"c", 4}};
  EXPECT_EQ(Entries(m), (std::vector<std::pair<std::string, int>>{
                            {"a", 2}, {"b", 1}, {"c", 4}}));
  // insert and emplace keep an entry; insert_or_assign and [] replace it.
  EXPECT_FALSE(m.insert({"a", 9}).second);
  EXPECT_FALSE(m.emplace("c", 9).second);
  EXPECT_EQ(m.at("a"), 2);
  EXPECT_FALSE(m.insert_or_assign("a", 7).second);
  m["d"] = 5;
  EXPECT_EQ(Entries(m), (std::vector<std::pair<std::string, int>>{
                            {"a", 7}, {"b", 1}, {"c", 4}, {"d", 5}}));
  // A range insert: existing keys win, then the first new one.
  std::vector<std::pair<std::string, int>> more = {
      {"e", 1}, {"a", 0}, {"0", 3}, {"e", 2}};
  m.insert(more.begin(), more.end());
  EXPECT_EQ(Entries(m),
            (std::vector<std::pair<std::string, int>>{
                {"0", 3}, {"a", 7}, {"b", 1}, {"c", 4}, {"d", 5}, {"e", 1}}));
}

TEST(FlatMapTest, LooksUpByStringView) {
  Map m{{"ray.io/node-id", 1}, {"ray.io/tpu-worker-id", 2}};
  const absl::string_view key = "ray.io/tpu-worker-id";
  ASSERT_NE(m.find(key), m.end());
  EXPECT_EQ(m.find(key)->second, 2);
  EXPECT_TRUE(m.contains(key));
  EXPECT_EQ(m.count(absl::string_view("x")), 0u);
  EXPECT_EQ(m.find(absl::string_view("ray.io/node")), m.end());
  m[key] = 3;
  EXPECT_EQ(m.at(key), 3);
  EXPECT_EQ(m.erase(key), 1u);
  EXPECT_EQ(m.erase(key), 0u);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_THROW(m.at(key), std::out_of_range);
}

TEST(FlatMapTest, EraseIfAndCompare) {
  Map m{{"a", 0}, {"b", 1}, {"c", 0}};
  EXPECT_EQ(erase_if(m, [](const auto& e) { return e.second == 0; }), 1u + 1u);
  EXPECT_EQ(m, (Map{{"b", 1}}));
  EXPECT_FALSE(m == (Map{{"b", 2}}));
  auto next = m.erase(m.begin());
  EXPECT_TRUE(next == m.end());
  EXPECT_TRUE(m.empty());
}

// A large range (a request's map before validation) is sorted, not
// inserted one by one; the first entry of each key still wins.
TEST(FlatMapTest, LargeRangeKeepsFirstEntryPerKey) {
  std::vector<std::pair<std::string, int>> entries;
  for (int i = 0; i < 20000; ++i) {
    entries.emplace_back(absl::StrCat("k", (i * 7919) % 10000), i);
  }
  Map m(entries.begin(), entries.end());
  std::map<std::string, int> ref;
  ref.insert(entries.begin(), entries.end());
  EXPECT_EQ(Entries(m),
            (std::vector<std::pair<std::string, int>>(ref.begin(), ref.end())));
}

// Same answers as std::map over a random sequence of operations.
TEST(FlatMapTest, FromUnsortedKeepsTheLastEntryPerKey) {
  EXPECT_TRUE(Map::FromUnsorted({}).empty());
  EXPECT_EQ(Entries(Map::FromUnsorted({{"b", 1}, {"a", 2}, {"b", 3}, {"c", 4}})),
            (std::vector<std::pair<std::string, int>>{{"a", 2}, {"b", 3}, {"c", 4}}));
  // Past the insertion sort's size, against a std::map filled in order.
  std::mt19937 rng(3);
  for (int n : {16, 17, 200}) {
    std::vector<std::pair<std::string, int>> entries;
    std::map<std::string, int> want;
    for (int i = 0; i < n; ++i) {
      std::string key = absl::StrCat("k", rng() % (n / 2));
      entries.emplace_back(key, i);
      want[key] = i;
    }
    Map m = Map::FromUnsorted(entries);
    EXPECT_EQ(Entries(m), (std::vector<std::pair<std::string, int>>(
                              want.begin(), want.end())))
        << n;
    EXPECT_EQ(m.at(entries.back().first), n - 1);
  }
}

TEST(FlatMapTest, BehavesLikeStdMap) {
  std::mt19937 rng(7);
  Map flat;
  std::map<std::string, int> ref;
  for (int step = 0; step < 5000; ++step) {
    const std::string key = absl::StrCat("k", rng() % 40);
    const int value = static_cast<int>(rng() % 100);
    switch (rng() % 5) {
      case 0:
        EXPECT_EQ(flat.insert({key, value}).second,
                  ref.insert({key, value}).second);
        break;
      case 1:
        flat[key] = value;
        ref[key] = value;
        break;
      case 2:
        EXPECT_EQ(flat.erase(key), ref.erase(key));
        break;
      case 3: {
        std::vector<std::pair<std::string, int>> batch;
        for (int i = 0; i < 5; ++i) {
          batch.emplace_back(absl::StrCat("k", rng() % 40), i);
        }
        flat.insert(batch.begin(), batch.end());
        ref.insert(batch.begin(), batch.end());
        break;
      }
      default:
        EXPECT_EQ(flat.contains(key), ref.count(key) == 1);
    }
    ASSERT_EQ(Entries(flat), (std::vector<std::pair<std::string, int>>(
                                 ref.begin(), ref.end())))
        << "step " << step;
  }
}

}  // namespace
}  // namespace sliced
