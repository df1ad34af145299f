// sliced.v1.Inventory on gRPC's callback API. Each handler: pass the gate,
// convert the request, call the node or placement manager, convert the
// result back.
//
// Thread-safe: handlers run on gRPC's threads; state lives in the managers.
#ifndef SLICED_SERVER_API_INVENTORY_SERVICE_H_
#define SLICED_SERVER_API_INVENTORY_SERVICE_H_

#include "server/api/gate.h"
#include "server/core/limits.h"
#include "server/core/node_manager.h"
#include "server/core/placement_manager.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server::api {

class InventoryService final : public v1::Inventory::CallbackService {
 public:
  // REQUIRES: every pointer outlives the service.
  InventoryService(NodeManager* nodes, PlacementManager* placement,
                   const Limits& limits, const Gate* gate)
      : nodes_(nodes), placement_(placement), limits_(limits), gate_(gate) {}

  grpc::ServerUnaryReactor* RegisterNodes(
      grpc::CallbackServerContext* context,
      const v1::RegisterNodesRequest* request,
      v1::RegisterNodesResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* DrainNode(grpc::CallbackServerContext* context,
                                      const v1::DrainNodeRequest* request,
                                      v1::DrainNodeResponse* response) override;
  grpc::ServerUnaryReactor* UndrainNode(
      grpc::CallbackServerContext* context,
      const v1::UndrainNodeRequest* request,
      v1::UndrainNodeResponse* response) override;
  grpc::ServerUnaryReactor* RemoveNode(
      grpc::CallbackServerContext* context,
      const v1::RemoveNodeRequest* request,
      v1::RemoveNodeResponse* response) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* context,
                                    const v1::GetNodeRequest* request,
                                    v1::Node* response) override;
  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* context,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override;
  grpc::ServerUnaryReactor* ListSlices(
      grpc::CallbackServerContext* context,
      const v1::ListSlicesRequest* request,
      v1::ListSlicesResponse* response) override;
  grpc::ServerUnaryReactor* PutComputeClass(
      grpc::CallbackServerContext* context,
      const v1::PutComputeClassRequest* request,
      v1::ComputeClass* response) override;
  grpc::ServerUnaryReactor* ListComputeClasses(
      grpc::CallbackServerContext* context,
      const v1::ListComputeClassesRequest* request,
      v1::ListComputeClassesResponse* response) override;
  grpc::ServerUnaryReactor* DeleteComputeClass(
      grpc::CallbackServerContext* context,
      const v1::DeleteComputeClassRequest* request,
      v1::DeleteComputeClassResponse* response) override;

 private:
  NodeManager* const nodes_;
  PlacementManager* const placement_;
  const Limits limits_;
  const Gate* const gate_;
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_INVENTORY_SERVICE_H_
