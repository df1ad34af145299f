// The copy-on-write containers behind snapshots: CowArray against a vector
// with copies taken as a snapshot writer takes them; CowMap against std::map
// under random edits (enough values to split chunks many times), with
// copies that must not see later edits; CowBitset::Renumbered against a
// plain renumbering; CowSortedSet against std::set, flat and in chunks;
// CowPtrArray's splices against a vector.
#include "scheduler/internal/cow.h"

#include <algorithm>
#include <bit>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace sliced::scheduler::internal {
namespace {

std::map<std::string, int> Contents(const CowMap<int>& m) {
  std::map<std::string, int> out;
  std::string last;
  bool first = true;
  for (const auto& [k, v] : m) {
    EXPECT_TRUE(first || last < k) << "out of order at " << k;
    first = false;
    last = k;
    out[k] = v;
  }
  return out;
}

TEST(CowMapTest, MatchesStdMapUnderRandomEditsAndCopiesStayPut) {
  std::mt19937 rng(3);
  CowMap<int> m;
  std::map<std::string, int> want;
  std::vector<std::pair<CowMap<int>, std::map<std::string, int>>> copies;
  for (int step = 0; step < 20000; ++step) {
    const std::string key = absl::StrCat("k", rng() % 3000);
    if (rng() % 4 == 0) {
      m.Erase(key);
      want.erase(key);
    } else {
      m.Set(key, step);
      want[key] = step;
    }
    if (step % 2500 == 0) {
      // As a snapshot writer does: the copied map is published and never
      // written again; editing goes on in a fresh copy of it.
      copies.emplace_back(m, want);
      m = copies.back().first;
    }
  }
  EXPECT_EQ(m.size(), want.size());
  EXPECT_EQ(Contents(m), want);
  for (const auto& [key, value] : want) {
    auto it = m.find(key);
    ASSERT_NE(it, m.end()) << key;
    EXPECT_EQ(it->second, value);
  }
  EXPECT_EQ(m.find("absent"), m.end());
  EXPECT_EQ(m.find(""), m.end());
  EXPECT_FALSE(m.contains("zzz"));
  for (auto& [copy, then] : copies) {
    EXPECT_EQ(copy.size(), then.size());
    EXPECT_EQ(Contents(copy), then);
  }
  // Editing a copy leaves the original alone.
  CowMap<int> copy = m;
  copy.Set("a-new-first-key", 1);
  copy.Erase(want.begin()->first);
  EXPECT_EQ(Contents(m), want);
  EXPECT_TRUE(copy.contains("a-new-first-key"));
}

TEST(CowMapTest, FromSortedMatchesSetAndTakesEdits) {
  for (int n : {0, 1, 255, 256, 257, 1000}) {
    std::vector<std::pair<std::string, int>> items;
    std::map<std::string, int> want;
    for (int i = 0; i < n; ++i) {
      std::string key = absl::StrFormat("k%06d", i);
      items.emplace_back(key, i);
      want[key] = i;
    }
    const CowMap<int> built = CowMap<int>::FromSorted(items);
    EXPECT_EQ(built.size(), static_cast<size_t>(n));
    EXPECT_EQ(Contents(built), want) << n;
    if (n == 0) continue;
    EXPECT_EQ(built.find(items.back().first)->second, n - 1);
    // Edited itself (it owns its chunks) and through a copy, which leaves
    // it alone: before the first key, inside and between the chunks.
    auto edit = [n](CowMap<int>& m) {
      m.Set("a", -1);
      m.Set(absl::StrFormat("k%06d", n / 2), -2);
      m.Erase("k000000");
      for (int i = 0; i < 600; ++i) m.Set(absl::StrFormat("k%06dx", i % n), i);
    };
    std::map<std::string, int> edited = want;
    edited["a"] = -1;
    edited[absl::StrFormat("k%06d", n / 2)] = -2;
    edited.erase("k000000");
    for (int i = 0; i < 600; ++i) edited[absl::StrFormat("k%06dx", i % n)] = i;
    CowMap<int> own = CowMap<int>::FromSorted(items);
    edit(own);
    EXPECT_EQ(Contents(own), edited) << n;
    CowMap<int> copy = built;
    edit(copy);
    EXPECT_EQ(Contents(copy), edited) << n;
    EXPECT_EQ(Contents(built), want) << n;
  }
}

TEST(CowMapTest, EmptiedAndRefilled) {
  CowMap<int> m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.begin(), m.end());
  for (int i = 0; i < 2000; ++i) m.Set(absl::StrCat("v", i), i);
  for (int i = 0; i < 2000; ++i) m.Erase(absl::StrCat("v", i));
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.begin(), m.end());
  m.Set("b", 2);
  m.Set("a", 1);  // smaller than the only chunk's first key
  EXPECT_EQ((Contents(m)), (std::map<std::string, int>{{"a", 1}, {"b", 2}}));
}

