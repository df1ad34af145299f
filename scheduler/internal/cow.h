// Copy-on-write containers that let consecutive InventorySnapshots share
// memory: a chunked array and a bitset built on it. Apply() copies a
// snapshot's arrays in O(1) each, then only the chunk tables and chunks a
// delta writes.
// Engine-internal: include only from scheduler/ (and its tests).
//
// Thread-safety: const methods may be called from any thread on a published
// snapshot. Mutable()/Set()/Resize() are for the single writer building a
// new, unpublished snapshot; chunks it has not copied yet are never written.
#ifndef SLICED_SCHEDULER_INTERNAL_COW_H_
#define SLICED_SCHEDULER_INTERNAL_COW_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"

namespace sliced::scheduler::internal {

// A number no CowArray has had yet (never 0).
uint64_t NewCowEpoch();

// Copy-on-write chunked array: the chunk table and the chunks are shared
// between snapshots and copied only when written. Copying the array is O(1)
// (one pointer), so a snapshot copies only the arrays a delta writes, and
// of those the table and the chunks it writes. The table reads chunks
// through plain pointers and owns them in groups of kGroupSize: copying it
// copies the pointers (a memcpy) and takes a reference on each group, and
// writing a chunk copies its group (kGroupSize references), so a one-item
// change touches one reference count per group, not one per chunk (the node
// table has ~400 chunks at 100k nodes), when it copies the table and again
// when the old table is freed. Each array has an epoch, and
// what it created or copied carries that epoch: it writes those in place
// and copies anything else first. A copy gets a new epoch, and so does the
// array copied from (the epoch is atomic: readers may copy a published
// array at the same time), so neither writes what they share. (Never
// reasoning from use_count(), which would race with another thread dropping
// the last reader.)
template <typename T, int kChunkShift>
class CowArray {
  struct Chunk;  // below

 public:
  static constexpr size_t kChunkSize = size_t{1} << kChunkShift;
  static constexpr int kGroupShift = 4;
  static constexpr size_t kGroupSize = size_t{1} << kGroupShift;

  CowArray() = default;
  explicit CowArray(size_t n, const T& fill = T()) { Resize(n, fill); }
  CowArray(const CowArray& other) : table_(other.table_), size_(other.size_) {
    other.Disown();
  }
  CowArray& operator=(const CowArray& other) {
    if (this == &other) return *this;
    table_ = other.table_;
    size_ = other.size_;
    Disown();
    other.Disown();
    return *this;
  }
  // The moved-from array is left empty.
  CowArray(CowArray&& other) noexcept
      : table_(std::move(other.table_)),
        epoch_(other.epoch_.load(std::memory_order_relaxed)),
        size_(other.size_) {
    other.Forget();
  }
  CowArray& operator=(CowArray&& other) noexcept {
    if (this == &other) return *this;
    table_ = std::move(other.table_);
    epoch_.store(other.epoch_.load(std::memory_order_relaxed),
                 std::memory_order_relaxed);
    size_ = other.size_;
    other.Forget();
    return *this;
  }

  size_t size() const { return size_; }
  const T& operator[](size_t i) const {
    return table_->chunks[i >> kChunkShift]->items[i & (kChunkSize - 1)];
  }
  // Items [c << kChunkShift, +kChunkSize) one after another; those at or
  // past size() are not items. REQUIRES: c < chunks of size().
  const T* chunk(size_t c) const { return table_->chunks[c]->items.data(); }
  // Only the single writer building a new, unpublished snapshot calls this.
  T& Mutable(size_t i) {
    return MutableChunk(i >> kChunkShift).items[i & (kChunkSize - 1)];
  }
  // Writes items as Mutable() does, keeping the last chunk it made this
  // array's own: items in one chunk one after another cost one
  // MutableChunk(). Only while nothing else writes the array.
  class Cursor {
   public:
    explicit Cursor(CowArray& a) : a_(a) {}
    T& operator[](size_t i) {
      const size_t c = i >> kChunkShift;
      if (c != c_) {
        chunk_ = &a_.MutableChunk(c);
        c_ = c;
      }
      return chunk_->items[i & (kChunkSize - 1)];
    }

   private:
    CowArray& a_;
    size_t c_ = ~size_t{0};
    Chunk* chunk_ = nullptr;
  };

