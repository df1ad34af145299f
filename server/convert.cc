#include "server/convert.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "scheduler/labels.h"
#include "base/status_macros.h"
#include "server/label_translation.h"

namespace sliced::server {
namespace {

bool IsIdChar(char c) {
  return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == ':' || c == '-';
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

absl::Status ValidateResourceName(absl::string_view name,
                                  const Limits& limits) {
  if (name.empty() || static_cast<int>(name.size()) > limits.max_id_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource name must be 1..", limits.max_id_length, " characters"));
  }
  for (char c : name) {
    if (!(IsIdChar(c) || c == '/')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resource name ", Quote(name, '\''), " may only hold [A-Za-z0-9._:/-]"));
    }
  }
  return absl::OkStatus();
}

// Resources counted in whole units on a node's capacity.
bool IsWholeUnitResource(absl::string_view name) {
  return name == "memory" || name == "object_store_memory" || name == "TPU" ||
         name == "GPU";
}

}  // namespace

absl::Status WithFieldPrefix(absl::string_view prefix,
                             const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(prefix, ": ", status.message()));
}

absl::Status ValidateNodeId(absl::string_view id, const Limits& limits) {
  if (id.empty())
    return absl::InvalidArgumentError("node_id: must not be empty");
  if (static_cast<int>(id.size()) > limits.max_id_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node_id: must be at most ", limits.max_id_length, " characters"));
  }
  if (!absl::ascii_isalnum(id[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_id: ", Quote(id, '\''),
                     " must start with a letter or digit"));
  }
  for (char c : id) {
    if (!IsIdChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("node_id: ", Quote(id, '\''),
                       " may only hold [A-Za-z0-9._:-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<scheduler::ResourceSet> ResourcesFromProto(
    const google::protobuf::Map<std::string, double>& resources,
    absl::string_view field, const Limits& limits) {
  if (static_cast<int>(resources.size()) > limits.max_resources_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", limits.max_resources_per_node,
                     " resources, got ", resources.size()));
  }
  scheduler::ResourceSet out;
  for (const auto& [name, value] : resources) {
    const std::string what = absl::StrCat(field, "[", Quote(name), "]");
    RETURN_IF_ERROR(WithFieldPrefix(what, ValidateResourceName(name, limits)));
    ASSIGN_OR_RETURN(int64_t fixed, scheduler::ToFixedPoint(value, what));
    out[name] = fixed;
  }
  return out;
}

void ResourcesToProto(const scheduler::ResourceSet& resources,
                      google::protobuf::Map<std::string, double>* out) {
  for (const auto& [name, amount] : resources) {
    (*out)[name] = scheduler::FromFixedPoint(amount);
  }
}

absl::StatusOr<std::vector<scheduler::Node>> NodesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Node>& nodes,
    const Limits& limits) {
  if (nodes.empty())
    return absl::InvalidArgumentError("nodes: must not be empty");
  if (nodes.size() > limits.max_nodes_per_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: at most ", limits.max_nodes_per_batch,
                     " nodes per batch, got ", nodes.size()));
  }
  std::vector<scheduler::Node> out;
  out.reserve(nodes.size());
  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < nodes.size(); ++i) {
    const v1::Node& in = nodes[i];
    const std::string where =
        absl::StrCat("nodes[", i, "] (node_id ", Quote(in.node_id()), ")");
    RETURN_IF_ERROR(
        WithFieldPrefix(where, ValidateNodeId(in.node_id(), limits)));
    if (!seen.insert(in.node_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": node_id appears twice in the batch"));
    }
    RETURN_IF_ERROR(WithFieldPrefix(absl::StrCat(where, ": address"),
                                    ValidateAddress(in.address())));
    if (in.state() != v1::NODE_STATE_UNSPECIFIED && in.state() != v1::ALIVE) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": state: a node registers ALIVE; use DrainNode or Heartbeat "
          "to change its state"));
    }
    scheduler::Labels raw(in.labels().begin(), in.labels().end());
    for (const auto& [key, value] : raw) {
      RETURN_IF_ERROR(
          WithFieldPrefix(absl::StrCat(where, ": labels[", Quote(key), "]"),
                          scheduler::ValidateLabelKey(key)));
      RETURN_IF_ERROR(
          WithFieldPrefix(absl::StrCat(where, ": labels[", Quote(key), "] value"),
                          scheduler::ValidateLabelValue(value)));
    }
    absl::StatusOr<scheduler::Labels> translated =
        TranslateNodeLabels(in.node_id(), raw);
    RETURN_IF_ERROR(WithFieldPrefix(where, translated.status()));
    scheduler::Labels labels = *std::move(translated);
    if (static_cast<int>(labels.size()) > limits.max_labels_per_node) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": labels: at most ", limits.max_labels_per_node,
                       " labels per node (including derived Ray labels), got ",
                       labels.size()));
    }
    for (const auto& [key, value] : labels) {
      // Derived values (e.g. a raw TPU_WORKER_ID copied over) obey the syntax.
      RETURN_IF_ERROR(
          WithFieldPrefix(absl::StrCat(where, ": labels[", Quote(key), "] value"),
                          scheduler::ValidateLabelValue(value)));
    }
    ASSIGN_OR_RETURN(
        scheduler::ResourceSet resources,
        ResourcesFromProto(in.resources(), absl::StrCat(where, ": resources"),
                           limits));
    for (const auto& [name, amount] : resources) {
      if (IsWholeUnitResource(name) &&
          amount % scheduler::kResourceScale != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": resources[", Quote(name), "]: node capacity of ", name,
            " must be a whole number"));
      }
    }
    scheduler::Node node;
    node.node_id = in.node_id();
    node.address = in.address();
    node.labels = std::move(labels);
    node.resources = std::move(resources);
    out.push_back(std::move(node));
  }
  return out;
}

v1::NodeState NodeStateToProto(scheduler::NodeState state) {
  switch (state) {
    case scheduler::NodeState::kAlive:
      return v1::ALIVE;
    case scheduler::NodeState::kDraining:
      return v1::DRAINING;
    case scheduler::NodeState::kDead:
      return v1::DEAD;
  }
  return v1::NODE_STATE_UNSPECIFIED;
}

void NodeToProto(const scheduler::Node& node, v1::Node* out) {
  out->set_node_id(node.node_id);
  out->set_address(node.address);
  out->mutable_labels()->insert(node.labels.begin(), node.labels.end());
  ResourcesToProto(node.resources, out->mutable_resources());
  out->set_state(NodeStateToProto(node.state));
}

}  // namespace sliced::server