TEST(CowBitsetTest, RenumberedMatchesAPlainRenumbering) {
  std::mt19937 rng(5);
  for (int round = 0; round < 50; ++round) {
    size_t n = 1 + rng() % 10000;
    CowBitset bits(n);
    std::vector<bool> plain(n);
    // Every fifth round starts empty (the bitset only changes size).
    for (size_t i = 0; i < n && round % 5 != 4; ++i) {
      if (rng() % 3 == 0) {
        bits.Set(i, true);
        plain[i] = true;
      }
    }
    // Twice: the second renumbers the first's result, which may have
    // shrunk (stale words past its end must not come back).
    for (int stage = 0; stage < 2; ++stage) {
      // Remove some indexes and insert some items, keeping order. Every
      // other round moves rarely, so that runs of moved bits span many
      // words; some rounds insert at the end.
      const uint32_t every = round % 2 == 0 ? 50 : 3000;
      std::vector<uint32_t> removed, insert_before;
      std::vector<int64_t> old_to_new(n, -1), source;  // plain
      for (size_t i = 0; i <= n; ++i) {
        if (rng() % every == 0 || (i == n && round % 3 == stage)) {
          for (uint32_t k = 1 + rng() % (stage == 0 ? 3 : 200); k > 0; --k) {
            source.push_back(-1 - static_cast<int64_t>(insert_before.size()));
            insert_before.push_back(static_cast<uint32_t>(i));
          }
        }
        if (i == n) break;
        if (rng() % every == 0 || (stage == 0 && i > n / 2 && round % 4 == 0)) {
          removed.push_back(static_cast<uint32_t>(i));
          continue;
        }
        old_to_new[i] = static_cast<int64_t>(source.size());
        source.push_back(static_cast<int64_t>(i));
      }
      const Renumbering r(n, removed, insert_before);
      const size_t bits2 = source.size();
      ASSERT_EQ(r.bits(), bits2);
      ASSERT_EQ(r.changed(), !removed.empty() || !insert_before.empty());
      size_t first_moved = n;
      for (size_t i = 0; i < n && first_moved == n; ++i) {
        if (old_to_new[i] != static_cast<int64_t>(i)) first_moved = i;
      }
      ASSERT_EQ(r.first_moved(), first_moved) << "round " << round;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(r.NewIndex(i), old_to_new[i]);
      for (size_t p = 0; p < bits2; ++p) {
        ASSERT_EQ(r.SourceOf(p), source[p]) << "round " << round << " p " << p;
        if (source[p] < 0) {
          ASSERT_EQ(r.inserted()[-1 - source[p]], p);
        }
      }
      CowBitset out = bits.Renumbered(r);
      std::vector<bool> want(bits2);
      int64_t count = 0;
      for (size_t i = 0; i < n; ++i) {
        if (plain[i] && old_to_new[i] >= 0) {
          want[old_to_new[i]] = true;
          ++count;
        }
      }
      ASSERT_EQ(out.bits(), bits2);
      EXPECT_EQ(out.count(), count);
      for (size_t i = 0; i < bits2; ++i) {
        ASSERT_EQ(out.Test(i), want[i])
            << "round " << round << " stage " << stage << " bit " << i;
      }
      // The source is untouched.
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits.Test(i), plain[i]);
      bits = out;
      plain = want;
      n = bits2;
      if (n == 0) break;
    }
  }
}

