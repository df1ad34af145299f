// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
// Debian's Abseil (20220623) ships no status macros; these are the only ones
// the project uses.
//
// Macros only; no state.
#ifndef SLICED_BASE_STATUS_MACROS_H_
#define SLICED_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function when it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status sliced_status_ = (expr);          \
    if (!sliced_status_.ok()) return sliced_status_; \
  } while (false)

#define SLICED_STATUS_CONCAT_INNER_(a, b) a##b
#define SLICED_STATUS_CONCAT_(a, b) SLICED_STATUS_CONCAT_INNER_(a, b)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>); on
// error returns its status, otherwise moves the value into `lhs`, which may be
// a declaration (`auto x`) or an existing variable.
#define ASSIGN_OR_RETURN(lhs, expr) \
  SLICED_ASSIGN_OR_RETURN_IMPL_(    \
      SLICED_STATUS_CONCAT_(sliced_statusor_, __LINE__), lhs, expr)

#define SLICED_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // SLICED_BASE_STATUS_MACROS_H_
