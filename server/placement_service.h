// sliced.v1.Placement on gRPC's callback API, and the hub that streams
// placement-group changes to WatchPlacementGroups callers.
//
// Thread-safe: handlers run on gRPC's threads; writes go through the
// Coordinator; the hub is fed on the coordinator's writer thread.
#ifndef SLICED_SERVER_PLACEMENT_SERVICE_H_
#define SLICED_SERVER_PLACEMENT_SERVICE_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/auth.h"
#include "server/coordinator.h"
#include "server/limits.h"
#include "server/placement.h"
#include "server/stream_reactor.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server {

// Fans placement-group changes out to watchers.
class WatchHub {
 public:
  class Watcher {
   public:
    virtual ~Watcher() = default;
    virtual void Deliver(const v1::PlacementGroup& pg) = 0;
  };
  void Add(Watcher* watcher);
  void Remove(Watcher* watcher);
  void Publish(const std::vector<v1::PlacementGroup>& changes);

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

class PlacementService final : public v1::Placement::CallbackService {
 public:
  PlacementService(Coordinator* coordinator, WatchHub* hub,
                   const Limits& limits, const PlacementPolicy& policy,
                   StreamLimiter* streams, const Authenticator* auth = nullptr)
      : coordinator_(coordinator),
        hub_(hub),
        limits_(limits),
        policy_(policy),
        streams_(streams),
        auth_(auth) {}

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
  grpc::ServerWriteReactor<v1::PlacementGroupEvent>* WatchPlacementGroups(
      grpc::CallbackServerContext* context,
      const v1::WatchPlacementGroupsRequest* request) override;
  grpc::ServerUnaryReactor* ExplainPlacementGroup(
      grpc::CallbackServerContext* context,
      const v1::ExplainPlacementGroupRequest* request,
      v1::ExplainPlacementGroupResponse* response) override;

 private:
  Coordinator* const coordinator_;
  WatchHub* const hub_;
  const Limits limits_;
  const PlacementPolicy policy_;
  StreamLimiter* const streams_;
  const Authenticator* const auth_;  // null: auth off
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_PLACEMENT_SERVICE_H_