// As many items come as go (nodes moved to gaps nearby): what moves lies in
// [first_moved, end_moved), and a bitset's bits from end_moved on keep
// their places.
TEST(CowBitsetTest, RenumberedWithinAMovedRange) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 5000;
    CowBitset bits(n);
    std::vector<bool> plain(n);
    for (size_t i = 0; i < n; ++i) {
      if (rng() % 2 == 0) {
        bits.Set(i, true);
        plain[i] = true;
      }
    }
    // k distinct removed indexes and k insertion points, all in a window.
    const size_t lo = rng() % n;
    const size_t hi = std::min(n, lo + 1 + rng() % 300);
    std::vector<uint32_t> window;
    for (size_t i = lo; i < hi; ++i) window.push_back(static_cast<uint32_t>(i));
    std::shuffle(window.begin(), window.end(), rng);
    const size_t k = 1 + rng() % std::min<size_t>(4, window.size());
    std::vector<uint32_t> removed(window.begin(), window.begin() + k);
    std::sort(removed.begin(), removed.end());
    std::vector<uint32_t> insert_before;
    for (size_t j = 0; j < k; ++j) {
      insert_before.push_back(
          static_cast<uint32_t>(lo + rng() % (hi - lo + 1)));
    }
    std::sort(insert_before.begin(), insert_before.end());
    std::vector<int64_t> old_to_new(n, -1);
    std::vector<int64_t> source;
    for (size_t i = 0, a = 0, r = 0; i <= n; ++i) {
      while (a < k && insert_before[a] == i) {
        source.push_back(-1);
        ++a;
      }
      if (i == n) break;
      if (r < k && removed[r] == i) {
        ++r;
        continue;
      }
      old_to_new[i] = static_cast<int64_t>(source.size());
      source.push_back(static_cast<int64_t>(i));
    }
    const Renumbering r(n, removed, insert_before);
    ASSERT_EQ(r.bits(), n);
    const size_t last_event =
        std::max<size_t>(removed.back() + 1, insert_before.back());
    ASSERT_EQ(r.end_moved(), std::min(last_event, n)) << "round " << round;
    for (size_t i = r.end_moved(); i < n; ++i) {
      ASSERT_EQ(old_to_new[i], static_cast<int64_t>(i)) << "round " << round;
    }
    const CowBitset out = bits.Renumbered(r);
    int64_t count = 0;
    for (size_t p = 0; p < n; ++p) {
      const bool want = source[p] >= 0 && plain[source[p]];
      count += want;
      ASSERT_EQ(out.Test(p), want) << "round " << round << " bit " << p;
    }
    EXPECT_EQ(out.count(), count);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits.Test(i), plain[i]);
  }
}

TEST(CowBitsetTest, AnEmptiedBitsetGrowsWithoutItsOldBits) {
  CowBitset bits(200);
  bits.Set(150, true);
  // Indexes 100..199 go: 100 bits in two words, none set (the words past
  // them may still hold the old ones).
  std::vector<uint32_t> removed;
  for (uint32_t i = 100; i < 200; ++i) removed.push_back(i);
  CowBitset shrunk = bits.Renumbered(Renumbering(200, removed, {}));
  ASSERT_EQ(shrunk.bits(), 100u);
  ASSERT_EQ(shrunk.count(), 0);
  CowBitset grown =
      shrunk.Renumbered(Renumbering(100, {}, std::vector<uint32_t>(100, 100)));
  ASSERT_EQ(grown.bits(), 200u);
  EXPECT_EQ(grown.count(), 0);
  EXPECT_EQ(grown.NextSet(0), 200u);
}

