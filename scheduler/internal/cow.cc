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

CowBitset CowBitset::AllSet(size_t bits) {
  CowBitset out;
  out.words_ = CowArray<uint64_t, 6>((bits + 63) / 64, ~uint64_t{0});
  if (bits % 64 != 0) {
    out.words_.Mutable(bits / 64) = (uint64_t{1} << (bits % 64)) - 1;
  }
  out.bits_ = bits;
  out.count_ = static_cast<int64_t>(bits);
  return out;
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
  end_moved_ = old_size;
  if (bits_ == old_size && first_moved_ < old_size) {
    size_t last = 0;
    if (!removed_.empty()) last = removed_.back() + size_t{1};
    if (!insert_before.empty()) {
      last = std::max<size_t>(last, insert_before.back());
    }
    end_moved_ = last;
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
  const size_t from_word = r.first_moved() >> 6;
  const size_t words = (r.bits() + 63) / 64;
  const size_t old_words = words_.size();
  out.bits_ = r.bits();
  if (count_ == 0) {
    // Nothing moves: only the size changes (new words are zero).
    out.words_.Resize(words);
    return out;
  }
  // The words from the first moved index's on are read out to a plain
  // array and laid out anew in another (a moved bit lands at or after that
  // word: indexes below first_moved keep theirs and the order is kept), a
  // run's bits 64 at a time, then written back where they differ; the
  // words before stay shared. Only the removed indexes' bits leave the
  // count.
  // Words from the one holding end_moved on (then bits() == old_size())
  // keep theirs, except for that word's bits below end_moved.
  const bool bounded = r.end_moved() < r.old_size();
  const size_t stop_word = bounded ? (r.end_moved() + 63) / 64 : words;
  const size_t old_stop = bounded ? stop_word : old_words;
  std::vector<uint64_t> old(old_stop > from_word ? old_stop - from_word + 1 : 1,
                            0);
  words_.Read(std::min(from_word, old_stop), old_stop, old.data());
  std::vector<uint64_t> fresh(stop_word > from_word ? stop_word - from_word : 0,
                              0);
  const size_t from = from_word << 6;
  const size_t stop = bounded ? std::min(bits_, stop_word << 6) : bits_;
  for (const Renumbering::Run& run : r.runs()) {
    if (run.from + run.len <= from) continue;
    if (run.from >= stop) break;
    // Below first_moved and from end_moved on a run keeps its place.
    const size_t begin = std::max(run.from, from);
    const size_t end = std::min(run.from + run.len, stop);
    for (size_t k = begin; k < end; k += 64) {
      const size_t n = std::min<size_t>(64, end - k);
      // The 64 bits from old index k on (the array ends in a zero word).
      const size_t w = (k >> 6) - from_word, shift = k & 63;
      uint64_t v = old[w] >> shift;
      if (shift != 0) v |= old[w + 1] << (64 - shift);
      if (n < 64) v &= (uint64_t{1} << n) - 1;
      if (v == 0) continue;
      const size_t to = run.to + (k - run.from);
      const size_t fw = (to >> 6) - from_word, fshift = to & 63;
      fresh[fw] |= v << fshift;
      if (fshift != 0 && fshift + n > 64) fresh[fw + 1] |= v >> (64 - fshift);
    }
  }
  for (uint32_t i : r.removed()) {
    if (i < bits_ && Test(i)) --out.count_;
  }
  out.words_.Resize(words);
  out.words_.Assign(from_word, fresh.data(), fresh.size());
  return out;
}

namespace {

// Set bits of a[i] & b[i] over [0, n). The baseline x86-64 build has no
// popcnt instruction (std::popcount is a call into libgcc): where the CPU
// has it, the loader picks the clone that uses it.
#if defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("popcnt", "default")))
#endif
int64_t
CountAndWords(const uint64_t* a, const uint64_t* b, size_t n) {
  int64_t count = 0;
  for (size_t i = 0; i < n; ++i) count += std::popcount(a[i] & b[i]);
  return count;
}

// Calls f(chunk's words, w, n) for the words [w, w + n) of each chunk of
// `bits` that holds some of [0, words).
template <typename F>
void ForEachChunk(const CowArray<uint64_t, 6>& bits, size_t words, F f) {
  constexpr size_t kChunkWords = CowArray<uint64_t, 6>::kChunkSize;
  for (size_t w = 0; w < words; w += kChunkWords) {
    f(bits.chunk(w / kChunkWords), w, std::min(kChunkWords, words - w));
  }
}

}  // namespace

int64_t CowBitset::CountAnd(const uint64_t* mask, size_t words) const {
  int64_t count = 0;
  ForEachChunk(words_, words, [&](const uint64_t* in, size_t w, size_t n) {
    count += CountAndWords(in, mask + w, n);
  });
  return count;
}

void CowBitset::CopyTo(uint64_t* out, size_t words) const {
  ForEachChunk(words_, words, [&](const uint64_t* in, size_t w, size_t n) {
    std::copy(in, in + n, out + w);
  });
}

void CowBitset::AndInto(uint64_t* out, size_t words, bool complement) const {
  const uint64_t flip = complement ? ~uint64_t{0} : 0;
  ForEachChunk(words_, words, [&](const uint64_t* in, size_t w, size_t n) {
    for (size_t i = 0; i < n; ++i) out[w + i] &= in[i] ^ flip;
  });
}

void CowBitset::OrInto(uint64_t* out, size_t words) const {
  ForEachChunk(words_, words, [&](const uint64_t* in, size_t w, size_t n) {
    for (size_t i = 0; i < n; ++i) out[w + i] |= in[i];
  });
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

namespace {

// `old` (ascending) with `add` merged in and `drop` left out.
std::vector<uint32_t> Merged(const uint32_t* old, const uint32_t* old_end,
                             std::vector<uint32_t>::const_iterator add,
                             std::vector<uint32_t>::const_iterator add_end,
                             std::vector<uint32_t>::const_iterator drop,
                             std::vector<uint32_t>::const_iterator drop_end) {
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(old_end - old) +
              static_cast<size_t>(add_end - add));
  while (old != old_end || add != add_end) {
    uint32_t v;
    if (add == add_end || (old != old_end && *old < *add)) {
      v = *old++;
    } else {
      if (old != old_end && *old == *add) ++old;
      v = *add++;
    }
    while (drop != drop_end && *drop < v) ++drop;
    if (drop != drop_end && *drop == v) continue;
    out.push_back(v);
  }
  return out;
}

}  // namespace

CowSortedSet CowSortedSet::FromSorted(std::vector<uint32_t> sorted) {
  CowSortedSet s;
  s.size_ = sorted.size();
  if (sorted.size() <= kChunk) {
    s.flat_.assign(sorted.begin(), sorted.end());
  } else {
    s.chunks_ = CowPtrArray<Chunk>(Pieces(std::move(sorted)));
  }
  return s;
}

std::vector<std::shared_ptr<const CowSortedSet::Chunk>> CowSortedSet::Pieces(
    std::vector<uint32_t> values) {
  std::vector<std::shared_ptr<const Chunk>> out;
  if (values.empty()) return out;
  if (values.size() <= kChunk) {
    out.push_back(std::make_shared<const Chunk>(std::move(values)));
    return out;
  }
  const size_t pieces = (values.size() + kChunk - 1) / kChunk;
  for (size_t p = 0; p < pieces; ++p) {
    const size_t from = values.size() * p / pieces;
    const size_t to = values.size() * (p + 1) / pieces;
    out.push_back(std::make_shared<const Chunk>(values.begin() + from,
                                                values.begin() + to));
  }
  return out;
}

size_t CowSortedSet::ChunkOf(uint32_t v) const {
  return chunks_.LastWhere([v](const Chunk& c) { return c.front() <= v; });
}

CowSortedSet::const_iterator CowSortedSet::begin() const {
  if (chunks_.empty()) {
    return const_iterator(flat_.data(), flat_.data() + flat_.size(), nullptr, 0,
                          0);
  }
  const Chunk& first = chunks_[0];
  return const_iterator(first.data(), first.data() + first.size(), &chunks_, 1,
                        chunks_.size());
}

CowSortedSet::const_iterator CowSortedSet::end() const {
  if (chunks_.empty()) {
    const uint32_t* end = flat_.data() + flat_.size();
    return const_iterator(end, end, nullptr, 0, 0);
  }
  const Chunk& last = chunks_.back();
  const uint32_t* end = last.data() + last.size();
  return const_iterator(end, end, &chunks_, chunks_.size(), chunks_.size());
}

CowSortedSet CowSortedSet::Edited(const std::vector<uint32_t>& add,
                                  const std::vector<uint32_t>& drop) const {
  if (chunks_.empty()) {
    return FromSorted(Merged(flat_.data(), flat_.data() + flat_.size(),
                             add.begin(), add.end(), drop.begin(), drop.end()));
  }
  // The edits by the chunk they land in: chunk c takes those below chunk
  // c + 1's first value (the first chunk those below its own too, the last
  // the rest). Found by binary search, so a chunk no edit reaches is not
  // read, and stays shared.
  using It = std::vector<uint32_t>::const_iterator;
  struct ChunkEdit {
    size_t chunk;
    It add, add_end, drop, drop_end;
  };
  std::vector<ChunkEdit> edits;
  for (It a = add.begin(), d = drop.begin();
       a != add.end() || d != drop.end();) {
    const uint32_t v = a == add.end()    ? *d
                       : d == drop.end() ? *a
                                         : std::min(*a, *d);
    const size_t c = ChunkOf(v);
    It a_end = add.end(), d_end = drop.end();
    if (c + 1 < chunks_.size()) {
      const uint32_t next = chunks_[c + 1].front();
      a_end = std::lower_bound(a, add.end(), next);
      d_end = std::lower_bound(d, drop.end(), next);
    }
    edits.push_back({c, a, a_end, d, d_end});
    a = a_end;
    d = d_end;
  }
  // From the last edited chunk to the first, so that splicing one in moves
  // none still to edit.
  CowSortedSet out = *this;
  for (auto e = edits.rbegin(); e != edits.rend(); ++e) {
    const size_t c = e->chunk;
    const Chunk& chunk = out.chunks_[c];
    std::vector<uint32_t> merged =
        Merged(chunk.data(), chunk.data() + chunk.size(), e->add, e->add_end,
               e->drop, e->drop_end);
    size_t from = c, replaced = chunk.size();
    // Drops would leave ever smaller chunks behind: a chunk edited below a
    // quarter joins the one before it when both fit in one (an emptied one
    // just goes).
    if (!merged.empty() && merged.size() < kChunk / 4 && c > 0 &&
        out.chunks_[c - 1].size() + merged.size() <= kChunk) {
      const Chunk& prev = out.chunks_[c - 1];
      merged.insert(merged.begin(), prev.begin(), prev.end());
      replaced += prev.size();
      from = c - 1;
    }
    out.size_ = out.size_ - replaced + merged.size();
    out.chunks_.Splice(from, c + 1, Pieces(std::move(merged)));
  }
  // Shrunk well below a chunk: flat again (not at kChunk, so that a list
  // near it does not flip at every edit).
  if (out.size_ <= kChunk / 2) {
    std::vector<uint32_t> all(out.begin(), out.end());
    return FromSorted(std::move(all));
  }
  return out;
}

}  // namespace sliced::scheduler::internal