  // Sets items [from, to) to fn(i), as Mutable(i) = fn(i) would, a chunk
  // at a time; a chunk none of whose items changes stays shared.
  template <typename Fn>
  void MutableRange(size_t from, size_t to, const Fn& fn) {
    Rewrite(from, to, [&](size_t i, const T&) { return fn(i); });
  }
  // Sets items [to, to + n) to `src`'s [from, from + n), a span of a chunk
  // at a time; a span already equal leaves its chunk shared. `src` may be
  // a copy of this array, not the array itself.
  void CopyRange(size_t to, const CowArray& src, size_t from, size_t n) {
    while (n > 0) {
      const size_t src_at = from & (kChunkSize - 1);
      const size_t take = std::min(n, kChunkSize - src_at);
      Assign(to, src.table_->chunks[from >> kChunkShift]->items.data() + src_at,
             take);
      to += take;
      from += take;
      n -= take;
    }
  }
  // Sets items [to, to + n) to items[0, n), as CopyRange() does.
  void Assign(size_t to, const T* items, size_t n) {
    while (n > 0) {
      const size_t at = to & (kChunkSize - 1);
      const size_t take = std::min(n, kChunkSize - at);
      const size_t c = to >> kChunkShift;
      if (!std::equal(items, items + take,
                      table_->chunks[c]->items.begin() + at)) {
        std::copy(items, items + take, MutableChunk(c).items.begin() + at);
      }
      items += take;
      to += take;
      n -= take;
    }
  }
  // Copies items [from, to) out to `out`, a chunk at a time.
  void Read(size_t from, size_t to, T* out) const {
    while (from < to) {
      const size_t at = from & (kChunkSize - 1);
      const size_t take = std::min(to - from, kChunkSize - at);
      const T* items = table_->chunks[from >> kChunkShift]->items.data() + at;
      out = std::copy(items, items + take, out);
      from += take;
    }
  }
  // Items past the old size are `fill`: new chunks are filled, and the
  // old last chunk's tail (which may hold items from before a shrink) is
  // rewritten, copied first if a published copy shares it. A shrink resets
  // the items past the new end to T() when T owns something (a shared
  // pointer), so that what they held is freed.
  // The table is copied only when the number of chunks changes or an item
  // does: growing within the last chunk, over items already `fill`, shares
  // it (a bitset grows by a bit per added node, and most bitsets get no bit
  // of it).
  void Resize(size_t n, const T& fill = T()) {
    const size_t old = size_;
    const size_t num_chunks = (n + kChunkSize - 1) >> kChunkShift;
    const size_t old_chunks = table_ == nullptr ? 0 : table_->chunks.size();
    size_ = n;
    if (num_chunks != old_chunks) {
      Table& table = MutableTable();
      const uint64_t epoch = epoch_.load(std::memory_order_relaxed);
      // A shrink lets go of the chunks past the end in the last group kept.
      for (size_t c = num_chunks; c < old_chunks && (c & (kGroupSize - 1)) != 0;
           ++c) {
        MutableGroup(table, c).chunks[c & (kGroupSize - 1)] = nullptr;
      }
      table.chunks.resize(num_chunks);
      table.groups.resize((num_chunks + kGroupSize - 1) >> kGroupShift);
      for (size_t c = old_chunks; c < num_chunks; ++c) {
        auto chunk = std::make_shared<Chunk>();
        chunk->epoch = epoch;
        chunk->items.fill(fill);
        table.chunks[c] = chunk.get();
        MutableGroup(table, c).chunks[c & (kGroupSize - 1)] = std::move(chunk);
      }
    }
    const size_t old_chunk_end = (old + kChunkSize - 1) & ~(kChunkSize - 1);
    Rewrite(old, std::min(n, old_chunk_end),
            [&](size_t, const T&) { return fill; });
    if constexpr (!std::is_trivially_destructible_v<T>) {
      // Items that own something (shared pointers) let go of it when they
      // fall past a shrunk end, not when the chunk is next written.
      const size_t chunk_end = (n + kChunkSize - 1) & ~(kChunkSize - 1);
      Rewrite(n, std::min(old, chunk_end),
              [](size_t, const T&) { return T(); });
    }
  }

 private:
  struct Chunk {
    uint64_t epoch = 0;
    std::array<T, kChunkSize> items;
  };
  // Owns chunks [k * kGroupSize, (k + 1) * kGroupSize) for groups[k].
  struct Group {
    uint64_t epoch = 0;
    std::array<std::shared_ptr<Chunk>, kGroupSize> chunks;
  };
  struct Table {
    uint64_t epoch = 0;
    std::vector<Chunk*> chunks;  // chunk c, owned by groups[c >> kGroupShift]
    std::vector<std::shared_ptr<Group>> groups;
  };

