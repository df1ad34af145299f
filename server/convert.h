// Proto (sliced.v1) <-> domain conversion, with input validation, in one
// place: service handlers call these and never touch scheduler types
// directly with wire values. Pure functions; thread-safe.
//
// Every error is InvalidArgument and names the field path (e.g.
// `nodes[2] (node_id "h1"): labels["-bad"]: ...`) and the rule.
#ifndef SLICED_SERVER_CONVERT_H_
#define SLICED_SERVER_CONVERT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/types.h"
#include "server/limits.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server {

// Returns `status` with "<prefix>: " before its message (OK stays OK).
absl::Status WithFieldPrefix(absl::string_view prefix,
                             const absl::Status& status);

// Validates a node id: 1..max_id_length chars of [A-Za-z0-9._:-], starting
// with a letter or digit.
absl::Status ValidateNodeId(absl::string_view id, const Limits& limits);

// Converts and validates a batch of nodes for RegisterNodes: ids, addresses,
// labels (after GKE translation), resources, limits, no duplicate ids.
absl::StatusOr<std::vector<scheduler::Node>> NodesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Node>& nodes,
    const Limits& limits);

// Converts wire resources to fixed point. `field` prefixes error messages.
absl::StatusOr<scheduler::ResourceSet> ResourcesFromProto(
    const google::protobuf::Map<std::string, double>& resources,
    absl::string_view field, const Limits& limits);

void ResourcesToProto(const scheduler::ResourceSet& resources,
                      google::protobuf::Map<std::string, double>* out);

v1::NodeState NodeStateToProto(scheduler::NodeState state);

// Fills the fields of `out` known to the domain node.
void NodeToProto(const scheduler::Node& node, v1::Node* out);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CONVERT_H_
