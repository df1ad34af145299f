#include "server/api/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"
#include "storage/store.h"

namespace sliced::server::api {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

namespace {

// The absl::Status payload WithLeader sets (never sent as it is).
constexpr char kLeaderPayload[] = "sliced.dev/leader";

}  // namespace

absl::Status WithLeader(absl::Status status, absl::string_view leader) {
  status.SetPayload(kLeaderPayload, absl::Cord(leader));
  return status;
}

grpc::Status ToGrpcStatus(const absl::Status& status,
                          grpc::ServerContextBase& context) {
  if (absl::optional<absl::Cord> leader = status.GetPayload(kLeaderPayload)) {
    context.AddTrailingMetadata(kLeaderMetadataKey, std::string(*leader));
  } else if (storage::IsDeposed(status)) {
    // A leader that lost its election and wrote nothing: it knows no leader
    // (an empty name), and the clients look for one.
    context.AddTrailingMetadata(kLeaderMetadataKey, "");
  }
  return ToGrpcStatus(status);
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, *context));
  return reactor;
}

}  // namespace sliced::server::api