  // Items [from, to) set to fn(i, item), a chunk at a time.
  template <typename Fn>
  void Rewrite(size_t from, size_t to, const Fn& fn) {
    if (from >= to) return;
    std::array<T, kChunkSize> items;
    for (size_t c = from >> kChunkShift; c <= (to - 1) >> kChunkShift; ++c) {
      const size_t lo = std::max(from, c << kChunkShift) & (kChunkSize - 1);
      const size_t hi = std::min(to - (c << kChunkShift), kChunkSize);
      const T* old = table_->chunks[c]->items.data();
      bool same = true;
      for (size_t k = lo; k < hi; ++k) {
        items[k] = fn((c << kChunkShift) + k, old[k]);
        same = same && items[k] == old[k];
      }
      if (same) continue;
      std::copy(items.begin() + lo, items.begin() + hi,
                MutableChunk(c).items.begin() + lo);
    }
  }

  // Chunk c, this array's own: the table, the chunk's group and the chunk
  // are copied first when shared.
  Chunk& MutableChunk(size_t c) {
    Table& table = MutableTable();
    Chunk& chunk = Own(MutableGroup(table, c).chunks[c & (kGroupSize - 1)]);
    table.chunks[c] = &chunk;
    return chunk;
  }

  // The group owning chunk c in `table` (this array's own), copied first
  // when shared; a group past the old end is created.
  Group& MutableGroup(Table& table, size_t c) {
    return Own(table.groups[c >> kGroupShift]);
  }

  Table& MutableTable() { return Own(table_); }

  // `*p` (a table, group or chunk) as this array's own: copied first when
  // it carries another epoch, created when null.
  template <typename X>
  X& Own(std::shared_ptr<X>& p) {
    const uint64_t epoch = epoch_.load(std::memory_order_relaxed);
    if (p == nullptr) {
      p = std::make_shared<X>();
      p->epoch = epoch;
    } else if (p->epoch != epoch) {
      p = std::make_shared<X>(*p);
      p->epoch = epoch;
    }
    return *p;
  }
  // From now on this array owns nothing it holds.
  void Disown() const {
    epoch_.store(NewCowEpoch(), std::memory_order_relaxed);
  }
  void Forget() {
    table_ = nullptr;
    Disown();
    size_ = 0;
  }

  std::shared_ptr<Table> table_;  // null while empty
  mutable std::atomic<uint64_t> epoch_{NewCowEpoch()};
  size_t size_ = 0;
};

// A copy-on-write array of shared pointers to immutable items (a CowMap's
// or a large CowSortedSet's chunks). Copying it is O(1), and changing one
// entry copies the table and the group of its CowArray chunk and the chunk
// of 16 pointers: ~40 references at 400 entries, where a vector of them
// would take 400 when copied and drop 400 when freed, each on a cache line
// of its own. Inserting or erasing moves the entries after it (a chunk of
// them at a time); chunks split and empty rarely.
template <typename T>
class CowPtrArray {
 public:
  using Ptr = std::shared_ptr<const T>;

  CowPtrArray() = default;
  explicit CowPtrArray(const std::vector<Ptr>& items) {
    items_.Resize(items.size());
    items_.Assign(0, items.data(), items.size());
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.size() == 0; }
  const T& operator[](size_t i) const { return *items_[i]; }
  const Ptr& ptr(size_t i) const { return items_[i]; }
  const T& back() const { return *items_[size() - 1]; }

  // The last entry whose item `starts_at_or_before` holds for, else 0: a
  // sorted container's chunk for a key (the predicate holds for a prefix).
  template <typename Pred>
  size_t LastWhere(const Pred& starts_at_or_before) const {
    size_t lo = 0, hi = size();  // the answer is below hi
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      if (starts_at_or_before(*items_[mid])) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  void Set(size_t i, Ptr p) { items_.Mutable(i) = std::move(p); }
  // Replaces entries [from, to) with `with`, moving those after.
  void Splice(size_t from, size_t to, const std::vector<Ptr>& with) {
    const size_t n = items_.size();
    const size_t after = n - to;
    const size_t at = from + with.size();
    if (at != to && after > 0) {
      const Items old = items_;  // the source of the moved entries
      if (at > to) items_.Resize(at + after);
      items_.CopyRange(at, old, to, after);
    }
    items_.Resize(at + after);  // lets go of the entries past the end
    items_.Assign(from, with.data(), with.size());
  }

 private:
  using Items = CowArray<Ptr, 4>;
  Items items_;
};

// How dense indexes 0..old_size move when items (nodes or slices) are
// removed and inserted in order: the `removed` old indexes leave, and each
// inserted item goes in before an old index (old_size: at the end); the
// others keep their order. Held as the runs of old indexes that move
// together, so that it is built in O(k) for k removed and inserted items,
// maps an old index in O(log k), and a bitset moves a run's bits a word at
// a time; one Renumbering serves every bitset over the same indexes.
class Renumbering {
 public:
  // REQUIRES: `removed` ascending, distinct, each < old_size;
  // `insert_before` ascending, each <= old_size, one per inserted item.
  Renumbering(size_t old_size, std::vector<uint32_t> removed,
              const std::vector<uint32_t>& insert_before);

