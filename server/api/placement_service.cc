#include "server/api/placement_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/api/convert_placement.h"

namespace sliced::server::api {
namespace {

using Finish = std::function<void(const absl::Status&)>;

// One WatchPlacementGroups stream: the current state, then every change.
class WatchReactor : public StreamReactor<v1::PlacementGroupEvent>,
                     public PlacementManager::Watcher {
 public:
  WatchReactor(PlacementManager* placement,
               v1::WatchPlacementGroupsRequest filter)
      : placement_(placement), filter_(std::move(filter)) {
    set_on_done([this] { placement_->Unwatch(this); });
    placement_->Watch(this);
  }

  void Deliver(const PlacementGroupView& view) override {
    const PlacementGroup& g = view.group;
    if ((!filter_.job_id().empty() && filter_.job_id() != g.job_id) ||
        (!filter_.placement_group_id().empty() &&
         filter_.placement_group_id() != g.id)) {
      return;
    }
    v1::PlacementGroupEvent event;
    PlacementGroupToProto(view, event.mutable_placement_group());
    StreamReactor::Deliver(std::move(event));
  }

 private:
  PlacementManager* const placement_;
  const v1::WatchPlacementGroupsRequest filter_;
};

}  // namespace

grpc::ServerUnaryReactor* PlacementService::Create(
    grpc::CallbackServerContext* context, Rpc rpc, absl::StatusOr<PgSpec> spec,
    v1::PlacementGroup* response) {
  return gate_->Async(context, rpc, [&](Finish finish) {
    if (!spec.ok()) return finish(spec.status());
    placement_->Create(*std::move(spec), [response, finish](auto view) {
      if (view.ok()) PlacementGroupToProto(*view, response);
      finish(view.status());
    });
  });
}

grpc::ServerUnaryReactor* PlacementService::CreatePlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::CreatePlacementGroupRequest* request,
    v1::PlacementGroup* response) {
  return Create(context, Rpc::kCreatePlacementGroup,
                PgSpecFromProto(*request, limits_), response);
}

grpc::ServerUnaryReactor* PlacementService::SubmitScalingConfig(
    grpc::CallbackServerContext* context,
    const v1::SubmitScalingConfigRequest* request,
    v1::PlacementGroup* response) {
  return Create(context, Rpc::kSubmitScalingConfig,
                PgSpecFromProto(*request, limits_), response);
}

grpc::ServerUnaryReactor* PlacementService::GetPlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::GetPlacementGroupRequest* request, v1::PlacementGroup* response) {
  return gate_->Unary(context, Rpc::kGetPlacementGroup, [&] {
    ASSIGN_OR_RETURN(PlacementGroupView view,
                     placement_->Get(request->placement_group_id()));
    PlacementGroupToProto(view, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PlacementService::ListPlacementGroups(
    grpc::CallbackServerContext* context,
    const v1::ListPlacementGroupsRequest* request,
    v1::ListPlacementGroupsResponse* response) {
  return gate_->Unary(context, Rpc::kListPlacementGroups, [&] {
    ASSIGN_OR_RETURN(PlacementManager::ListFilter filter,
                     ListFilterFromProto(*request));
    for (const PlacementGroupView& view : placement_->List(filter)) {
      PlacementGroupToProto(view, response->add_placement_groups());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PlacementService::RemovePlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::RemovePlacementGroupRequest* request,
    v1::RemovePlacementGroupResponse* /*response*/) {
  return gate_->Async(context, Rpc::kRemovePlacementGroup, [&](Finish finish) {
    placement_->Remove(request->placement_group_id(), finish);
  });
}

grpc::ServerWriteReactor<v1::PlacementGroupEvent>*
PlacementService::WatchPlacementGroups(
    grpc::CallbackServerContext* context,
    const v1::WatchPlacementGroupsRequest* request) {
  return gate_->Stream<v1::PlacementGroupEvent>(
      context, Rpc::kWatchPlacementGroups,
      [&]() -> absl::StatusOr<
                grpc::ServerWriteReactor<v1::PlacementGroupEvent>*> {
        RETURN_IF_ERROR(streams_->TryAcquire());
        auto* reactor = new WatchReactor(placement_, *request);
        reactor->set_slot(streams_, context);
        return reactor;
      });
}

grpc::ServerUnaryReactor* PlacementService::ExplainPlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::ExplainPlacementGroupRequest* request,
    v1::ExplainPlacementGroupResponse* response) {
  return gate_->Unary(context, Rpc::kExplainPlacementGroup, [&] {
    absl::StatusOr<PlacementManager::Explanation> explanation;
    switch (request->target_case()) {
      case v1::ExplainPlacementGroupRequest::kPlacementGroupId:
        explanation = placement_->Explain(request->placement_group_id());
        break;
      case v1::ExplainPlacementGroupRequest::kDryRun: {
        ASSIGN_OR_RETURN(PgSpec spec,
                         PgSpecFromProto(request->dry_run(), limits_));
        explanation = placement_->ExplainDryRun(spec);
        break;
      }
      case v1::ExplainPlacementGroupRequest::kDryRunScalingConfig: {
        ASSIGN_OR_RETURN(
            PgSpec spec,
            PgSpecFromProto(request->dry_run_scaling_config(), limits_));
        explanation = placement_->ExplainDryRun(spec);
        break;
      }
      default:
        return absl::InvalidArgumentError(
            "target: give placement_group_id, dry_run or "
            "dry_run_scaling_config");
    }
    RETURN_IF_ERROR(explanation.status());
    ExplanationToProto(*explanation, response);
    return absl::OkStatus();
  });
}

}  // namespace sliced::server::api
