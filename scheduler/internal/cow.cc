// Copy-on-write containers; see cow.h.
//
// Thread-safety: see cow.h (one writer per unpublished snapshot).
#include "scheduler/internal/cow.h"

#include <algorithm>
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

Renumbering::Renumbering(size_t old_size, std::vector<uint32_t> removed,
                         const std::vector<uint32_t>& insert_before)
    : old_size_(old_size),
      bits_(old_size - removed.size() + insert_before.size()),
      removed_(std::move(removed)) {
  first_moved_ = old_size;
  if (!removed_.empty()) first_moved_ = removed_.front();
  if (!insert_before.empty()) {
    first_moved_ = std::min<size_t>(first_moved_, insert_before.front());
  }
  inserted_.reserve(insert_before.size());
  size_t old = 0, to = 0, r = 0, a = 0;
  while (true) {
    while (a < insert_before.size() && insert_before[a] == old) {
      inserted_.push_back(static_cast<uint32_t>(to++));
      ++a;
    }
    if (old == old_size) break;
    if (r < removed_.size() && removed_[r] == old) {
      ++old;
      ++r;
      continue;
    }
    // Kept up to the next removal or insertion.
    size_t next = old_size;
    if (r < removed_.size()) next = std::min<size_t>(next, removed_[r]);
    if (a < insert_before.size()) {
      next = std::min<size_t>(next, insert_before[a]);
    }
    runs_.push_back({old, to, next - old});
    to += next - old;
    old = next;
  }
}

size_t Renumbering::RunOf(size_t i) const {
  auto it =
      std::upper_bound(runs_.begin(), runs_.end(), i,
                       [](size_t v, const Run& run) { return v < run.from; });
  return it == runs_.begin() ? runs_.size()
                             : static_cast<size_t>(it - runs_.begin()) - 1;
}

int64_t Renumbering::NewIndex(size_t i) const {
  const size_t r = RunOf(i);
  if (r == runs_.size() || i - runs_[r].from >= runs_[r].len) return -1;
  return static_cast<int64_t>(runs_[r].to + (i - runs_[r].from));
}

int64_t Renumbering::SourceOf(size_t p) const {
  auto it =
      std::upper_bound(runs_.begin(), runs_.end(), p,
                       [](size_t v, const Run& run) { return v < run.to; });
  if (it != runs_.begin() && p < std::prev(it)->to + std::prev(it)->len) {
    return static_cast<int64_t>(std::prev(it)->from + p - std::prev(it)->to);
  }
  const auto a = std::lower_bound(inserted_.begin(), inserted_.end(), p);
  return -1 - (a - inserted_.begin());
}

CowBitset CowBitset::Renumbered(const Renumbering& r) const {
  CowBitset out(*this);
  // The words from the first moved index's on are laid out anew in a plain
  // array (a moved bit lands at or after that word: indexes below
  // first_moved keep theirs and the order is kept), a run's bits 64 at a
  // time, then written back where they differ; the words before stay
  // shared. Only the removed indexes' bits leave the count.
  const size_t from_word = r.first_moved() >> 6;
  const size_t from = from_word << 6;
  const size_t words = (r.bits() + 63) / 64;
  std::vector<uint64_t> fresh(words > from_word ? words - from_word : 0, 0);
  // The 64 bits from old index i on (zeros past the end).
  auto bits_at = [&](size_t i) {
    const size_t w = i >> 6, shift = i & 63;
    uint64_t v = w < words_.size() ? words_[w] >> shift : 0;
    if (shift != 0 && w + 1 < words_.size()) v |= words_[w + 1] << (64 - shift);
    return v;
  };
  for (const Renumbering::Run& run : r.runs()) {
    if (run.from + run.len <= from) continue;
    // Below first_moved a run keeps its place (from == to).
    const size_t skip = run.from < from ? from - run.from : 0;
    const size_t begin = run.from + skip;
    const size_t end = std::min(run.from + run.len, bits_);
    for (size_t k = begin; k < end; k += 64) {
      const size_t n = std::min<size_t>(64, end - k);
      uint64_t v = bits_at(k);
      if (n < 64) v &= (uint64_t{1} << n) - 1;
      if (v == 0) continue;
      const size_t to = run.to + (k - run.from);
      const size_t w = (to >> 6) - from_word, shift = to & 63;
      fresh[w] |= v << shift;
      if (shift != 0 && shift + n > 64) fresh[w + 1] |= v >> (64 - shift);
    }
  }
  for (uint32_t i : r.removed()) {
    if (i < bits_ && Test(i)) --out.count_;
  }
  out.words_.Resize(words);
  out.bits_ = r.bits();
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