  size_t old_size() const { return old_size_; }
  // Indexes after the renumbering.
  size_t bits() const { return bits_; }
  // Old indexes below keep theirs.
  size_t first_moved() const { return first_moved_; }
  // Old indexes from here on keep theirs too: past the last removal and
  // insertion when as many items come as go (an item moved to a gap
  // nearby), else old_size(). Whatever moves lies in [first_moved(),
  // end_moved()), and in the same range of new indexes.
  size_t end_moved() const { return end_moved_; }
  // True when an old index moves or goes, or items are added.
  bool changed() const {
    return first_moved_ < old_size_ || bits_ != old_size_;
  }
  // The new index of old index `i`; -1 when it was removed.
  int64_t NewIndex(size_t i) const;
  // Where new index `p` comes from: its old index, or -1 - a for the a-th
  // inserted item. O(log k).
  int64_t SourceOf(size_t p) const;
  // The new indexes of the inserted items, ascending (in their order).
  const std::vector<uint32_t>& inserted() const { return inserted_; }
  const std::vector<uint32_t>& removed() const { return removed_; }

  // The kept old indexes, ascending, as runs that move together.
  struct Run {
    size_t from, to, len;  // old [from, from + len) -> new [to, to + len)
  };
  const std::vector<Run>& runs() const { return runs_; }

 private:
  // The run old index i would be in: the last one starting at or before
  // it (runs_.size() when none).
  size_t RunOf(size_t i) const;

  size_t old_size_, bits_, first_moved_, end_moved_;
  std::vector<Run> runs_;  // every kept index, ascending
  std::vector<uint32_t> removed_, inserted_;
};

// A sorted set of uint32_t (a label value's node slots) whose edits cost
// what they touch: up to kChunk values it is one flat array; past that,
// chunks of at most kChunk values, shared with the sets it was edited from.
// Adding or dropping a few values copies the chunks they land in and a few
// references of the chunk table (a CowPtrArray), not every value nor a
// reference per chunk: a zone's or a capacity tier's list holds most nodes,
// and each node added or removed edits it.
// Immutable: Edited() returns a new set.
class CowSortedSet {
 public:
  static constexpr size_t kChunk = 512;
  using Chunk = std::vector<uint32_t>;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = uint32_t;
    using difference_type = std::ptrdiff_t;
    using pointer = const uint32_t*;
    using reference = const uint32_t&;

    const_iterator() = default;
    reference operator*() const { return *at_; }
    const_iterator& operator++() {
      if (++at_ == end_ && next_ != last_) {
        const Chunk& chunk = (*chunks_)[next_++];
        at_ = chunk.data();
        end_ = at_ + chunk.size();
      }
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    // Each value has its own address, and end() is past the last one.
    friend bool operator==(const const_iterator& a, const const_iterator& b) {
      return a.at_ == b.at_;
    }
    friend bool operator!=(const const_iterator& a, const const_iterator& b) {
      return a.at_ != b.at_;
    }

   private:
    friend class CowSortedSet;
    const_iterator(const uint32_t* at, const uint32_t* end,
                   const CowPtrArray<Chunk>* chunks, size_t next, size_t last)
        : at_(at), end_(end), chunks_(chunks), next_(next), last_(last) {}
    const uint32_t* at_ = nullptr;
    const uint32_t* end_ = nullptr;  // of the current chunk
    const CowPtrArray<Chunk>* chunks_ = nullptr;
    size_t next_ = 0, last_ = 0;  // the chunks after it: [next_, last_)
  };

