// Who may call what: the one table of sliced.v1 methods and the access each
// needs, and the Gate every handler passes through (DESIGN §6).
//
//   admin      inventory writes and compute classes, and every read
//   scheduler  placement groups and ScalingConfigs, and every read
//   agent      for its own node only (as Kubernetes' NodeRestriction does
//              for kubelets): register it, drain it, heartbeat, report
//              TPU telemetry and logs; not undrain or remove it
//   viewer     reads (Get/List/Watch/Explain/Tail/Summary)
//
// Handlers do not check anything themselves: Gate::Unary / Gate::Async /
// Gate::Stream look the method up in kRpcRules, admit or refuse the caller
// (Unauthenticated / PermissionDenied), and only then run the handler's
// body. Health and reflection are not sliced services and stay open.
// A leader stepping down (server/ha.h) makes the gate Refuse() every call.
//
// Thread-safe.
#ifndef SLICED_SERVER_API_GATE_H_
#define SLICED_SERVER_API_GATE_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "server/api/auth.h"
#include "server/api/status.h"
#include "server/api/stream_reactor.h"

namespace sliced::server::api {

enum class Rpc {
  kRegisterNodes,
  kHeartbeat,
  kDrainNode,
  kUndrainNode,
  kRemoveNode,
  kGetNode,
  kListNodes,
  kListSlices,
  kPutComputeClass,
  kListComputeClasses,
  kDeleteComputeClass,
  kCreatePlacementGroup,
  kSubmitScalingConfig,
  kGetPlacementGroup,
  kListPlacementGroups,
  kRemovePlacementGroup,
  kWatchPlacementGroups,
  kExplainPlacementGroup,
  kReportTpuMetrics,
  kGetClusterSummary,
  kAppendLogs,
  kTailLogs,
};

struct RpcRule {
  Rpc rpc;
  absl::string_view method;  // full gRPC name, "sliced.v1.Inventory/GetNode"
  Access access;
};

// Every sliced.v1 method, in proto order.
inline constexpr RpcRule kRpcRules[] = {
    {Rpc::kRegisterNodes, "sliced.v1.Inventory/RegisterNodes",
     Access::kNodeAgent},
    {Rpc::kHeartbeat, "sliced.v1.Inventory/Heartbeat", Access::kNodeAgent},
    {Rpc::kDrainNode, "sliced.v1.Inventory/DrainNode", Access::kNodeAgent},
    {Rpc::kUndrainNode, "sliced.v1.Inventory/UndrainNode", Access::kInventory},
    {Rpc::kRemoveNode, "sliced.v1.Inventory/RemoveNode", Access::kInventory},
    {Rpc::kGetNode, "sliced.v1.Inventory/GetNode", Access::kRead},
    {Rpc::kListNodes, "sliced.v1.Inventory/ListNodes", Access::kRead},
    {Rpc::kListSlices, "sliced.v1.Inventory/ListSlices", Access::kRead},
    {Rpc::kPutComputeClass, "sliced.v1.Inventory/PutComputeClass",
     Access::kInventory},
    {Rpc::kListComputeClasses, "sliced.v1.Inventory/ListComputeClasses",
     Access::kRead},
    {Rpc::kDeleteComputeClass, "sliced.v1.Inventory/DeleteComputeClass",
     Access::kInventory},
    {Rpc::kCreatePlacementGroup, "sliced.v1.Placement/CreatePlacementGroup",
     Access::kPlacement},
    {Rpc::kSubmitScalingConfig, "sliced.v1.Placement/SubmitScalingConfig",
     Access::kPlacement},
    {Rpc::kGetPlacementGroup, "sliced.v1.Placement/GetPlacementGroup",
     Access::kRead},
    {Rpc::kListPlacementGroups, "sliced.v1.Placement/ListPlacementGroups",
     Access::kRead},
    {Rpc::kRemovePlacementGroup, "sliced.v1.Placement/RemovePlacementGroup",
     Access::kPlacement},
    {Rpc::kWatchPlacementGroups, "sliced.v1.Placement/WatchPlacementGroups",
     Access::kRead},
    {Rpc::kExplainPlacementGroup, "sliced.v1.Placement/ExplainPlacementGroup",
     Access::kRead},
    {Rpc::kReportTpuMetrics, "sliced.v1.Telemetry/ReportTpuMetrics",
     Access::kNodeAgent},
    {Rpc::kGetClusterSummary, "sliced.v1.Telemetry/GetClusterSummary",
     Access::kRead},
    {Rpc::kAppendLogs, "sliced.v1.Telemetry/AppendLogs", Access::kNodeAgent},
    {Rpc::kTailLogs, "sliced.v1.Telemetry/TailLogs", Access::kRead},
};

// The rule of `rpc`.
const RpcRule& RuleOf(Rpc rpc);

class Gate {
 public:
  // `auth` null: auth off, everyone is admitted. REQUIRES: `auth` outlives
  // the gate.
  explicit Gate(const Authenticator* auth) : auth_(auth) {}

  // OK when the caller may call `rpc`; for agent RPCs, for every node of
  // `node_ids`. Unauthenticated or PermissionDenied otherwise; Refuse()'s
  // status once it was called.
  absl::Status Admit(const grpc::ServerContextBase& context, Rpc rpc,
                     const std::vector<std::string>& node_ids = {}) const;

  // A unary call answered at once: admits, then finishes with `body()`'s
  // status.
  template <typename Body>
  grpc::ServerUnaryReactor* Unary(
      grpc::CallbackServerContext* context, Rpc rpc, Body body,
      const std::vector<std::string>& node_ids = {}) const {
    absl::Status admitted = Admit(*context, rpc, node_ids);
    return FinishUnary(context, admitted.ok() ? body() : admitted);
  }

  // A unary call answered later: admits, then runs `body(finish)`; the call
  // ends when `finish(status)` is called (exactly once, from any thread).
  template <typename Body>
  grpc::ServerUnaryReactor* Async(
      grpc::CallbackServerContext* context, Rpc rpc, Body body,
      const std::vector<std::string>& node_ids = {}) const {
    absl::Status admitted = Admit(*context, rpc, node_ids);
    if (!admitted.ok()) return FinishUnary(context, admitted);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    body([context, reactor](const absl::Status& s) {
      reactor->Finish(ToGrpcStatus(s, *context));
    });
    return reactor;
  }

  // A server stream: admits, then returns `body()`, a
  // StatusOr<ServerWriteReactor<Message>*>; an error ends the stream.
  template <typename Message, typename Body>
  grpc::ServerWriteReactor<Message>* Stream(
      grpc::CallbackServerContext* context, Rpc rpc, Body body) const {
    absl::Status admitted = Admit(*context, rpc);
    if (!admitted.ok()) return new FailedStream<Message>(admitted, *context);
    absl::StatusOr<grpc::ServerWriteReactor<Message>*> stream = body();
    if (!stream.ok()) {
      return new FailedStream<Message>(stream.status(), *context);
    }
    return *stream;
  }

  // Leadership is gone (server/ha.h): from now on every call is answered
  // `refusal` (UNAVAILABLE naming the leader, WithLeader) before its
  // handler runs.
  void Refuse(const absl::Status& refusal);

 private:
  const Authenticator* const auth_;
  mutable absl::Mutex mu_;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_GATE_H_
