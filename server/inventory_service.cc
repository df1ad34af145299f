#include "server/inventory_service.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "scheduler/labels.h"
#include "scheduler/slices.h"
#include "base/status_macros.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/placement.h"

namespace sliced::server {
namespace {

using scheduler::NodeState;

absl::Status NodeNotFound(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("node_id: no node ", Quote(id)));
}

void EntryToProto(const NodeEntry& entry,
                  const scheduler::InventorySnapshot& snapshot, v1::Node* out) {
  NodeToProto(entry.node, out);
  absl::StatusOr<scheduler::ResourceSet> free =
      snapshot.FreeResources(entry.node.node_id);
  ResourcesToProto(free.ok() ? *free : entry.node.resources,
                   out->mutable_available());
  const int64_t index = snapshot.NodeIndex(entry.node.node_id);
  if (index >= 0) {
    std::string last;
    for (const scheduler::Allocation& a : snapshot.node(index).allocations) {
      if (a.pg_id != last) out->add_placement_group_ids(a.pg_id);
      last = a.pg_id;
    }
  }
  if (entry.last_heartbeat > absl::InfinitePast()) {
    const int64_t ms = absl::ToUnixMillis(entry.last_heartbeat);
    out->mutable_last_heartbeat()->set_seconds(ms / 1000);
    out->mutable_last_heartbeat()->set_nanos(static_cast<int>(ms % 1000) *
                                             1000000);
  }
}

absl::StatusOr<NodeState> HeartbeatState(const v1::NodeHeartbeat& beat,
                                         const NodeEntry& entry, int index) {
  switch (beat.state()) {
    case v1::NODE_STATE_UNSPECIFIED:
      // A beat from a node marked dead brings it back.
      return entry.node.state == NodeState::kDead ? NodeState::kAlive
                                                  : entry.node.state;
    case v1::ALIVE:
      return NodeState::kAlive;
    case v1::DRAINING:
      return NodeState::kDraining;
    case v1::DEAD:
      return NodeState::kDead;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "heartbeats[", index, "].state: unknown value ", beat.state()));
  }
}

}  // namespace