  CowSortedSet() = default;
  // `sorted`: ascending, no duplicates.
  static CowSortedSet FromSorted(std::vector<uint32_t> sorted);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const_iterator begin() const;
  const_iterator end() const;
  // This set with `add` in it and `drop` out of it (each ascending; a value
  // already in, or not in, is left as it is).
  CowSortedSet Edited(const std::vector<uint32_t>& add,
                      const std::vector<uint32_t>& drop) const;
  // The chunks a large set is held in (0 while flat; for tests).
  size_t num_chunks() const { return chunks_.size(); }

 private:
  // `values` (ascending) as chunks of at most kChunk, split evenly; none
  // when empty.
  static std::vector<std::shared_ptr<const Chunk>> Pieces(
      std::vector<uint32_t> values);
  // The chunk that holds `v` or would: the last whose first value <= v,
  // else the first. Not for a flat set.
  size_t ChunkOf(uint32_t v) const;

  absl::InlinedVector<uint32_t, 4> flat_;  // while chunks_ is empty
  CowPtrArray<Chunk> chunks_;
  size_t size_ = 0;
};

// A copy-on-write bitset over node (or slice) indexes.
class CowBitset {
 public:
  CowBitset() = default;
  explicit CowBitset(size_t bits) : words_((bits + 63) / 64, 0), bits_(bits) {}
  // `bits` bits, all set.
  static CowBitset AllSet(size_t bits);

  size_t bits() const { return bits_; }
  size_t num_words() const { return words_.size(); }
  uint64_t word(size_t w) const { return words_[w]; }
  bool Test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  void Set(size_t i, bool value);
  int64_t count() const { return count_; }
  // Set bits of this & `mask` in words [0, words): one word of `mask` per
  // word. REQUIRES: words <= num_words().
  int64_t CountAnd(const uint64_t* mask, size_t words) const;
  // out[w] = word(w); out[w] &= word(w) (or its complement); out[w] |=
  // word(w), for w in [0, words). REQUIRES: words <= num_words().
  void CopyTo(uint64_t* out, size_t words) const;
  void AndInto(uint64_t* out, size_t words, bool complement) const;
  void OrInto(uint64_t* out, size_t words) const;
  // Index of the first set bit >= from, or bits() when there is none.
  size_t NextSet(size_t from) const;
  // This bitset after `r` (over r.bits() indexes). The chunks outside
  // [first_moved, end_moved) stay shared; costs O((end_moved - first_moved)
  // / 64 + the runs), not a step per bit.
  CowBitset Renumbered(const Renumbering& r) const;

 private:
  CowArray<uint64_t, 6> words_;  // 64 words = 4096 bits per chunk
  size_t bits_ = 0;
  int64_t count_ = 0;
};

// An ordered map from string to V kept in copy-on-write chunks of 64-128
// entries: copying the map is O(1), and a write copies one chunk and a few
// references of the chunk table (a CowPtrArray; no key: a chunk's first key
// is read from the chunk). The label index uses it for a key's values, where
// one key (ray.io/node-id) has a value per node: adding a node must not copy
// them all, nor take a reference per chunk. As with CowArray, a copy owns
// none of its chunks, and a map that has been copied (a published one) is
// not written again.
template <typename V>
class CowMap {
 public:
  using Chunk = absl::btree_map<std::string, V>;
  using value_type = typename Chunk::value_type;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = typename Chunk::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    const_iterator() = default;
    reference operator*() const { return *inner_; }
    pointer operator->() const { return &*inner_; }
    const_iterator& operator++() {
      if (++inner_ == (*chunks_)[outer_].end()) {
        ++outer_;
        if (outer_ != chunks_->size()) inner_ = (*chunks_)[outer_].begin();
      }
      return *this;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) {
      return a.outer_ == b.outer_ &&
             (a.outer_ == a.chunks_->size() || a.inner_ == b.inner_);
    }

   private:
    friend class CowMap;
    const_iterator(const CowPtrArray<Chunk>* chunks, size_t outer,
                   typename Chunk::const_iterator inner)
        : chunks_(chunks), outer_(outer), inner_(inner) {}
    const CowPtrArray<Chunk>* chunks_ = nullptr;
    size_t outer_ = 0;
    typename Chunk::const_iterator inner_;
  };

