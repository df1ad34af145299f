// Copy-on-write containers; see cow.h.
//
// Thread-safety: see cow.h (one writer per unpublished snapshot).
#include "scheduler/internal/cow.h"

#include <atomic>
#include <bit>

namespace sliced::scheduler::internal {

uint64_t NewCowEpoch() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void CowBitset::Set(size_t i, bool value) {
  const uint64_t mask = uint64_t{1} << (i & 63);
  const uint64_t old = words_[i >> 6];
  if (((old & mask) != 0) == value) return;
  uint64_t& w = words_.Mutable(i >> 6);
  if (value) {
    w |= mask;
    ++count_;
  } else {
    w &= ~mask;
    --count_;
  }
}

CowBitset CowBitset::Renumbered(const std::vector<int32_t>& old_to_new,
                                size_t bits, size_t first_moved) const {
  CowBitset out(*this);
  // The words from the first moved index's on are laid out anew in a plain
  // array (a moved bit lands at or after that word: indexes below
  // first_moved keep theirs and the order is kept), then written back where
  // they differ; the words before stay shared.
  const size_t from_word = first_moved >> 6;
  const size_t words = (bits + 63) / 64;
  std::vector<uint64_t> fresh(words > from_word ? words - from_word : 0, 0);
  for (size_t w = from_word; w < words_.size(); ++w) {
    uint64_t word = words_[w];
    out.count_ -= std::popcount(word);
    while (word != 0) {
      const size_t i = (w << 6) + static_cast<size_t>(std::countr_zero(word));
      word &= word - 1;
      if (i >= bits_ || old_to_new[i] < 0) continue;
      const size_t to = static_cast<size_t>(old_to_new[i]);
      fresh[(to >> 6) - from_word] |= uint64_t{1} << (to & 63);
    }
  }
  out.words_.Resize(words);
  out.bits_ = bits;
  for (size_t w = 0; w < fresh.size(); ++w) {
    out.count_ += std::popcount(fresh[w]);
    if (out.words_[from_word + w] != fresh[w]) {
      out.words_.Mutable(from_word + w) = fresh[w];
    }
  }
  return out;
}

size_t CowBitset::NextSet(size_t from) const {
  if (from >= bits_) return bits_;
  size_t w = from >> 6;
  uint64_t word = words_[w] & (~uint64_t{0} << (from & 63));
  while (true) {
    if (word != 0) {
      const size_t i = (w << 6) + static_cast<size_t>(std::countr_zero(word));
      return i < bits_ ? i : bits_;
    }
    if (++w >= words_.size()) return bits_;
    word = words_[w];
  }
}

}  // namespace sliced::scheduler::internal
