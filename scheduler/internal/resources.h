// Reading amounts out of a ResourceSet, shared by the snapshot and the
// solver. Engine-internal: include only from scheduler/ (and its tests).
//
// Thread-safety: pure functions.
#ifndef SLICED_SCHEDULER_INTERNAL_RESOURCES_H_
#define SLICED_SCHEDULER_INTERNAL_RESOURCES_H_

#include <cstdint>
#include <string>

#include "scheduler/types.h"

namespace sliced::scheduler::internal {

// The amount of `name` in `set` (fixed point); 0 when absent.
inline int64_t Amount(const ResourceSet& set, const std::string& name) {
  auto it = set.find(name);
  return it == set.end() ? 0 : it->second;
}

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_RESOURCES_H_