  CowMap() = default;
  // The map of `items`, which are in ascending key order without
  // duplicates: filled chunk by chunk, no search per entry (a full
  // snapshot build's label index).
  static CowMap FromSorted(std::vector<std::pair<std::string, V>> items) {
    CowMap m;
    m.size_ = items.size();
    std::vector<std::shared_ptr<const Chunk>> chunks;
    for (size_t at = 0; at < items.size(); at += kChunk) {
      const size_t end = std::min(items.size(), at + kChunk);
      auto chunk = std::make_shared<Chunk>(
          std::make_move_iterator(items.begin() + at),
          std::make_move_iterator(items.begin() + end));
      m.owned_.insert(chunk.get());
      chunks.push_back(std::move(chunk));
    }
    m.chunks_ = CowPtrArray<Chunk>(chunks);
    return m;
  }
  CowMap(const CowMap& other) : chunks_(other.chunks_), size_(other.size_) {}
  CowMap& operator=(const CowMap& other) {
    chunks_ = other.chunks_;
    size_ = other.size_;
    owned_.clear();
    return *this;
  }
  // A moved map keeps what it owns: the source is not used again.
  CowMap(CowMap&&) = default;
  CowMap& operator=(CowMap&&) = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const_iterator begin() const {
    return chunks_.empty() ? end()
                           : const_iterator(&chunks_, 0, chunks_[0].begin());
  }
  const_iterator end() const {
    return const_iterator(&chunks_, chunks_.size(), {});
  }
  const_iterator find(absl::string_view key) const {
    if (chunks_.empty()) return end();
    const size_t at = ChunkFor(key);
    auto inner = chunks_[at].find(key);
    if (inner == chunks_[at].end()) return end();
    return const_iterator(&chunks_, at, inner);
  }
  bool contains(absl::string_view key) const { return find(key) != end(); }

  // Inserts or replaces. Only the single writer of an unpublished snapshot
  // calls Set() and Erase().
  void Set(const std::string& key, V value) {
    if (chunks_.empty()) {
      auto chunk = std::make_shared<Chunk>();
      chunk->emplace(key, std::move(value));
      owned_.insert(chunk.get());
      chunks_.Splice(0, 0, {std::move(chunk)});
      ++size_;
      return;
    }
    const size_t at = ChunkFor(key);
    Chunk& chunk = MutableChunk(at);
    auto [it, fresh] = chunk.insert_or_assign(key, std::move(value));
    size_ += fresh ? 1 : 0;
    if (chunk.size() > 2 * kChunk) Split(at);
  }
  void Erase(absl::string_view key) {
    if (chunks_.empty()) return;
    const size_t at = ChunkFor(key);
    if (!chunks_[at].contains(key)) return;
    Chunk& chunk = MutableChunk(at);
    chunk.erase(chunk.find(key));
    --size_;
    if (chunk.empty()) {
      owned_.erase(&chunk);
      chunks_.Splice(at, at + 1, {});
    }
  }

 private:
  // Entries per chunk: kChunk to 2 * kChunk once split. A change copies
  // one chunk (its keys and values) and ~2 references per 16 chunks of
  // the table (CowPtrArray).
  static constexpr size_t kChunk = 64;

  // The index of the chunk that holds `key` or would: the last whose first
  // key <= key, else the first. Not for an empty map.
  size_t ChunkFor(absl::string_view key) const {
    return chunks_.LastWhere([key](const Chunk& c) {
      return absl::string_view(c.begin()->first) <= key;
    });
  }
  Chunk& MutableChunk(size_t at) {
    const Chunk* chunk = &chunks_[at];
    if (!owned_.contains(chunk)) {
      auto copy = std::make_shared<Chunk>(*chunk);
      chunk = copy.get();
      owned_.insert(chunk);
      chunks_.Set(at, std::move(copy));
    }
    return const_cast<Chunk&>(*chunk);
  }
  void Split(size_t at) {
    Chunk& chunk = MutableChunk(at);
    auto half = std::next(chunk.begin(), static_cast<ptrdiff_t>(kChunk));
    auto upper = std::make_shared<Chunk>(half, chunk.end());
    chunk.erase(half, chunk.end());
    owned_.insert(upper.get());
    chunks_.Splice(at + 1, at + 1, {std::move(upper)});
  }

  // In key order: every key of a chunk sorts before the next chunk's first
  // (a key goes into the chunk ChunkFor names, so a chunk's first key can
  // change in place and the order holds). Never empty chunks.
  CowPtrArray<Chunk> chunks_;
  size_t size_ = 0;
  // Chunks this copy created or already copied: written in place.
  absl::flat_hash_set<const Chunk*> owned_;
};

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_COW_H_
