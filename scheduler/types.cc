#include "scheduler/types.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sliced::scheduler {

absl::StatusOr<int64_t> ToFixedPoint(double value, absl::string_view what) {
  if (std::isnan(value) || std::isinf(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": must be a finite number, got ", value));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": must be >= 0, got ", value));
  }
  if (value > kMaxResourceValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": must be <= ", kMaxResourceValue, ", got ", value));
  }
  const double scaled = value * kResourceScale;
  const double rounded = std::round(scaled);
  // Tolerate binary rounding noise (0.1 is not exact), not real extra digits.
  if (std::fabs(scaled - rounded) > 1e-6 * std::max(1.0, rounded) + 1e-3) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": precision is limited to 0.0001 units, got ", value));
  }
  return static_cast<int64_t>(rounded);
}

double FromFixedPoint(int64_t amount) {
  return static_cast<double>(amount) / kResourceScale;
}

absl::string_view NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kAlive:
      return "ALIVE";
    case NodeState::kDraining:
      return "DRAINING";
    case NodeState::kDead:
      return "DEAD";
  }
  return "UNKNOWN";
}

std::string WhyNoPlacements(const Node& node) {
  if (node.state != NodeState::kAlive) {
    return std::string(NodeStateName(node.state));
  }
  if (!node.quarantine_reason.empty()) {
    return absl::StrCat("quarantined (", node.quarantine_reason, ")");
  }
  return "";
}

}  // namespace sliced::scheduler
