// sliced.v1 Inventory messages <-> domain: nodes, heartbeats, slices and
// compute classes. Pure functions; thread-safe. Every error is
// InvalidArgument and names the field.
#ifndef SLICED_SERVER_API_CONVERT_NODES_H_
#define SLICED_SERVER_API_CONVERT_NODES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "server/core/limits.h"
#include "server/core/node_manager.h"
#include "server/core/placement_group.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server::api {

// RegisterNodes: only ALIVE (or unspecified) states; the rest of the rules
// are ValidateNodes'.
absl::StatusOr<std::vector<scheduler::Node>> NodesFromProto(
    const v1::RegisterNodesRequest& request, const Limits& limits);

absl::StatusOr<std::vector<NodeBeat>> BeatsFromProto(
    const v1::HeartbeatRequest& request, const Limits& limits);

v1::NodeState NodeStateToProto(scheduler::NodeState state);
void NodeToProto(const NodeView& view, v1::Node* out);
void SliceToProto(const SliceView& view, v1::Slice* out);

absl::StatusOr<ComputeClass> ComputeClassFromProto(const v1::ComputeClass& in,
                                                   const Limits& limits);
void ComputeClassToProto(const ComputeClass& cls, v1::ComputeClass* out);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_CONVERT_NODES_H_
