// absl::Status -> grpc::Status, the one place the mapping lives (unary calls
// and streams alike). absl's codes are gRPC's numbers; only the types
// differ. Thread-safe.
#ifndef SLICED_SERVER_API_STATUS_H_
#define SLICED_SERVER_API_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace sliced::server::api {

grpc::Status ToGrpcStatus(const absl::Status& status);

// Finishes a unary callback-API call at once with `status`; returns the
// reactor for the handler to return.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_STATUS_H_
