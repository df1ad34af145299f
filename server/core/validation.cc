#include "server/core/validation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "scheduler/labels.h"

namespace sliced::server {
namespace {

bool IsIdChar(char c) {
  return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == ':' || c == '-';
}

absl::Status ValidateResourceName(absl::string_view name,
                                  const Limits& limits) {
  if (name.empty() || static_cast<int>(name.size()) > limits.max_id_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource name must be 1..", limits.max_id_length, " characters"));
  }
  for (char c : name) {
    if (!(IsIdChar(c) || c == '/')) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource name ", Quote(name, '\''),
                       " may only hold [A-Za-z0-9._:/-]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WithFieldPrefix(absl::string_view prefix,
                             const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(prefix, ": ", status.message()));
}

absl::Status WithFieldPrefix(absl::FunctionRef<std::string()> prefix,
                             const absl::Status& status) {
  if (status.ok()) return status;
  return WithFieldPrefix(prefix(), status);
}

absl::Status ValidateNodeId(absl::string_view id, const Limits& limits) {
  if (id.empty()) {
    return absl::InvalidArgumentError("node_id: must not be empty");
  }
  if (static_cast<int>(id.size()) > limits.max_id_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node_id: must be at most ", limits.max_id_length, " characters"));
  }
  if (!absl::ascii_isalnum(id[0])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node_id: ", Quote(id, '\''), " must start with a letter or digit"));
  }
  for (char c : id) {
    if (!IsIdChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node_id: ", Quote(id, '\''), " may only hold [A-Za-z0-9._:-]"));
    }
  }
  // It is also the node's ray.io/node-id label (Ray's selectors name nodes
  // by it), so a label value's syntax applies too: at most 63 characters,
  // no ':', a letter or digit at both ends.
  const absl::Status as_label = scheduler::ValidateLabelValue(id);
  if (!as_label.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_id: ", Quote(id, '\''), " is also its ",
                     scheduler::kLabelNodeId, " label: ", as_label.message()));
  }
  return absl::OkStatus();
}

absl::Status ValidateAddress(absl::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError("must not be empty");
  if (address.size() > 253) {
    return absl::InvalidArgumentError("must be at most 253 characters");
  }
  for (char c : address) {
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '-' || c == ':' ||
          c == '[' || c == ']')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "must be a host name or IP address ([A-Za-z0-9.-:[]]), got ",
          Quote(address, '\'')));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateName(absl::string_view value, absl::string_view field,
                          const Limits& limits) {
  if (static_cast<int>(value.size()) > limits.max_name_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be at most ", limits.max_name_length, " characters"));
  }
  if (HasControlCharacter(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must not hold control characters"));
  }
  return absl::OkStatus();
}

bool HasControlCharacter(absl::string_view value) {
  // As unsigned bytes: a UTF-8 byte of a non-ASCII character (>= 0x80) is
  // not one (as a signed char it was below 0x20, and "café" was refused).
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

absl::StatusOr<scheduler::ResourceSet> ResourcesFromWire(
    const absl::btree_map<std::string, double>& resources,
    absl::string_view field, const Limits& limits) {
  if (static_cast<int>(resources.size()) > limits.max_resources_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", limits.max_resources_per_node,
                     " resources, got ", resources.size()));
  }
  scheduler::ResourceSet out;
  for (const auto& entry : resources) {
    const std::string& name = entry.first;
    // The field's name is built only for an error.
    auto what = [&] { return absl::StrCat(field, "[", Quote(name), "]"); };
    RETURN_IF_ERROR(WithFieldPrefix(what, ValidateResourceName(name, limits)));
    absl::StatusOr<int64_t> fixed = scheduler::ToFixedPoint(entry.second, "");
    if (!fixed.ok()) fixed = scheduler::ToFixedPoint(entry.second, what());
    ASSIGN_OR_RETURN(out[name], std::move(fixed));
  }
  return out;
}

bool IsWholeUnitResource(absl::string_view name) {
  return name == "memory" || name == "object_store_memory" || name == "TPU" ||
         name == "GPU";
}

}  // namespace sliced::server
