// sliced.v1.Inventory on gRPC's callback API: each handler converts the
// request, submits a WriteOp to the coordinator (or reads its state), and
// converts the result back.
//
// Thread-safe: handlers run on gRPC's threads; state lives in the Coordinator.
#ifndef SLICED_SERVER_INVENTORY_SERVICE_H_
#define SLICED_SERVER_INVENTORY_SERVICE_H_

#include "server/auth.h"
#include "server/coordinator.h"
#include "server/limits.h"
#include "server/log_store.h"
#include "server/placement.h"
#include "server/telemetry_store.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server {

class InventoryService final : public v1::Inventory::CallbackService {
 public:
  // `logs` and `telemetry` (optional) forget a node when it is removed.
  InventoryService(Coordinator* coordinator, const Limits& limits,
                   const PlacementPolicy& policy, LogStore* logs = nullptr,
                   TelemetryStore* telemetry = nullptr,
                   const Authenticator* auth = nullptr)
      : coordinator_(coordinator),
        limits_(limits),
        policy_(policy),
        logs_(logs),
        telemetry_(telemetry),
        auth_(auth) {}

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
  // Submits `apply` as a WriteOp and finishes the call when it is done.
  grpc::ServerUnaryReactor* Write(grpc::CallbackServerContext* context,
                                  std::function<absl::Status(Txn&)> apply);

  Coordinator* const coordinator_;
  const Limits limits_;
  const PlacementPolicy policy_;
  LogStore* const logs_;
  TelemetryStore* const telemetry_;
  const Authenticator* const auth_;  // null: auth off
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_INVENTORY_SERVICE_H_
