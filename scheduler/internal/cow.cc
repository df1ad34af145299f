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

Renumbering::Renumbering(const std::vector<int32_t>& old_to_new, size_t bits,
                         size_t first_moved)
    : bits_(bits), first_moved_(first_moved) {
  for (size_t i = first_moved & ~size_t{63}; i < old_to_new.size(); ++i) {
    if (old_to_new[i] < 0) continue;
    const size_t to = static_cast<size_t>(old_to_new[i]);
    if (!runs_.empty() && runs_.back().from + runs_.back().len == i &&
        runs_.back().to + runs_.back().len == to) {
      ++runs_.back().len;
    } else {
      runs_.push_back({i, to, 1});
    }
  }
}

CowBitset CowBitset::Renumbered(const Renumbering& r) const {
  CowBitset out(*this);
  // The words from the first moved index's on are laid out anew in a plain
  // array (a moved bit lands at or after that word: indexes below
  // first_moved keep theirs and the order is kept), a run's bits 64 at a
  // time, then written back where they differ; the words before stay
  // shared.
  const size_t from_word = r.first_moved() >> 6;
  const size_t words = (r.bits() + 63) / 64;
  std::vector<uint64_t> fresh(words > from_word ? words - from_word : 0, 0);
  // The 64 bits from old index i on (zeros past the end).
  auto bits_at = [&](size_t i) {
    const size_t w = i >> 6, shift = i & 63;
    uint64_t v = w < words_.size() ? words_[w] >> shift : 0;
    if (shift != 0 && w + 1 < words_.size()) v |= words_[w + 1] << (64 - shift);
    return v;
  };
  for (const Renumbering::Run& run : r.runs_) {
    const size_t len =
        std::min(run.len, bits_ > run.from ? bits_ - run.from : 0);
    for (size_t k = 0; k < len; k += 64) {
      const size_t n = std::min<size_t>(64, len - k);
      uint64_t v = bits_at(run.from + k);
      if (n < 64) v &= (uint64_t{1} << n) - 1;
      if (v == 0) continue;
      const size_t to = run.to + k;
      const size_t w = (to >> 6) - from_word, shift = to & 63;
      fresh[w] |= v << shift;
      if (shift != 0 && shift + n > 64) fresh[w + 1] |= v >> (64 - shift);
    }
  }
  for (size_t w = from_word; w < words_.size(); ++w) {
    out.count_ -= std::popcount(words_[w]);
  }
  out.words_.Resize(words);
  out.bits_ = r.bits();
  for (uint64_t word : fresh) out.count_ += std::popcount(word);
  out.words_.MutableRange(from_word, from_word + fresh.size(),
                          [&](size_t w) { return fresh[w - from_word]; });
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
