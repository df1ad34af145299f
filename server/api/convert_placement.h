// sliced.v1 Placement messages <-> domain: create / submit requests to
// validated specs, groups and their workers, explanations. Pure functions;
// thread-safe. Every error is InvalidArgument and names the field.
#ifndef SLICED_SERVER_API_CONVERT_PLACEMENT_H_
#define SLICED_SERVER_API_CONVERT_PLACEMENT_H_

#include "absl/status/statusor.h"
#include "server/core/limits.h"
#include "server/core/pg_spec.h"
#include "server/core/placement_manager.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server::api {

absl::StatusOr<PgSpec> PgSpecFromProto(
    const v1::CreatePlacementGroupRequest& request, const Limits& limits);
// Ray's ScalingConfig rules and messages (server/core/scaling_config.h).
absl::StatusOr<PgSpec> PgSpecFromProto(
    const v1::SubmitScalingConfigRequest& request, const Limits& limits);

absl::StatusOr<PlacementManager::ListFilter> ListFilterFromProto(
    const v1::ListPlacementGroupsRequest& request);

v1::PlacementGroupState PgStateToProto(PgState state);
void PlacementGroupToProto(const PlacementGroupView& view,
                           v1::PlacementGroup* out);
// The view's id, state and pending reason only (PlacementGroupView BASIC).
void BasicPlacementGroupToProto(const PlacementGroupView& view,
                                v1::PlacementGroup* out);
void ExplanationToProto(const PlacementManager::Explanation& explanation,
                        v1::ExplainPlacementGroupResponse* out);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_CONVERT_PLACEMENT_H_
