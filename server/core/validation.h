// Input rules shared by every entry point: ids, names, resource maps, and
// how an error names the field it is about. Pure functions; thread-safe.
//
// Every error is InvalidArgument and names the field and the rule.
#ifndef SLICED_SERVER_CORE_VALIDATION_H_
#define SLICED_SERVER_CORE_VALIDATION_H_

#include <string>

#include "absl/container/btree_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/types.h"
#include "server/core/limits.h"

namespace sliced::server {

// Returns `status` with "<prefix>: " before its message (OK stays OK).
absl::Status WithFieldPrefix(absl::string_view prefix,
                             const absl::Status& status);
// The same, with the prefix built only when `status` is an error: a batch
// of valid fields builds none of their names.
absl::Status WithFieldPrefix(absl::FunctionRef<std::string()> prefix,
                             const absl::Status& status);

// A node id: 1..max_id_length chars of [A-Za-z0-9._:-], starting with a
// letter or digit.
absl::Status ValidateNodeId(absl::string_view id, const Limits& limits);

// A host name or IP address: 1..253 chars of [A-Za-z0-9.-:[]].
absl::Status ValidateAddress(absl::string_view address);

// job_id, name, request_id, compute class references: at most
// max_name_length characters, no control characters.
absl::Status ValidateName(absl::string_view value, absl::string_view field,
                          const Limits& limits);
// Whether `value` holds a byte below 0x20 or DEL (UTF-8 beyond ASCII is
// fine).
bool HasControlCharacter(absl::string_view value);

// Wire resources (name -> double) to fixed point: at most
// max_resources_per_node names of [A-Za-z0-9._:/-], each amount finite,
// >= 0, <= kMaxResourceValue, in steps of 1/10000. `field` prefixes errors.
absl::StatusOr<scheduler::ResourceSet> ResourcesFromWire(
    const absl::btree_map<std::string, double>& resources,
    absl::string_view field, const Limits& limits);

// Resources counted in whole units on a node's capacity (memory, TPU, GPU).
bool IsWholeUnitResource(absl::string_view name);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_VALIDATION_H_
