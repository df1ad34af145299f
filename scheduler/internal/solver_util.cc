// Shared helpers of the solver's pipeline; see solver_util.h.
//
// Thread-safety: pure functions.
#include "scheduler/internal/solver_util.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sliced::scheduler::internal {

const std::string& TpuName() {
  static const std::string* name = new std::string(kResourceTpu);
  return *name;
}

BundleKind KindOf(const ResourceSet& resources) {
  return Amount(resources, TpuName()) > 0 ? BundleKind::kTpu
                                          : BundleKind::kCpuOnly;
}

std::string ResourcesToString(const ResourceSet& resources) {
  return absl::StrCat("{",
                      absl::StrJoin(resources, ", ",
                                    [](std::string* out, const auto& entry) {
                                      absl::StrAppend(
                                          out, entry.first, ": ",
                                          FromFixedPoint(entry.second));
                                    }),
                      "}");
}

LabelSelector And(const LabelSelector& a, const LabelSelector* b) {
  LabelSelector out = a;
  if (b != nullptr) {
    out.terms.insert(out.terms.end(), b->terms.begin(), b->terms.end());
    std::stable_sort(out.terms.begin(), out.terms.end(),
                     [](const SelectorTerm& x, const SelectorTerm& y) {
                       return x.key < y.key;
                     });
  }
  return out;
}

Released ReleasedBy(const InventorySnapshot& snap, const std::string& pg_id) {
  Released released;
  if (pg_id.empty()) return released;
  for (const Allocation& a : snap.AllocationsOf(pg_id)) {
    ResourceSet& r = released[static_cast<uint32_t>(snap.NodeIndex(a.node_id))];
    for (const auto& [name, amount] : a.resources) r[name] += amount;
  }
  return released;
}

Attempt Attempt::Failed(Failure failure) {
  Attempt out;
  out.infeasible = failure.infeasible;
  out.summary = std::move(failure.summary);
  out.steps = std::move(failure.steps);
  return out;
}

}  // namespace sliced::scheduler::internal
