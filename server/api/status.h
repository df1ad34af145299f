// absl::Status -> grpc::Status, the one place the mapping lives (unary calls
// and streams alike). absl's codes are gRPC's numbers; only the types
// differ. A status may also name the leader (WithLeader), which a call
// answered with it carries in its trailing metadata. Thread-safe.
#ifndef SLICED_SERVER_API_STATUS_H_
#define SLICED_SERVER_API_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace sliced::server::api {

// Trailing metadata naming the leader on an UNAVAILABLE after which nothing
// was done: a standby's answer, a stepping-down leader's (server/ha.h,
// docs/ha.md), and a deposed one's whose store refused to write
// (storage::DeposedError, named leader empty). The clients follow it to the
// leader; an empty value says that no leader is known yet (a failover is in
// progress), and the clients wait for one within the call's deadline.
inline constexpr char kLeaderMetadataKey[] = "sliced-leader";

grpc::Status ToGrpcStatus(const absl::Status& status);

// `status` naming `leader`: a call answered with it (the overload below)
// carries `leader` in the trailing metadata kLeaderMetadataKey. Only for
// answers after which nothing was done: clients re-send the call there.
absl::Status WithLeader(absl::Status status, absl::string_view leader);

// ToGrpcStatus(status), after adding the leader it names (WithLeader), if
// any, or an empty one for a storage::DeposedError, to `context`'s trailing
// metadata. REQUIRES: the call has not finished.
grpc::Status ToGrpcStatus(const absl::Status& status,
                          grpc::ServerContextBase& context);

// Finishes a unary callback-API call at once with `status`; returns the
// reactor for the handler to return.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_STATUS_H_