TEST(CowBitsetTest, WholeWordOperationsMatchWordByWord) {
  // CountAnd, CopyTo, AndInto and OrInto run a chunk (64 words) at a time:
  // over 3 chunks and a part, for every length up to the last word, against
  // word().
  std::mt19937_64 rng(17);
  const size_t n = 3 * 64 * 64 + 5 * 64 + 9;
  CowBitset bits(n);
  for (size_t i = 0; i < n; ++i) bits.Set(i, rng() % 3 == 0);
  CowBitset copy = bits;  // shared chunks read the same
  bits.Set(70, !bits.Test(70));
  const size_t num_words = bits.num_words();
  std::vector<uint64_t> mask(num_words);
  for (uint64_t& w : mask) w = rng();
  for (size_t words : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65},
                       size_t{128}, num_words - 1, num_words}) {
    int64_t want_count = 0;
    std::vector<uint64_t> want_and = mask, want_not = mask, want_or = mask;
    for (size_t w = 0; w < words; ++w) {
      want_count += std::popcount(bits.word(w) & mask[w]);
      want_and[w] &= bits.word(w);
      want_not[w] &= ~bits.word(w);
      want_or[w] |= bits.word(w);
    }
    EXPECT_EQ(bits.CountAnd(mask.data(), words), want_count) << words;
    std::vector<uint64_t> out = mask;
    bits.AndInto(out.data(), words, /*complement=*/false);
    EXPECT_EQ(out, want_and) << words;
    out = mask;
    bits.AndInto(out.data(), words, /*complement=*/true);
    EXPECT_EQ(out, want_not) << words;
    out = mask;
    bits.OrInto(out.data(), words);
    EXPECT_EQ(out, want_or) << words;
    out.assign(num_words, 0);
    copy.CopyTo(out.data(), words);
    for (size_t w = 0; w < num_words; ++w) {
      ASSERT_EQ(out[w], w < words ? copy.word(w) : 0) << words << " " << w;
    }
  }
  EXPECT_EQ(bits.CountAnd(std::vector<uint64_t>(num_words, ~uint64_t{0}).data(),
                          num_words),
            bits.count());
}

std::vector<uint32_t> Values(const CowSortedSet& s) {
  return std::vector<uint32_t>(s.begin(), s.end());
}

TEST(CowSortedSetTest, MatchesASetUnderRandomEditsAndOldSetsStayPut) {
  std::mt19937 rng(11);
  CowSortedSet set;
  std::set<uint32_t> want;
  std::vector<std::pair<CowSortedSet, std::vector<uint32_t>>> kept;
  bool was_chunked = false, flat_again = false;
  for (int step = 0; step < 3000; ++step) {
    // Mostly growing past a chunk (a zone's list), then shrinking back;
    // edits of 1 value (one node) and of hundreds (a batch).
    const bool grow = (step / 600) % 2 == 0;
    const size_t n = rng() % 8 == 0 ? 1 + rng() % 400 : 1 + rng() % 3;
    std::set<uint32_t> add, drop;
    for (size_t k = 0; k < n; ++k) {
      const uint32_t v = rng() % 5000;
      if (grow || want.empty()) {
        add.insert(v);  // some are in already
      } else {
        auto it = want.lower_bound(v);
        drop.insert(it == want.end() ? v : *it);  // some are not in
      }
    }
    if (!grow && rng() % 4 == 0) drop.insert(rng() % 5000);
    const CowSortedSet before = set;
    const std::vector<uint32_t> before_values = Values(before);
    set = set.Edited({add.begin(), add.end()}, {drop.begin(), drop.end()});
    for (uint32_t v : add) want.insert(v);
    for (uint32_t v : drop) want.erase(v);
    ASSERT_EQ(Values(set), std::vector<uint32_t>(want.begin(), want.end()))
        << "step " << step;
    ASSERT_EQ(set.size(), want.size());
    ASSERT_EQ(Values(before), before_values) << "step " << step;
    if (set.num_chunks() > 0) {
      was_chunked = true;
      // Drops leave no trail of tiny chunks: a chunk edited below a
      // quarter joins the one before it when they fit in one.
      EXPECT_LE(set.num_chunks(), 8 * set.size() / CowSortedSet::kChunk + 2)
          << "step " << step << ", " << set.size() << " values";
    } else {
      EXPECT_LE(set.size(), CowSortedSet::kChunk);
      flat_again = flat_again || was_chunked;
    }
    if (step % 100 == 0) kept.emplace_back(set, Values(set));
  }
  EXPECT_TRUE(was_chunked);
  EXPECT_TRUE(flat_again);
  for (const auto& [s, values] : kept) EXPECT_EQ(Values(s), values);
}

