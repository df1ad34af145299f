#include "server/api/convert_nodes.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "scheduler/labels.h"
#include "server/api/convert_common.h"
#include "server/core/validation.h"

namespace sliced::server::api {

absl::StatusOr<std::vector<scheduler::Node>> NodesFromProto(
    const v1::RegisterNodesRequest& request, const Limits& limits) {
  if (request.nodes_size() > limits.max_nodes_per_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: at most ", limits.max_nodes_per_batch,
                     " nodes per batch, got ", request.nodes_size()));
  }
  std::vector<NodeSpec> specs;
  specs.reserve(request.nodes_size());
  for (int i = 0; i < request.nodes_size(); ++i) {
    const v1::Node& in = request.nodes(i);
    if (in.state() != v1::NODE_STATE_UNSPECIFIED && in.state() != v1::ALIVE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nodes[", i, "] (node_id ", Quote(in.node_id()),
          "): state: a node registers ALIVE; use DrainNode or Heartbeat "
          "to change its state"));
    }
    specs.push_back(
        NodeSpec{in.node_id(), in.address(),
                 scheduler::Labels(in.labels().begin(), in.labels().end()),
                 ToBtree(in.resources())});
  }
  return ValidateNodes(specs, limits);
}

namespace {

// At most kMaxHealthProblems non-empty lines of at most kMaxHealthProblem
// bytes each.
constexpr int kMaxHealthProblems = 16;
constexpr size_t kMaxHealthProblem = 256;

absl::StatusOr<std::vector<std::string>> HealthFromProto(
    const v1::HostHealth& in, int beat) {
  const std::string where = absl::StrCat("heartbeats[", beat, "].health");
  if (in.problems_size() > kMaxHealthProblems) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".problems: at most ", kMaxHealthProblems,
                     " problems, got ", in.problems_size()));
  }
  std::vector<std::string> problems;
  for (int p = 0; p < in.problems_size(); ++p) {
    const std::string& problem = in.problems(p);
    // No control character: it is stored, logged and shown as it is.
    if (problem.empty() || problem.size() > kMaxHealthProblem ||
        HasControlCharacter(problem)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".problems[", p, "]: must be one line of 1..",
          kMaxHealthProblem, " bytes without control characters, got ",
          Quote(problem)));
    }
    problems.push_back(problem);
  }
  return problems;
}

}  // namespace

absl::StatusOr<std::vector<NodeBeat>> BeatsFromProto(
    const v1::HeartbeatRequest& request, const Limits& limits) {
  if (request.heartbeats().empty()) {
    return absl::InvalidArgumentError("heartbeats: must not be empty");
  }
  if (request.heartbeats_size() > limits.max_nodes_per_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeats: at most ", limits.max_nodes_per_batch,
                     " per batch, got ", request.heartbeats_size()));
  }
  std::vector<NodeBeat> beats;
  for (int i = 0; i < request.heartbeats_size(); ++i) {
    const v1::NodeHeartbeat& in = request.heartbeats(i);
    NodeBeat& beat = beats.emplace_back();
    beat.node_id = in.node_id();
    switch (in.state()) {
      case v1::NODE_STATE_UNSPECIFIED:
        break;
      case v1::ALIVE:
        beat.state = scheduler::NodeState::kAlive;
        break;
      case v1::DRAINING:
        beat.state = scheduler::NodeState::kDraining;
        break;
      case v1::DEAD:
        beat.state = scheduler::NodeState::kDead;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "heartbeats[", i, "].state: unknown value ", in.state()));
    }
    if (in.has_health()) {
      ASSIGN_OR_RETURN(beat.health, HealthFromProto(in.health(), i));
    }
  }
  return beats;
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

void NodeToProto(const NodeView& view, v1::Node* out) {
  const scheduler::Node& node = view.node;
  out->set_node_id(node.node_id);
  out->set_address(node.address);
  out->mutable_labels()->insert(node.labels.begin(), node.labels.end());
  ResourcesToProto(node.resources, out->mutable_resources());
  out->set_state(NodeStateToProto(node.state));
  out->set_quarantine_reason(node.quarantine_reason);
  out->set_drain_when_back(node.drain_kept);
  ResourcesToProto(view.available, out->mutable_available());
  out->mutable_placement_group_ids()->Add(view.placement_group_ids.begin(),
                                          view.placement_group_ids.end());
  if (view.last_heartbeat > absl::InfinitePast()) {
    ToTimestamp(view.last_heartbeat, out->mutable_last_heartbeat());
  }
}

void SliceToProto(const SliceView& view, v1::Slice* out) {
  const scheduler::SliceInfo& info = view.info;
  out->set_name(info.name);
  out->set_accelerator_type(info.accelerator_type);
  out->set_topology(info.topology);
  out->set_pod_type(info.pod_type);
  out->mutable_node_ids()->Add(info.node_ids.begin(), info.node_ids.end());
  out->set_intact(info.intact);
  out->set_free(view.free);
  out->set_reason(info.reason);
  out->set_expected_hosts(info.expected_hosts);
  // Left out when no host reports a position (a list of "" says nothing).
  for (const std::string& position : info.host_positions) {
    if (position.empty()) continue;
    out->mutable_host_positions()->Add(info.host_positions.begin(),
                                       info.host_positions.end());
    break;
  }
  out->set_positions_assumed(info.positions_assumed);
  out->mutable_placement_group_ids()->Add(view.placement_group_ids.begin(),
                                          view.placement_group_ids.end());
  out->mutable_subslices()->Add(view.subslices.begin(), view.subslices.end());
  out->mutable_free_subslices()->insert(view.capacity.free_boxes.begin(),
                                        view.capacity.free_boxes.end());
  out->set_largest_free_subslice(view.capacity.largest_free);
}

absl::StatusOr<ComputeClass> ComputeClassFromProto(const v1::ComputeClass& in,
                                                   const Limits& limits) {
  ComputeClass cls;
  if (absl::Status s = scheduler::ValidateLabelValue(in.name());
      in.name().empty() || !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute_class.name: must be 1..63 characters of "
                     "[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?, got ",
                     Quote(in.name(), '\'')));
  }
  cls.name = in.name();
  if (in.priorities().empty() || in.priorities_size() > 32) {
    return absl::InvalidArgumentError(
        "compute_class.priorities: give 1..32 priorities, in order");
  }
  for (int i = 0; i < in.priorities_size(); ++i) {
    ASSIGN_OR_RETURN(scheduler::LabelSelector selector,
                     SelectorFromProto(in.priorities(i).label_selector(),
                                       absl::StrCat("compute_class.priorities[",
                                                    i, "].label_selector"),
                                       limits));
    cls.priorities.push_back(std::move(selector));
  }
  if (!v1::WhenUnsatisfiable_IsValid(in.when_unsatisfiable())) {
    return absl::InvalidArgumentError(
        "compute_class.when_unsatisfiable: use WAIT or FAIL");
  }
  cls.when_unsatisfiable = in.when_unsatisfiable() == v1::FAIL
                               ? WhenUnsatisfiable::kFail
                               : WhenUnsatisfiable::kWait;
  return cls;
}

void ComputeClassToProto(const ComputeClass& cls, v1::ComputeClass* out) {
  out->set_name(cls.name);
  for (const scheduler::LabelSelector& p : cls.priorities) {
    SelectorToProto(p, out->add_priorities()->mutable_label_selector());
  }
  out->set_when_unsatisfiable(
      cls.when_unsatisfiable == WhenUnsatisfiable::kFail ? v1::FAIL : v1::WAIT);
}

}  // namespace sliced::server::api
