// absl::Status -> grpc::Status, the one place the mapping lives. The codes are
// the same numbers; only the types differ. Thread-safe.
#ifndef SLICED_SERVER_GRPC_STATUS_H_
#define SLICED_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace sliced::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// Finishes a unary callback-API call at once with `status`; returns the
// reactor for the handler to return.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status);

}  // namespace sliced::server

#endif  // SLICED_SERVER_GRPC_STATUS_H_