// A zone's list at 100k nodes: hundreds of chunks (more than one group of
// the chunk table), edited a node at a time and in batches, at either end
// and inside; every set kept must still hold what it held.
TEST(CowSortedSetTest, ManyChunksEditedOneValueAtATime) {
  std::mt19937 rng(5);
  std::vector<uint32_t> start;
  for (uint32_t v = 0; v < 300000; v += 2) start.push_back(v);
  CowSortedSet set = CowSortedSet::FromSorted(start);
  std::set<uint32_t> want(start.begin(), start.end());
  ASSERT_GT(set.num_chunks(), 256u);
  std::vector<std::pair<CowSortedSet, size_t>> kept;  // with its size
  std::vector<std::vector<uint32_t>> kept_values;
  for (int step = 0; step < 2000; ++step) {
    std::set<uint32_t> add, drop;
    const int n = step % 50 == 0 ? 300 : 1;
    for (int k = 0; k < n; ++k) {
      const uint32_t v =
          step % 7 == 0 ? (step % 2 == 0 ? 0 : 299999 + step) : rng() % 310000;
      (rng() % 2 == 0 ? add : drop).insert(v);
    }
    for (uint32_t v : add) drop.erase(v);
    set = set.Edited({add.begin(), add.end()}, {drop.begin(), drop.end()});
    for (uint32_t v : add) want.insert(v);
    for (uint32_t v : drop) want.erase(v);
    ASSERT_EQ(set.size(), want.size()) << "step " << step;
    if (step % 250 == 0) {
      ASSERT_EQ(Values(set), std::vector<uint32_t>(want.begin(), want.end()))
          << "step " << step;
      kept.emplace_back(set, set.size());
      kept_values.push_back(Values(set));
    }
  }
  EXPECT_EQ(Values(set), std::vector<uint32_t>(want.begin(), want.end()));
  for (size_t k = 0; k < kept.size(); ++k) {
    EXPECT_EQ(kept[k].first.size(), kept[k].second);
    EXPECT_EQ(Values(kept[k].first), kept_values[k]) << "kept " << k;
  }
}

TEST(CowSortedSetTest, FromSortedAndEmpty) {
  const CowSortedSet empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.begin(), empty.end());
  std::vector<uint32_t> big;
  for (uint32_t v = 0; v < 3 * CowSortedSet::kChunk + 7; ++v)
    big.push_back(2 * v);
  const CowSortedSet set = CowSortedSet::FromSorted(big);
  EXPECT_EQ(set.num_chunks(), 4u);
  EXPECT_EQ(Values(set), big);
  // Dropping every value leaves it empty, and flat.
  const CowSortedSet none = set.Edited({}, big);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.num_chunks(), 0u);
  EXPECT_EQ(none.begin(), none.end());
  // A value added below the first chunk's first, and past the last.
  const CowSortedSet ends =
      CowSortedSet::FromSorted({10, 20, 30}).Edited({1, 40}, {20});
  EXPECT_EQ(Values(ends), (std::vector<uint32_t>{1, 10, 30, 40}));
  const CowSortedSet chunked_ends = set.Edited({1, 1u << 30}, {0});
  EXPECT_EQ(*chunked_ends.begin(), 1u);
  EXPECT_EQ(chunked_ends.size(), set.size() + 1);
  EXPECT_EQ(Values(chunked_ends).back(), 1u << 30);
}

