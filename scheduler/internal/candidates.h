// Step 1 of a generic placement: candidate nodes. Turns a selector into a
// dense node bitset from the snapshot's label index, and walks it in rank
// order (the snapshot's rank bitsets, ALIVE nodes only) without ever looking
// at a node the selector rules out. Engine-internal: include only from
// scheduler/ (and its tests).
//
// Thread-safety: CandidateBits() is pure. A CandidateGroups belongs to one
// placement inside one Solve() call and is used on that call's thread only.
#ifndef SLICED_SCHEDULER_INTERNAL_CANDIDATES_H_
#define SLICED_SCHEDULER_INTERNAL_CANDIDATES_H_

#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "scheduler/types.h"

namespace sliced::scheduler::internal {

// Dense bitset over node indexes, local to one solve.
using Bits = std::vector<uint64_t>;

inline bool TestBit(const Bits& bits, uint32_t i) {
  return (bits[i >> 6] >> (i & 63)) & 1;
}
inline void SetBit(Bits& bits, uint32_t i) {
  bits[i >> 6] |= uint64_t{1} << (i & 63);
}

// Nodes whose labels satisfy `selector` (any state), from the label index;
// a term on a key of kBitsetLabelKeys (zone, tier, accelerator type) ORs its
// values' bitsets instead, O(n/64) whatever the values' sizes.
Bits CandidateBits(const SnapshotState& snap, const LabelSelector& selector);

// A position in a group's rank-ordered walk: rank, then node index.
struct Cursor {
  int rank = 0;
  size_t pos = 0;
};

// Bundles with the same effective selector, kind and resources share a
// candidate cursor: capacity only shrinks during a solve, so a node that does
// not fit one of them now never will for the next.
struct Group {
  // The selector's nodes; null for no selector: every node (the
  // snapshot's node_bits(), read in place instead of copied, O(n/64)).
  const Bits* candidates = nullptr;
  BundleKind kind = BundleKind::kCpuOnly;
  int rank_limit = kNumRanks;  // ranks at or above are never offered
  Cursor cursor;               // first candidate that may still fit
  size_t opened_pos = 0;       // PACK: gang nodes already ruled out
};

// A string-keyed table for the few keys of one placement: its entries are
// scanned while there are at most kScanKeys (and sit inline, allocating
// nothing), and hashed past that.
template <typename V>
class SmallKeyedTable {
 public:
  // Nullptr when absent; valid until the next Add().
  const V* Find(absl::string_view key) const {
    if (entries_.size() <= kScanKeys) {
      for (const auto& [k, v] : entries_) {
        if (k == key) return &v;
      }
      return nullptr;
    }
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  // REQUIRES: Find(key) is null.
  const V& Add(std::string key, V value) {
    entries_.emplace_back(std::move(key), std::move(value));
    if (entries_.size() > kScanKeys) {
      if (index_.empty()) {
        for (size_t i = 0; i < entries_.size(); ++i) {
          index_.emplace(entries_[i].first, i);
        }
      } else {
        index_.emplace(entries_.back().first, entries_.size() - 1);
      }
    }
    return entries_.back().second;
  }

 private:
  static constexpr size_t kScanKeys = 4;
  absl::InlinedVector<std::pair<std::string, V>, kScanKeys> entries_;
  absl::flat_hash_map<std::string, size_t> index_;  // key -> entry
};

// The candidate groups of one placement of a gang. Steps:
//   1. GroupFor(): one group per (selector, kind, resources); groups with the
//      same selector share one bitset, built once from the label index.
//   2. Next(): the next candidate of a group at or after a cursor, rank by
//      rank (lower first), node index (= node id) order within a rank.
class CandidateGroups {
 public:
  // CPU-only bundles are offered only nodes of rank < `cpu_rank_limit`
  // (kCpuRankNoFreeTpu keeps them off whole free TPU slices).
  // REQUIRES: `snap` outlives this object.
  explicit CandidateGroups(const SnapshotState& snap,
                           int cpu_rank_limit = kNumRanks)
      : snap_(snap),
        cpu_rank_limit_(cpu_rank_limit),
        words_((snap.index_end() + 63) / 64) {}

  // The index of the group for (selector, kind, resources); creates it the
  // first time. Indexes are dense, in creation order.
  int GroupFor(const LabelSelector& selector, BundleKind kind,
               const ResourceSet& resources);

  Group& group(int g) { return groups_[g]; }
  const Group& group(int g) const { return groups_[g]; }
  size_t size() const { return groups_.size(); }

  // The first candidate of g at or after `from` in rank order; nullopt when
  // there is none. The node index is the returned cursor's pos.
  std::optional<Cursor> Next(const Group& g, Cursor from) const {
    const size_t words = words_;
    Cursor c = from;
    while (c.rank < g.rank_limit) {
      const CowBitset& ranked = snap_.rank_set(g.kind, c.rank);
      size_t w = c.pos >> 6;
      if (w < words && ranked.count() > 0) {  // an empty rank is not scanned
        uint64_t word = ranked.word(w) & CandidateWord(g, w) &
                        (~uint64_t{0} << (c.pos & 63));
        while (true) {
          if (word != 0) {
            c.pos = (w << 6) + std::countr_zero(word);
            return c;
          }
          if (++w >= words) break;
          word = ranked.word(w) & CandidateWord(g, w);
        }
      }
      ++c.rank;
      c.pos = 0;
    }
    return std::nullopt;
  }

  // True when node i is a candidate of g with a rank (ALIVE).
  bool Contains(const Group& g, uint32_t i) const {
    const bool candidate = g.candidates != nullptr ? TestBit(*g.candidates, i)
                                                   : snap_.node_bits().Test(i);
    return candidate && snap_.Rank(g.kind, i) < g.rank_limit;
  }

  // Words of every group's candidate bitset, and word w of g's.
  size_t words() const { return words_; }
  uint64_t CandidateWord(const Group& g, size_t w) const {
    return g.candidates != nullptr ? (*g.candidates)[w]
                                   : snap_.node_bits().word(w);
  }

  // Number of ranked candidates of g (for most-constrained-first ordering).
  int64_t Reach(const Group& g) const;
  // True when a and b count the same candidates, so Reach(a) == Reach(b):
  // the same selector (bitset), kind and rank limit; their amounts may
  // differ.
  static bool SameReach(const Group& a, const Group& b) {
    return a.candidates == b.candidates && a.kind == b.kind &&
           a.rank_limit == b.rank_limit;
  }

 private:
  const SnapshotState& snap_;
  const int cpu_rank_limit_;
  const size_t words_;  // (index_end() + 63) / 64
  // Inline for the few groups of most gangs; group(g)'s references are
  // valid until the next GroupFor().
  absl::InlinedVector<Group, 4> groups_;
  SmallKeyedTable<int> group_of_;
  SmallKeyedTable<std::unique_ptr<Bits>> bits_cache_;
};

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_CANDIDATES_H_