grpc::ServerUnaryReactor* InventoryService::Write(
    grpc::CallbackServerContext* context,
    std::function<absl::Status(Txn&)> apply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coordinator_->Submit(WriteOp{.apply = std::move(apply),
                               .done = [reactor](const absl::Status& s) {
                                 reactor->Finish(ToGrpcStatus(s));
                               }});
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::RegisterNodes(
    grpc::CallbackServerContext* context,
    const v1::RegisterNodesRequest* request,
    v1::RegisterNodesResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kInventory);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  absl::StatusOr<std::vector<scheduler::Node>> nodes =
      NodesFromProto(request->nodes(), limits_);
  if (!nodes.ok()) return FinishUnary(context, nodes.status());
  return Write(context, [nodes = *std::move(nodes), response](Txn& txn) {
    for (const scheduler::Node& node : nodes) {
      NodeEntry entry{node, txn.now()};
      if (const NodeEntry* old = txn.FindNode(node.node_id)) {
        // Re-registration keeps a drain; a dead node that registers is back.
        if (old->node.state == NodeState::kDraining) {
          entry.node.state = NodeState::kDraining;
        }
      }
      txn.PutNode(entry);
    }
    ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
    for (const scheduler::Node& node : nodes) {
      EntryToProto(*txn.FindNode(node.node_id), *snapshot,
                   response->add_nodes());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::Heartbeat(
    grpc::CallbackServerContext* context, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  std::vector<std::string> beating;
  for (const auto& beat : request->heartbeats())
    beating.push_back(beat.node_id());
  if (absl::Status denied =
          Authorize(auth_, *context, Access::kNodeAgent, beating);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  if (request->heartbeats().empty()) {
    return FinishUnary(
        context, absl::InvalidArgumentError("heartbeats: must not be empty"));
  }
  if (request->heartbeats_size() > limits_.max_nodes_per_batch) {
    return FinishUnary(context,
                       absl::InvalidArgumentError(absl::StrCat(
                           "heartbeats: at most ", limits_.max_nodes_per_batch,
                           " per batch, got ", request->heartbeats_size())));
  }
  response->set_lease_seconds(
      absl::ToDoubleSeconds(coordinator_->options().heartbeat_timeout));
  return Write(context, [this, request](Txn& txn) {
    std::vector<std::string> lost;
    for (int i = 0; i < request->heartbeats_size(); ++i) {
      const v1::NodeHeartbeat& beat = request->heartbeats(i);
      const NodeEntry* entry = txn.FindNode(beat.node_id());
      if (entry == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("heartbeats[", i, "].node_id: no node ",
                         Quote(beat.node_id()), "; register it first"));
      }
      ASSIGN_OR_RETURN(NodeState state, HeartbeatState(beat, *entry, i));
      NodeEntry next = *entry;
      next.last_heartbeat = txn.now();
      next.node.state = state;
      if (state != entry->node.state) {
        txn.PutNode(next);
        if (state == NodeState::kDead) lost.push_back(next.node.node_id);
      } else {
        txn.TouchNode(next);
      }
    }
    return lost.empty() ? absl::OkStatus()
                        : HandleNodesLost(txn, lost, policy_);
  });
}

grpc::ServerUnaryReactor* InventoryService::DrainNode(
    grpc::CallbackServerContext* context, const v1::DrainNodeRequest* request,
    v1::DrainNodeResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kInventory);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  if (absl::Status s = ValidateNodeId(request->node_id(), limits_); !s.ok()) {
    return FinishUnary(context, s);
  }
  return Write(context, [request, response](Txn& txn) {
    const NodeEntry* entry = txn.FindNode(request->node_id());
    if (entry == nullptr) return NodeNotFound(request->node_id());
    if (entry->node.state == NodeState::kDead) {
      return absl::FailedPreconditionError(
          absl::StrCat("node_id: node \"", request->node_id(),
                       "\" is DEAD; nothing to drain"));
    }
    NodeEntry next = *entry;
    next.node.state = NodeState::kDraining;
    if (entry->node.state != NodeState::kDraining) txn.PutNode(next);
    ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
    EntryToProto(next, *snapshot, response->mutable_node());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::RemoveNode(
    grpc::CallbackServerContext* context, const v1::RemoveNodeRequest* request,
    v1::RemoveNodeResponse* /*response*/) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kInventory);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  if (absl::Status s = ValidateNodeId(request->node_id(), limits_); !s.ok()) {
    return FinishUnary(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coordinator_->Submit(WriteOp{
      [this, request](Txn& txn) {
        if (txn.FindNode(request->node_id()) == nullptr) {
          return NodeNotFound(request->node_id());
        }
        std::vector<std::string> holders = txn.PgsOnNode(request->node_id());
        if (!holders.empty()) {
          if (!request->force()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "node_id: node \"", request->node_id(), "\" holds bundles of ",
                holders.size(), " placement group(s) (", holders.front(),
                holders.size() > 1 ? ", ..." : "",
                "); drain it and remove them first, or pass force"));
          }
          // Forced: the node is lost; its groups are rescheduled first.
          NodeEntry dead = *txn.FindNode(request->node_id());
          dead.node.state = NodeState::kDead;
          txn.PutNode(dead);
          RETURN_IF_ERROR(HandleNodesLost(txn, {request->node_id()}, policy_));
        }
        txn.RemoveNode(request->node_id());
        if (logs_ != nullptr) logs_->StageForget(txn, request->node_id());
        return absl::OkStatus();
      },
      [this, reactor, request](const absl::Status& s) {
        if (s.ok()) {
          if (logs_ != nullptr) logs_->Forget(request->node_id());
          if (telemetry_ != nullptr) telemetry_->Forget(request->node_id());
        }
        reactor->Finish(ToGrpcStatus(s));
      }});
  return reactor;
}

grpc::ServerUnaryReactor* InventoryService::GetNode(
    grpc::CallbackServerContext* context, const v1::GetNodeRequest* request,
    v1::Node* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  if (absl::Status s = ValidateNodeId(request->node_id(), limits_); !s.ok()) {
    return FinishUnary(context, s);
  }
  absl::Status status = coordinator_->Read([&](const ClusterState& state) {
    auto it = state.nodes.find(request->node_id());
    if (it == state.nodes.end()) return NodeNotFound(request->node_id());
    EntryToProto(it->second, *state.snapshot, response);
    return absl::OkStatus();
  });
  return FinishUnary(context, status);
}

grpc::ServerUnaryReactor* InventoryService::ListNodes(
    grpc::CallbackServerContext* context, const v1::ListNodesRequest* request,
    v1::ListNodesResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  absl::StatusOr<scheduler::LabelSelector> selector =
      scheduler::ParseLabelSelector(absl::btree_map<std::string, std::string>(
          request->label_selector().begin(), request->label_selector().end()));
  if (!selector.ok()) {
    return FinishUnary(context,
                       absl::InvalidArgumentError(absl::StrCat(
                           "label_selector: ", selector.status().message())));
  }
  if (request->page_size() < 0 ||
      request->page_size() > limits_.max_page_size) {
    return FinishUnary(
        context, absl::InvalidArgumentError(absl::StrCat(
                     "page_size: must be 0..", limits_.max_page_size, ", got ",
                     request->page_size())));
  }
  const int page_size = request->page_size() == 0 ? limits_.default_page_size
                                                  : request->page_size();
  // The page token is the last node id of the previous page. Candidates come
  // from the snapshot's label index, in node-id order.
  coordinator_->Read([&](const ClusterState& state) {
    const scheduler::InventorySnapshot& snap = *state.snapshot;
    std::vector<uint32_t> matches = snap.MatchingNodes(*selector);
    auto first = matches.begin();
    if (!request->page_token().empty()) {
      first = std::upper_bound(
          matches.begin(), matches.end(), request->page_token(),
          [&](const std::string& token, uint32_t i) {
            return token < snap.node(i).node.node_id;
          });
    }
    for (auto it = first; it != matches.end(); ++it) {
      if (response->nodes_size() == page_size) {
        response->set_next_page_token(response->nodes().rbegin()->node_id());
        break;
      }
      auto entry = state.nodes.find(snap.node(*it).node.node_id);
      if (entry != state.nodes.end()) {
        EntryToProto(entry->second, snap, response->add_nodes());
      }
    }
    return 0;
  });
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InventoryService::ListSlices(
    grpc::CallbackServerContext* context,
    const v1::ListSlicesRequest* /*request*/,
    v1::ListSlicesResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  coordinator_->Read([&](const ClusterState& state) {
    for (const scheduler::SliceState& slice : state.snapshot->ListSlices()) {
      const scheduler::SliceInfo& info = slice.info;
      v1::Slice* out = response->add_slices();
      out->set_name(info.name);
      out->set_accelerator_type(info.accelerator_type);
      out->set_topology(info.topology);
      out->set_pod_type(info.pod_type);
      out->mutable_node_ids()->Add(info.node_ids.begin(), info.node_ids.end());
      out->set_intact(info.intact);
      out->set_free(info.intact && slice.free);
      out->set_reason(info.reason);
      out->set_expected_hosts(info.expected_hosts);
      absl::btree_set<std::string> holders;
      for (const std::string& id : info.node_ids) {
        const int64_t index = state.snapshot->NodeIndex(id);
        if (index < 0) continue;
        for (const auto& a : state.snapshot->node(index).allocations) {
          holders.insert(a.pg_id);
        }
      }
      out->mutable_placement_group_ids()->Add(holders.begin(), holders.end());
    }
    return 0;
  });
  return FinishUnary(context, absl::OkStatus());
}

namespace {

absl::StatusOr<storage::ComputeClassRecord> ComputeClassFromProto(
    const v1::ComputeClass& in) {
  storage::ComputeClassRecord record;
  if (absl::Status s = scheduler::ValidateLabelValue(in.name());
      in.name().empty() || !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute_class.name: must be 1..63 characters of "
                     "[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?, got '",
                     in.name(), "'"));
  }
  record.set_name(in.name());
  if (in.priorities().empty() || in.priorities_size() > 32) {
    return absl::InvalidArgumentError(
        "compute_class.priorities: give 1..32 priorities, in order");
  }
  for (int i = 0; i < in.priorities_size(); ++i) {
    const auto& map = in.priorities(i).label_selector();
    auto parsed = scheduler::ParseLabelSelector(
        absl::btree_map<std::string, std::string>(map.begin(), map.end()));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("compute_class.priorities[", i,
                       "].label_selector: ", parsed.status().message()));
    }
    record.add_priorities()->mutable_terms()->insert(map.begin(), map.end());
  }
  if (!v1::WhenUnsatisfiable_IsValid(in.when_unsatisfiable())) {
    return absl::InvalidArgumentError(
        "compute_class.when_unsatisfiable: use WAIT or FAIL");
  }
  record.set_when_unsatisfiable(in.when_unsatisfiable() == v1::FAIL ? v1::FAIL
                                                                    : v1::WAIT);
  return record;
}

void ComputeClassToProto(const storage::ComputeClassRecord& record,
                         v1::ComputeClass* out) {
  out->set_name(record.name());
  for (const storage::SelectorRecord& p : record.priorities()) {
    out->add_priorities()->mutable_label_selector()->insert(p.terms().begin(),
                                                            p.terms().end());
  }
  out->set_when_unsatisfiable(
      static_cast<v1::WhenUnsatisfiable>(record.when_unsatisfiable()));
}

}  // namespace

grpc::ServerUnaryReactor* InventoryService::PutComputeClass(
    grpc::CallbackServerContext* context,
    const v1::PutComputeClassRequest* request, v1::ComputeClass* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kInventory);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  absl::StatusOr<storage::ComputeClassRecord> record =
      ComputeClassFromProto(request->compute_class());
  if (!record.ok()) return FinishUnary(context, record.status());
  ComputeClassToProto(*record, response);
  return Write(context, [record = *std::move(record)](Txn& txn) {
    txn.PutClass(record);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::ListComputeClasses(
    grpc::CallbackServerContext* context, const v1::ListComputeClassesRequest*,
    v1::ListComputeClassesResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  coordinator_->Read([&](const ClusterState& state) {
    for (const auto& [name, record] : state.classes) {
      ComputeClassToProto(record, response->add_compute_classes());
    }
    return 0;
  });
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InventoryService::DeleteComputeClass(
    grpc::CallbackServerContext* context,
    const v1::DeleteComputeClassRequest* request,
    v1::DeleteComputeClassResponse*) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kInventory);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  return Write(context, [request](Txn& txn) {
    if (txn.FindClass(request->name()) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("name: no compute class ", Quote(request->name())));
    }
    if (txn.AnyPg([&](const PgEntry& pg) {
          return pg.record.compute_class() == request->name();
        })) {
      return absl::FailedPreconditionError(absl::StrCat(
          "name: compute class \"", request->name(),
          "\" is used by live placement groups; remove them first"));
    }
    txn.DeleteClass(request->name());
    return absl::OkStatus();
  });
}

}  // namespace sliced::server