// Random writes, resizes and range copies against a vector, with copies
// taken as a snapshot writer takes them, for chunks of 2^kChunkShift items.
template <int kChunkShift>
void MatchesAVectorUnderRandomWrites() {
  std::mt19937 rng(7);
  CowArray<int, kChunkShift> a(100, -1);
  std::vector<int> want(100, -1);
  std::vector<std::pair<CowArray<int, kChunkShift>, std::vector<int>>> copies;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 500 == 0) {
      const size_t n = 1 + rng() % 300;
      a.Resize(n, step);
      const size_t old = want.size();
      want.resize(n);
      // Every grown item is the fill, in the old last chunk (which held
      // items from before a shrink) as in new ones.
      for (size_t i = old; i < n; ++i) want[i] = step;
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(a[i], want[i]) << "resized, " << i;
    } else if (step % 5 == 0) {
      // A range, often across chunks; some items keep their value.
      const size_t from = rng() % want.size();
      const size_t to = from + rng() % std::min<size_t>(40, want.size() - from);
      auto value = [&](size_t i) { return i % 3 == 0 ? want[i] : step; };
      a.MutableRange(from, to, value);
      for (size_t i = from; i < to; ++i) want[i] = value(i);
    } else if (step % 5 == 1) {
      // Items here and there through one Cursor, often in one chunk one
      // after another, sometimes in others and back.
      typename CowArray<int, kChunkShift>::Cursor out(a);
      for (int k = 0, n = static_cast<int>(rng() % 40); k < n; ++k) {
        const size_t i =
            rng() % 4 == 0 ? rng() % want.size() : (k * 3 + step) % want.size();
        out[i] = want[i] = step + k;
      }
    } else if (step % 5 == 2 && !copies.empty()) {
      // A range of a published copy, shifted; spans cross chunks on both
      // sides, and some are equal already.
      const auto& [src, then] = copies[rng() % copies.size()];
      const size_t n =
          rng() % std::min<size_t>(40, std::min(src.size(), want.size()));
      const size_t from = rng() % (src.size() - n + 1);
      const size_t to = rng() % (want.size() - n + 1);
      a.CopyRange(to, src, from, n);
      for (size_t k = 0; k < n; ++k) want[to + k] = then[from + k];
    } else {
      const size_t i = rng() % want.size();
      a.Mutable(i) = step;
      want[i] = step;
    }
    if (step % 1000 == 0) {
      // As a snapshot writer does: the copy is published and never written
      // again; writing goes on in a fresh copy of it.
      copies.emplace_back(a, want);
      a = copies.back().first;
    }
  }
  ASSERT_EQ(a.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(a[i], want[i]) << i;
  for (const auto& [copy, then] : copies) {
    ASSERT_EQ(copy.size(), then.size());
    for (size_t i = 0; i < then.size(); ++i) ASSERT_EQ(copy[i], then[i]) << i;
  }
}

TEST(CowArrayTest, MatchesAVectorUnderRandomWritesAndCopiesStayPut) {
  MatchesAVectorUnderRandomWrites<4>();  // chunks of 16, up to 19 of them
}

// Chunks of 2: up to 150 chunks, so resizes cross, add and drop whole groups
// of chunks (kGroupSize) and end inside one.
TEST(CowArrayTest, ManyGroupsOfChunksUnderRandomWrites) {
  static_assert(CowArray<int, 1>::kGroupSize * 2 * 4 < 300);
  MatchesAVectorUnderRandomWrites<1>();
}

TEST(CowArrayTest, ResizingWithinTheLastChunkBesideACopy) {
  CowArray<int, 2> a(6, 1);  // chunks of 4: [1 1 1 1] [1 1]
  a.Mutable(5) = 2;
  CowArray<int, 2> published = a;
  // Shrinking within the last chunk changes no chunk; growing again must
  // not bring back the 2 (the published copy still holds it).
  a.Resize(5);
  a.Resize(6, 3);
  EXPECT_EQ(a[5], 3);
  EXPECT_EQ(published[5], 2);
  // Growing over items that already are the fill, then writing one.
  CowArray<int, 2> b = published;
  b.Resize(4);
  b.Resize(5, 1);
  b.Mutable(0) = 7;
  EXPECT_EQ(b[4], 1);
  EXPECT_EQ(b[0], 7);
  EXPECT_EQ(published[0], 1);
  EXPECT_EQ(published.size(), 6u);
  EXPECT_EQ(published[5], 2);
}

