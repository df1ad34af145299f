#include "storage/records.h"

#include "absl/strings/str_cat.h"

namespace sliced::storage {

NodeRecord ToRecord(const scheduler::Node& node) {
  NodeRecord r;
  r.set_node_id(node.node_id);
  r.set_address(node.address);
  for (const auto& [k, v] : node.labels) (*r.mutable_labels())[k] = v;
  for (const auto& [k, v] : node.resources) (*r.mutable_resources())[k] = v;
  switch (node.state) {
    case scheduler::NodeState::kAlive:
      r.set_state(NODE_ALIVE);
      break;
    case scheduler::NodeState::kDraining:
      r.set_state(NODE_DRAINING);
      break;
    case scheduler::NodeState::kDead:
      r.set_state(NODE_DEAD);
      break;
  }
  return r;
}

absl::StatusOr<scheduler::Node> FromRecord(const NodeRecord& r) {
  scheduler::Node node;
  node.node_id = r.node_id();
  node.address = r.address();
  node.labels.insert(r.labels().begin(), r.labels().end());
  node.resources.insert(r.resources().begin(), r.resources().end());
  switch (r.state()) {
    case NODE_ALIVE:
      node.state = scheduler::NodeState::kAlive;
      break;
    case NODE_DRAINING:
      node.state = scheduler::NodeState::kDraining;
      break;
    case NODE_DEAD:
      node.state = scheduler::NodeState::kDead;
      break;
    default:
      return absl::DataLossError(absl::StrCat(
          "stored node ", r.node_id(), " has unknown state ", r.state()));
  }
  return node;
}

namespace {
template <typename Record>
absl::Status ParseInto(Table table, const std::string& key,
                       const std::string& value, std::vector<Record>& out) {
  Record record;
  if (!record.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("stored record ", TableName(table),
                                            "/", key, " does not parse"));
  }
  out.push_back(std::move(record));
  return absl::OkStatus();
}
}  // namespace

absl::Status AddRecord(Table table, const std::string& key,
                       const std::string& value, StoredState& state) {
  switch (table) {
    case Table::kNodes:
      return ParseInto(table, key, value, state.nodes);
    case Table::kPlacementGroups:
      return ParseInto(table, key, value, state.placement_groups);
    case Table::kComputeClasses:
      return ParseInto(table, key, value, state.compute_classes);
    case Table::kLogs: {
      LogRecord record;
      if (!record.ParseFromString(value)) {
        return absl::DataLossError(
            absl::StrCat("stored record logs/", key, " does not parse"));
      }
      state.logs.emplace_back(key, std::move(record));
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown table");
}

}  // namespace sliced::storage
