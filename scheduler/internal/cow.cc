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
  // Clear every word from the first moved index's on, then set the moved
  // bits again at their new places.
  const size_t from_word = first_moved >> 6;
  for (size_t w = from_word; w < words_.size(); ++w) {
    if (words_[w] == 0) continue;
    out.count_ -= std::popcount(words_[w]);
    out.words_.Mutable(w) = 0;
  }
  out.words_.Resize((bits + 63) / 64);
  out.bits_ = bits;
  for (size_t i = NextSet(from_word << 6); i < bits_; i = NextSet(i + 1)) {
    if (old_to_new[i] >= 0) out.Set(static_cast<size_t>(old_to_new[i]), true);
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
