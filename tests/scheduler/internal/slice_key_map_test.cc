// The per-key slice maps (SliceKeyMap): a std::map model under random puts,
// with copies taken as a snapshot writer takes them (a copy must not see
// later puts to the map it was copied from, nor the other way round);
// iteration skips keys whose value went empty, in key order, from any lower
// bound.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/internal/resources.h"
#include "scheduler/internal/snapshot_state.h"

namespace sliced::scheduler::internal {
namespace {

using Model = std::map<SliceKey, std::vector<bool>>;  // non-empty sets only

SliceKey Key(int i) {
  return SliceKey{i % 2 == 0 ? TpuGeneration::kV6e : TpuGeneration::kV5p,
                  i % 3 == 0 ? "4x4" : "2x2x4", "tier" + std::to_string(i % 4),
                  "zone" + std::to_string(i / 4)};
}

void ExpectMatches(const SliceSets& index, const Model& model) {
  auto want = model.begin();
  for (const auto& [key, set] : index) {
    ASSERT_NE(want, model.end()) << "extra key " << key.topology;
    EXPECT_EQ(key, want->first);
    int64_t count = 0;
    for (size_t s = 0; s < want->second.size(); ++s) {
      EXPECT_EQ(set->Test(s), want->second[s]) << s;
      count += want->second[s];
    }
    EXPECT_EQ(set->count(), count);
    ++want;
  }
  EXPECT_EQ(want, model.end());
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(index.contains(Key(i)), model.contains(Key(i))) << i;
    auto it = index.lower_bound(Key(i));
    auto mit = model.lower_bound(Key(i));
    if (mit == model.end()) {
      EXPECT_TRUE(it == index.end());
    } else {
      ASSERT_TRUE(it != index.end());
      EXPECT_EQ(it->first, mit->first);
    }
  }
}

TEST(SliceKeyMapTest, MatchesAMapUnderRandomPutsAndCopies) {
  // Few slices per key, so that sets go empty (and come back) often.
  constexpr size_t kSlices = 5;
  std::mt19937 rng(7);
  SliceSets index;
  Model model;
  std::vector<std::pair<SliceSets, Model>> copies;
  for (int step = 0; step < 3000; ++step) {
    const SliceKey key = Key(rng() % 40);
    const size_t slice = rng() % kSlices;
    const bool present = rng() % 2 != 0;
    const CowBitset* current = index.Find(key);
    auto set = current == nullptr ? std::make_shared<CowBitset>(kSlices)
                                  : std::make_shared<CowBitset>(*current);
    set->Set(slice, present);
    index.Put(key, std::move(set));
    std::vector<bool>& bits = model[key];
    bits.resize(kSlices);
    bits[slice] = present;
    if (std::none_of(bits.begin(), bits.end(), [](bool b) { return b; })) {
      model.erase(key);
    }
    if (step % 97 == 0) copies.emplace_back(index, model);
    if (step % 500 == 0) ExpectMatches(index, model);
  }
  ExpectMatches(index, model);
  for (const auto& [copy, copied_model] : copies) {
    ExpectMatches(copy, copied_model);
  }
}

TEST(SliceKeyMapTest, ACopyWrittenLeavesTheOriginalAlone) {
  SliceSets a;
  auto set = std::make_shared<CowBitset>(8);
  set->Set(3, true);
  a.Put(Key(0), set);
  SliceSets b = a;
  b.Put(Key(0), nullptr);  // taken in b
  b.Put(Key(1), set);      // a new key in b
  EXPECT_TRUE(a.contains(Key(0)));
  EXPECT_FALSE(a.contains(Key(1)));
  EXPECT_FALSE(b.contains(Key(0)));
  EXPECT_TRUE(b.contains(Key(1)));
  std::vector<SliceKey> keys;
  for (const auto& [key, s] : b) keys.push_back(key);
  EXPECT_EQ(keys, std::vector<SliceKey>{Key(1)});
  // Renumbering every set (what adding slices does) in the copy only.
  b.ForEachMutable([](std::shared_ptr<const CowBitset>& s) {
    auto grown = std::make_shared<CowBitset>(16);
    grown->Set(15, true);
    s = grown;
  });
  EXPECT_EQ(b.Find(Key(1))->bits(), 16u);
  EXPECT_EQ(a.Find(Key(0))->bits(), 8u);
  EXPECT_TRUE(a.Find(Key(0))->Test(3));
}

TEST(SliceKeyMapTest, NonBitsetValuesAreEmptyOnlyWhenNull) {
  SliceKeyMap<std::shared_ptr<const ResourceSet>> least;
  least.Put(Key(0), std::make_shared<const ResourceSet>());  // kept: not null
  least.Put(Key(1), std::make_shared<const ResourceSet>(
                        ResourceSet{{"TPU", 4 * kResourceScale}}));
  least.Put(Key(2), nullptr);
  ASSERT_NE(least.Find(Key(0)), nullptr);
  EXPECT_TRUE(least.Find(Key(0))->empty());
  EXPECT_EQ(Amount(*least.Find(Key(1)), "TPU"), 4 * kResourceScale);
  EXPECT_FALSE(least.contains(Key(2)));
  std::vector<SliceKey> keys;
  for (const auto& [key, value] : least) keys.push_back(key);
  std::vector<SliceKey> want = {Key(0), Key(1)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(keys, want);
}

}  // namespace
}  // namespace sliced::scheduler::internal
