// absl::Status -> grpc::Status, the one place the mapping lives. The codes are
// the same numbers; only the types differ. Thread-safe.
#ifndef SLICED_SERVER_GRPC_STATUS_H_
#define SLICED_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace sliced::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace sliced::server

#endif  // SLICED_SERVER_GRPC_STATUS_H_
