// Candidate nodes of a generic placement; see candidates.h.
//
// Thread-safety: see candidates.h (one CandidateGroups per placement).
#include "scheduler/internal/candidates.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/internal/solver_util.h"

namespace sliced::scheduler::internal {

Bits CandidateBits(const SnapshotState& snap, const LabelSelector& selector) {
  const size_t n = snap.index_end();
  const size_t words = (n + 63) / 64;
  // Every node: the indexes that are not gaps.
  Bits bits(words);
  snap.node_bits().CopyTo(bits.data(), words);
  if (selector.terms.empty()) return bits;
  Bits term_bits;
  for (const SelectorTerm& term : selector.terms) {
    const bool positive =
        term.op == SelectorOp::kEquals || term.op == SelectorOp::kIn;
    const SnapshotState::ValueBits* values = snap.value_bits(term.key);
    if (values != nullptr && term.values.size() == 1) {
      // One value with its bitset (a zone, say): one pass, no term bits.
      auto it = values->find(term.values[0]);
      if (it == values->end()) {
        if (positive) std::fill(bits.begin(), bits.end(), 0);
        continue;
      }
      it->second.AndInto(bits.data(), words, /*complement=*/!positive);
      continue;
    }
    term_bits.assign(words, 0);
    if (values != nullptr) {
      for (const std::string& v : term.values) {
        auto it = values->find(v);
        if (it == values->end()) continue;
        it->second.OrInto(term_bits.data(), words);
      }
    } else if (auto key = snap.label_index().find(term.key);
               key != snap.label_index().end()) {
      for (const std::string& v : term.values) {
        auto it = key->second->find(v);
        if (it == key->second->end()) continue;
        for (uint32_t slot : *it->second) {
          const uint32_t i = snap.IndexOfSlot(slot);
          SetBit(term_bits, i);
        }
      }
    }
    for (size_t w = 0; w < words; ++w) {
      bits[w] &= positive ? term_bits[w] : ~term_bits[w];
    }
  }
  return bits;
}

int CandidateGroups::GroupFor(const LabelSelector& selector, BundleKind kind,
                              const ResourceSet& resources) {
  const std::string sel_key = SelectorToString(selector);
  // Exact amounts: bundles of a group share a cursor that skips nodes too
  // small for one of them (ResourcesToString's six digits made 8589934592
  // and 8589930000 bytes one group, and the smaller bundle lost the nodes
  // the larger one skipped).
  std::string key = absl::StrCat(sel_key, "|", static_cast<int>(kind), "|");
  for (const auto& [name, amount] : resources) {
    absl::StrAppend(&key, name, "=", amount, ";");
  }
  if (const int* known = group_of_.Find(key)) return *known;
  Group g;
  if (selector.terms.empty()) {
    g.candidates = nullptr;  // every node
  } else if (const auto* bits = bits_cache_.Find(sel_key)) {
    g.candidates = bits->get();
  } else {
    g.candidates =
        bits_cache_
            .Add(sel_key,
                 std::make_unique<Bits>(CandidateBits(snap_, selector)))
            .get();
  }
  g.kind = kind;
  g.rank_limit = kind == BundleKind::kCpuOnly ? cpu_rank_limit_ : kNumRanks;
  groups_.push_back(g);
  const int index = static_cast<int>(groups_.size() - 1);
  group_of_.Add(std::move(key), index);
  return index;
}

int64_t CandidateGroups::Reach(const Group& g) const {
  int64_t count = 0;
  for (int r = 0; r < g.rank_limit; ++r) {
    const CowBitset& ranked = snap_.rank_set(g.kind, r);
    // Only a node has a rank: without a selector, or on an empty rank, the
    // kept count is the answer (as Next() skips an empty rank).
    if (g.candidates == nullptr || ranked.count() == 0) {
      count += ranked.count();
      continue;
    }
    count += ranked.CountAnd(g.candidates->data(), words_);
  }
  return count;
}

}  // namespace sliced::scheduler::internal
