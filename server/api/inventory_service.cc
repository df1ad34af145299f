#include "server/api/inventory_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/api/convert_common.h"
#include "server/api/convert_nodes.h"
#include "server/core/validation.h"

namespace sliced::server::api {

using Finish = std::function<void(const absl::Status&)>;

namespace {

// DrainNode and UndrainNode: admits the caller, validates the node id, runs
// `change` (NodeManager::Drain or ::Undrain) and replies with the node.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* ChangeNodeState(
    const Gate& gate, NodeManager& nodes, const Limits& limits,
    grpc::CallbackServerContext* context, Rpc rpc, const Request& request,
    Response* response,
    void (NodeManager::*change)(const std::string&, NodeManager::ViewDone)) {
  return gate.Async(
      context, rpc,
      [&](Finish finish) {
        absl::Status valid = ValidateNodeId(request.node_id(), limits);
        if (!valid.ok()) return finish(valid);
        (nodes.*change)(request.node_id(),
                        [response, finish](absl::StatusOr<NodeView> view) {
                          if (view.ok())
                            NodeToProto(*view, response->mutable_node());
                          finish(view.status());
                        });
      },
      {request.node_id()});
}

}  // namespace

grpc::ServerUnaryReactor* InventoryService::RegisterNodes(
    grpc::CallbackServerContext* context,
    const v1::RegisterNodesRequest* request,
    v1::RegisterNodesResponse* response) {
  // An agent token registers its own node only.
  std::vector<std::string> registering;
  for (const v1::Node& node : request->nodes()) {
    registering.push_back(node.node_id());
  }
  return gate_->Async(
      context, Rpc::kRegisterNodes,
      [&](Finish finish) {
        auto nodes = NodesFromProto(*request, limits_);
        if (!nodes.ok()) return finish(nodes.status());
        nodes_->Register(*std::move(nodes), [response, finish](auto views) {
          if (views.ok()) {
            for (const NodeView& v : *views) {
              NodeToProto(v, response->add_nodes());
            }
          }
          finish(views.status());
        });
      },
      registering);
}

grpc::ServerUnaryReactor* InventoryService::Heartbeat(
    grpc::CallbackServerContext* context, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  std::vector<std::string> beating;
  for (const auto& beat : request->heartbeats()) {
    beating.push_back(beat.node_id());
  }
  return gate_->Async(
      context, Rpc::kHeartbeat,
      [&](Finish finish) {
        auto beats = BeatsFromProto(*request, limits_);
        if (!beats.ok()) return finish(beats.status());
        response->set_lease_seconds(
            absl::ToDoubleSeconds(nodes_->heartbeat_timeout()));
        nodes_->Heartbeat(*std::move(beats), finish);
      },
      beating);
}

grpc::ServerUnaryReactor* InventoryService::DrainNode(
    grpc::CallbackServerContext* context, const v1::DrainNodeRequest* request,
    v1::DrainNodeResponse* response) {
  return ChangeNodeState(*gate_, *nodes_, limits_, context, Rpc::kDrainNode,
                         *request, response, &NodeManager::Drain);
}

grpc::ServerUnaryReactor* InventoryService::UndrainNode(
    grpc::CallbackServerContext* context, const v1::UndrainNodeRequest* request,
    v1::UndrainNodeResponse* response) {
  return ChangeNodeState(*gate_, *nodes_, limits_, context, Rpc::kUndrainNode,
                         *request, response, &NodeManager::Undrain);
}

grpc::ServerUnaryReactor* InventoryService::RemoveNode(
    grpc::CallbackServerContext* context, const v1::RemoveNodeRequest* request,
    v1::RemoveNodeResponse* /*response*/) {
  return gate_->Async(context, Rpc::kRemoveNode, [&](Finish finish) {
    absl::Status valid = ValidateNodeId(request->node_id(), limits_);
    if (!valid.ok()) return finish(valid);
    nodes_->Remove(request->node_id(), request->force(), finish);
  });
}

grpc::ServerUnaryReactor* InventoryService::GetNode(
    grpc::CallbackServerContext* context, const v1::GetNodeRequest* request,
    v1::Node* response) {
  return gate_->Unary(context, Rpc::kGetNode, [&] {
    RETURN_IF_ERROR(ValidateNodeId(request->node_id(), limits_));
    ASSIGN_OR_RETURN(NodeView view, nodes_->Get(request->node_id()));
    NodeToProto(view, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::ListNodes(
    grpc::CallbackServerContext* context, const v1::ListNodesRequest* request,
    v1::ListNodesResponse* response) {
  return gate_->Unary(context, Rpc::kListNodes, [&] {
    auto selector =
        scheduler::ParseLabelSelector(ToBtree(request->label_selector()));
    RETURN_IF_ERROR(WithFieldPrefix("label_selector", selector.status()));
    ASSIGN_OR_RETURN(const int page_size,
                     PageSizeFromProto(request->page_size(), limits_));
    // The page token is the last node id of the previous page.
    for (const NodeView& view :
         nodes_->List(*selector, request->page_token(), page_size,
                      response->mutable_next_page_token())) {
      NodeToProto(view, response->add_nodes());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::ListSlices(
    grpc::CallbackServerContext* context, const v1::ListSlicesRequest*,
    v1::ListSlicesResponse* response) {
  return gate_->Unary(context, Rpc::kListSlices, [&] {
    for (const SliceView& view : nodes_->ListSlices()) {
      SliceToProto(view, response->add_slices());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::PutComputeClass(
    grpc::CallbackServerContext* context,
    const v1::PutComputeClassRequest* request, v1::ComputeClass* response) {
  return gate_->Async(context, Rpc::kPutComputeClass, [&](Finish finish) {
    auto cls = ComputeClassFromProto(request->compute_class(), limits_);
    if (!cls.ok()) return finish(cls.status());
    ComputeClassToProto(*cls, response);
    placement_->PutClass(*std::move(cls), finish);
  });
}

grpc::ServerUnaryReactor* InventoryService::ListComputeClasses(
    grpc::CallbackServerContext* context, const v1::ListComputeClassesRequest*,
    v1::ListComputeClassesResponse* response) {
  return gate_->Unary(context, Rpc::kListComputeClasses, [&] {
    for (const ComputeClass& cls : placement_->ListClasses()) {
      ComputeClassToProto(cls, response->add_compute_classes());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InventoryService::DeleteComputeClass(
    grpc::CallbackServerContext* context,
    const v1::DeleteComputeClassRequest* request,
    v1::DeleteComputeClassResponse*) {
  return gate_->Async(context, Rpc::kDeleteComputeClass, [&](Finish finish) {
    placement_->DeleteClass(request->name(), finish);
  });
}

}  // namespace sliced::server::api