// Items that own something (the node table's entries) are let go of when
// a shrink drops them, within the last chunk kept too, and a published copy
// keeps its own.
TEST(CowArrayTest, AShrinkFreesWhatItsItemsOwned) {
  CowArray<std::shared_ptr<const int>, 2> a(6);  // chunks of 4
  for (int i = 0; i < 6; ++i) a.Mutable(i) = std::make_shared<const int>(i);
  std::weak_ptr<const int> in_last_kept = a[1], in_dropped = a[5];
  CowArray<std::shared_ptr<const int>, 2> published = a;
  a.Resize(1);
  EXPECT_FALSE(in_last_kept.expired());  // the published copy holds it
  published = a;
  EXPECT_TRUE(in_last_kept.expired());
  EXPECT_TRUE(in_dropped.expired());
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(*a[0], 0);
  a.Resize(3);
  EXPECT_EQ(a[1], nullptr);
  EXPECT_EQ(a[2], nullptr);
}

TEST(CowArrayTest, WritingEitherSideOfACopyLeavesTheOtherAlone) {
  CowArray<int, 2> a(10, 1);
  CowArray<int, 2> published = a;
  a.Mutable(3) = 5;  // the array copied from owns nothing after the copy
  CowArray<int, 2> b = std::move(a);
  b.Mutable(4) = 6;
  EXPECT_EQ(b[3], 5);
  EXPECT_EQ(b[4], 6);
  EXPECT_EQ(published[3], 1);
  EXPECT_EQ(published[4], 1);
  EXPECT_EQ(a.size(), 0u);
  a.Resize(3, 9);
  EXPECT_EQ(a[2], 9);
  EXPECT_EQ(b[2], 1);
  CowArray<int, 2> c;
  c = std::move(b);
  c.Mutable(0) = 7;
  EXPECT_EQ(c[0], 7);
  EXPECT_EQ(published[0], 1);
  published.Mutable(5) = 8;
  EXPECT_EQ(published[5], 8);
  EXPECT_EQ(c[5], 1);
}

std::vector<int> Contents(const CowPtrArray<int>& a) {
  std::vector<int> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a[i]);
  return out;
}

// Random splices (inserting, erasing and replacing runs) into an array of
// up to ~700 pointers (three groups of its chunk table), with copies taken
// as a snapshot writer takes them; each copy keeps what it held, and a
// pointer let go of is freed.
TEST(CowPtrArrayTest, SplicesMatchAVectorAndCopiesStayPut) {
  std::mt19937 rng(9);
  CowPtrArray<int> a;
  std::vector<int> want;
  std::vector<std::pair<CowPtrArray<int>, std::vector<int>>> copies;
  int next = 0;
  for (int step = 0; step < 4000; ++step) {
    const size_t from = want.empty() ? 0 : rng() % (want.size() + 1);
    const size_t len = std::min<size_t>(want.size() - from, rng() % 4);
    const bool grow = want.size() < 700 && (step / 500) % 2 == 0;
    const size_t put = grow ? rng() % 5 : rng() % 3;
    std::vector<std::shared_ptr<const int>> with;
    for (size_t k = 0; k < put; ++k) {
      with.push_back(std::make_shared<const int>(next++));
    }
    std::vector<std::weak_ptr<const int>> gone;  // held by `a` alone
    for (size_t k = 0; k < len && copies.empty(); ++k) {
      gone.push_back(a.ptr(from + k));
    }
    a.Splice(from, from + len, with);
    for (const auto& g : gone) EXPECT_TRUE(g.expired()) << "step " << step;
    want.erase(want.begin() + static_cast<ptrdiff_t>(from),
               want.begin() + static_cast<ptrdiff_t>(from + len));
    std::vector<int> put_values;
    for (const auto& p : with) put_values.push_back(*p);
    want.insert(want.begin() + static_cast<ptrdiff_t>(from), put_values.begin(),
                put_values.end());
    ASSERT_EQ(Contents(a), want) << "step " << step;
    if (step % 400 == 399) {
      copies.emplace_back(a, want);
      a = copies.back().first;
      if (!want.empty()) a.Set(0, std::make_shared<const int>(-step));
      want[0] = -step;
    }
  }
  EXPECT_GT(copies.size(), 5u);
  for (const auto& [copy, then] : copies) EXPECT_EQ(Contents(copy), then);
}

}  // namespace
}  // namespace sliced::scheduler::internal
