// sliced.v1.Placement on gRPC's callback API. Each handler: pass the gate,
// convert the request, call the placement manager, convert the result back.
// WatchPlacementGroups streams the current state of every matching group,
// then every change; it is a raw method (serialized events, fanned out by
// WatchHub: each change serialized once for all the streams it concerns),
// and a stream whose client falls more than Limits::max_watch_buffer_bytes
// behind (past the current state it was sent first) ends ABORTED.
//
// Thread-safe: handlers run on gRPC's threads; state lives in the managers.
#ifndef SLICED_SERVER_API_PLACEMENT_SERVICE_H_
#define SLICED_SERVER_API_PLACEMENT_SERVICE_H_

#include "server/api/gate.h"
#include "server/api/stream_reactor.h"
#include "server/api/watch_hub.h"
#include "server/core/limits.h"
#include "server/core/placement_manager.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server::api {

// Every method on the callback API, WatchPlacementGroups raw. The chain is
// spelled out (not CallbackService + the raw method on top, whose two
// WatchPlacementGroups would hide each other): a new Placement method must
// be added here.
using PlacementServiceBase =
    v1::Placement::WithCallbackMethod_CreatePlacementGroup<
        v1::Placement::WithCallbackMethod_SubmitScalingConfig<
            v1::Placement::WithCallbackMethod_GetPlacementGroup<
                v1::Placement::WithCallbackMethod_ListPlacementGroups<
                    v1::Placement::WithCallbackMethod_RemovePlacementGroup<
                        v1::Placement::
                            WithRawCallbackMethod_WatchPlacementGroups<
                                v1::Placement::
                                    WithCallbackMethod_ExplainPlacementGroup<
                                        v1::Placement::Service>>>>>>>;

class PlacementService final : public PlacementServiceBase {
 public:
  // REQUIRES: every pointer outlives the service.
  PlacementService(PlacementManager* placement, WatchHub* hub,
                   const Limits& limits, StreamLimiter* streams,
                   const Gate* gate)
      : placement_(placement),
        hub_(hub),
        limits_(limits),
        streams_(streams),
        gate_(gate) {}

  grpc::ServerUnaryReactor* CreatePlacementGroup(
      grpc::CallbackServerContext* context,
      const v1::CreatePlacementGroupRequest* request,
      v1::PlacementGroup* response) override;
  grpc::ServerUnaryReactor* SubmitScalingConfig(
      grpc::CallbackServerContext* context,
      const v1::SubmitScalingConfigRequest* request,
      v1::PlacementGroup* response) override;
  grpc::ServerUnaryReactor* GetPlacementGroup(
      grpc::CallbackServerContext* context,
      const v1::GetPlacementGroupRequest* request,
      v1::PlacementGroup* response) override;
  grpc::ServerUnaryReactor* ListPlacementGroups(
      grpc::CallbackServerContext* context,
      const v1::ListPlacementGroupsRequest* request,
      v1::ListPlacementGroupsResponse* response) override;
  grpc::ServerUnaryReactor* RemovePlacementGroup(
      grpc::CallbackServerContext* context,
      const v1::RemovePlacementGroupRequest* request,
      v1::RemovePlacementGroupResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchPlacementGroups(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* raw) override;
  grpc::ServerUnaryReactor* ExplainPlacementGroup(
      grpc::CallbackServerContext* context,
      const v1::ExplainPlacementGroupRequest* request,
      v1::ExplainPlacementGroupResponse* response) override;

 private:
  // Creates `spec` (or fails with its error) and answers with the group.
  grpc::ServerUnaryReactor* Create(grpc::CallbackServerContext* context,
                                   Rpc rpc, absl::StatusOr<PgSpec> spec,
                                   v1::PlacementGroup* response);

  PlacementManager* const placement_;
  WatchHub* const hub_;
  const Limits limits_;
  StreamLimiter* const streams_;
  const Gate* const gate_;
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_PLACEMENT_SERVICE_H_
