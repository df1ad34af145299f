// Copy-on-write containers that let consecutive InventorySnapshots share
// memory: a chunked array and a bitset built on it. Apply() copies a
// snapshot's chunk-pointer vectors and only the chunks a delta touches.
// Engine-internal: include only from scheduler/ (and its tests).
//
// Thread-safety: const methods may be called from any thread on a published
// snapshot. Mutable()/Set()/Resize() are for the single writer building a
// new, unpublished snapshot; chunks it has not copied yet are never written.
#ifndef SLICED_SCHEDULER_INTERNAL_COW_H_
#define SLICED_SCHEDULER_INTERNAL_COW_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sliced::scheduler::internal {

// Copy-on-write chunked array: chunks are shared between snapshots and copied
// only when written. A copy of the array owns none of its chunks: the first
// Mutable() of a chunk copies it (never reasoning from use_count(), which
// would race with another thread dropping the last reader).
template <typename T, int kChunkShift>
class CowArray {
 public:
  static constexpr size_t kChunkSize = size_t{1} << kChunkShift;

  CowArray() = default;
  explicit CowArray(size_t n, const T& fill = T()) { Resize(n, fill); }
  CowArray(const CowArray& other)
      : chunks_(other.chunks_),
        owned_(other.chunks_.size(), false),
        size_(other.size_) {}
  CowArray& operator=(const CowArray& other) {
    chunks_ = other.chunks_;
    owned_.assign(chunks_.size(), false);
    size_ = other.size_;
    return *this;
  }
  CowArray(CowArray&&) = default;
  CowArray& operator=(CowArray&&) = default;

  size_t size() const { return size_; }
  const T& operator[](size_t i) const {
    return (*chunks_[i >> kChunkShift])[i & (kChunkSize - 1)];
  }
  // Only the single writer building a new, unpublished snapshot calls this.
  T& Mutable(size_t i) {
    const size_t c = i >> kChunkShift;
    if (!owned_[c]) {
      chunks_[c] = std::make_shared<std::vector<T>>(*chunks_[c]);
      owned_[c] = true;
    }
    return (*chunks_[c])[i & (kChunkSize - 1)];
  }
  void Resize(size_t n, const T& fill = T()) {
    size_ = n;
    chunks_.resize((n + kChunkSize - 1) >> kChunkShift);
    owned_.resize(chunks_.size(), false);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      if (chunks_[c] == nullptr) {
        chunks_[c] = std::make_shared<std::vector<T>>(kChunkSize, fill);
        owned_[c] = true;
      }
    }
  }

 private:
  std::vector<std::shared_ptr<std::vector<T>>> chunks_;
  std::vector<bool> owned_;  // chunks this copy created or already copied
  size_t size_ = 0;
};

// A copy-on-write bitset over node (or slice) indexes.
class CowBitset {
 public:
  CowBitset() = default;
  explicit CowBitset(size_t bits) : words_((bits + 63) / 64, 0), bits_(bits) {}

  size_t bits() const { return bits_; }
  size_t num_words() const { return words_.size(); }
  uint64_t word(size_t w) const { return words_[w]; }
  bool Test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  void Set(size_t i, bool value);
  int64_t count() const { return count_; }
  // Index of the first set bit >= from, or bits() when there is none.
  size_t NextSet(size_t from) const;
  // This bitset over `bits` indexes after a renumbering: bit i moves to
  // old_to_new[i] (dropped when -1). Indexes below `first_moved` keep their
  // place (REQUIRES: old_to_new[i] == i there; old_to_new ascending where
  // >= 0), so the chunks before it stay shared; costs O(bits - first_moved).
  CowBitset Renumbered(const std::vector<int32_t>& old_to_new, size_t bits,
                       size_t first_moved) const;

 private:
  CowArray<uint64_t, 6> words_;  // 64 words = 4096 bits per chunk
  size_t bits_ = 0;
  int64_t count_ = 0;
};

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_COW_H_
