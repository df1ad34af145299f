#include "server/api/placement_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/api/convert_common.h"
#include "server/api/convert_placement.h"
#include "server/core/validation.h"

namespace sliced::server::api {
namespace {

using Finish = std::function<void(const absl::Status&)>;

// One WatchPlacementGroups stream: the current state, then every change,
// serialized once by the hub for every stream that gets it.
class WatchReactor : public StreamReactor<grpc::ByteBuffer>,
                     public WatchHub::Stream {
 public:
  explicit WatchReactor(WatchHub* hub) : hub_(hub) {
    set_on_done([this] { hub_->Remove(this); });
  }
  void Send(const grpc::ByteBuffer& event) override { Deliver(event); }
  void Queue(const grpc::ByteBuffer& event) override {
    StreamReactor::Queue(event);
  }
  void Flush() override { StreamReactor::Flush(); }
  void End(const absl::Status& status) override { EndWith(status); }

 private:
  WatchHub* const hub_;
};

// WatchPlacementGroupsRequest from the raw request.
absl::StatusOr<v1::WatchPlacementGroupsRequest> ParseWatch(
    const grpc::ByteBuffer& raw) {
  grpc::ByteBuffer copy(raw);
  v1::WatchPlacementGroupsRequest request;
  if (!grpc::SerializationTraits<v1::WatchPlacementGroupsRequest>::Deserialize(
           &copy, &request)
           .ok()) {
    return absl::InvalidArgumentError(
        "request: not a WatchPlacementGroupsRequest");
  }
  return request;
}

}  // namespace

grpc::ServerUnaryReactor* PlacementService::Create(
    grpc::CallbackServerContext* context, Rpc rpc, absl::StatusOr<PgSpec> spec,
    v1::PlacementGroup* response) {
  return gate_->Async(context, rpc, [&](Finish finish) {
    if (!spec.ok()) return finish(spec.status());
    const bool basic = spec->reply == ReplyDetail::kBasic;
    placement_->Create(*std::move(spec), [response, finish, basic](auto view) {
      if (view.ok() && basic) {
        BasicPlacementGroupToProto(*view, response);
      } else if (view.ok()) {
        PlacementGroupToProto(*view, response);
      }
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
    ASSIGN_OR_RETURN(const int page_size,
                     PageSizeFromProto(request->page_size(), limits_));
    // The page token is the last group id of the previous page.
    for (const PlacementGroupView& view :
         placement_->List(filter, request->page_token(), page_size,
                          response->mutable_next_page_token())) {
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

grpc::ServerWriteReactor<grpc::ByteBuffer>*
PlacementService::WatchPlacementGroups(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* raw) {
  return gate_->Stream<grpc::ByteBuffer>(
      context, Rpc::kWatchPlacementGroups,
      [&]() -> absl::StatusOr<grpc::ServerWriteReactor<grpc::ByteBuffer>*> {
        ASSIGN_OR_RETURN(v1::WatchPlacementGroupsRequest request,
                         ParseWatch(*raw));
        RETURN_IF_ERROR(streams_->TryAcquire());
        auto* reactor = new WatchReactor(hub_);
        reactor->set_slot(streams_, context);
        hub_->Add(reactor, request.job_id(), request.placement_group_id());
        // The current state is queued whatever its size; then the bound.
        reactor->set_max_pending_bytes(limits_.max_watch_buffer_bytes);
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
        auto spec = PgSpecFromProto(request->dry_run(), limits_);
        if (!spec.ok()) return WithFieldPrefix("dry_run", spec.status());
        explanation = placement_->ExplainDryRun(*spec);
        break;
      }
      case v1::ExplainPlacementGroupRequest::kDryRunScalingConfig: {
        auto spec = PgSpecFromProto(request->dry_run_scaling_config(), limits_);
        if (!spec.ok()) {
          return WithFieldPrefix("dry_run_scaling_config", spec.status());
        }
        explanation = placement_->ExplainDryRun(*spec);
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
