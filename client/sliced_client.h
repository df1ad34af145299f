// SlicedClient: a thin C++ client for the sliced API (Inventory, Placement,
// Telemetry). Every call returns absl::Status / absl::StatusOr with the
// server's code and message unchanged (absl and gRPC share the codes), runs
// under a deadline, and is retried with exponential backoff on UNAVAILABLE
// (and on CANCELLED, which only a server dropping the call as it stops can
// cause here) when a retry cannot do anything twice:
//   - reads (Get/List/Explain/GetClusterSummary, the opening of a watch);
//   - upserts whose repetition is harmless (RegisterNodes, DrainNode,
//     UndrainNode, PutComputeClass, Heartbeat);
//   - creates (CreatePlacementGroup, SubmitScalingConfig), because they always
//     carry a request_id: when the caller gives none, one is generated, so a
//     retry after a lost reply gets the same placement group back.
// Removes and deletes (RemoveNode, RemovePlacementGroup, DeleteComputeClass)
// are retried too: their NOT_FOUND after an attempt that may have reached the
// daemon (its reply lost, or a daemon's CANCELLED) means the earlier attempt
// removed it, and counts as success; NOT_FOUND on a first attempt, or after
// refusals that did nothing (a standby's), stands. With a bearer token set,
// every call carries it.
// High availability (docs/ha.md): a standby daemon answers UNAVAILABLE with
// the leader's address in the trailing metadata `sliced-leader`; the client
// then sends this call (any call: a standby did nothing) and the later ones
// to the leader, up to 3 redirects in a row; when the daemon it followed is
// unreachable, it goes back to options.server. Give every daemon there (a
// gRPC target such as "ipv4:10.0.0.1:50051,10.0.0.2:50051", or a DNS name
// listing them) so that a dead leader's standby is found. While a failover
// is in progress a standby knows no leader (`sliced-leader` is empty): any
// call then waits for the new leader, backing off (at most 0.5 s apart,
// jittered) until the call's deadline, without spending its attempts —
// unless max_attempts is 1 (retries off). The last try goes early enough to
// be answered (the slowest refusal's time plus 50 ms before the deadline),
// so a failover that outlasts the deadline ends in the standby's
// UNAVAILABLE, which says nothing was done, not in DEADLINE_EXCEEDED. Calls on
// a target listing several daemons ("ipv4:...,..." or "ipv6:...,...") go to
// each connected one in turn (round robin), so such waits ask every daemon, and
// one that can't reach etcd does not hold the client.
//
// Example:
//   sliced::client::ClientOptions options;
//   options.server = "127.0.0.1:50051";
//   auto client = sliced::client::SlicedClient::Create(options);
//   if (!client.ok()) return client.status();
//   sliced::v1::SubmitScalingConfigRequest request;
//   request.mutable_scaling_config()->set_num_workers(4);
//   ...
//   absl::StatusOr<sliced::v1::PlacementGroup> pg =
//       (*client)->SubmitScalingConfig(request);
//
// Thread-safety: a SlicedClient is safe to share between threads (gRPC stubs
// are thread-safe; the daemon it follows is guarded by a mutex).
#ifndef SLICED_CLIENT_SLICED_CLIENT_H_
#define SLICED_CLIENT_SLICED_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/status.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::client {

struct ClientOptions {
  // host:port of the daemon, or any gRPC target (with etcd HA, one listing
  // every daemon: "ipv4:10.0.0.1:50051,10.0.0.2:50051").
  std::string server = "127.0.0.1:50051";
  // Deadline of one call, covering all of its attempts.
  absl::Duration timeout = absl::Seconds(10);
  // Attempts per retryable call (1 disables retries, and the wait for a
  // new leader during a failover). Must be >= 1.
  int max_attempts = 4;
  // Backoff before the second attempt; doubles per attempt up to max_backoff.
  // The channel reconnects to an unreachable daemon on the same schedule
  // (not gRPC's default of 1 s growing to 120 s, during which every call
  // fails at once).
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);

  // TLS, for the security work. When root_ca_pem is set (a file path) the
  // channel uses grpc::SslCredentials with that CA; client_cert_pem and
  // client_key_pem (file paths, both or neither) add a client certificate for
  // mutual TLS. All empty (the default): a plaintext channel.
  std::string root_ca_pem;
  std::string client_cert_pem;
  std::string client_key_pem;

  // Bearer token for the daemon's token auth (--auth_tokens): sent on every
  // call as `authorization: Bearer <token>`. Empty (the default): none.
  std::string bearer_token;
};

// grpc::Status -> absl::Status: the one place the mapping lives. The codes are
// the same numbers and the message is kept as the server gave it.
absl::Status FromGrpcStatus(const grpc::Status& status);

class SlicedClient {
 public:
  // Returns a client for options.server. The channel connects lazily, so an
  // unreachable server shows up as UNAVAILABLE on the first call.
  // Errors: INVALID_ARGUMENT for bad options (empty server, max_attempts < 1,
  // a TLS file that cannot be read, a cert without its key).
  static absl::StatusOr<std::unique_ptr<SlicedClient>> Create(
      const ClientOptions& options);

  // A client over an existing channel (tests, or callers with their own
  // channel arguments). With `credentials`, it follows a standby's redirect
  // to the leader on a new channel; without, it stays on `channel`.
  // REQUIRES: channel != nullptr.
  SlicedClient(std::shared_ptr<grpc::Channel> channel,
               const ClientOptions& options,
               std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  // The daemon calls go to: options().server until a standby names another.
  std::string server() const;

  const ClientOptions& options() const { return options_; }

  // ---- Inventory
  absl::StatusOr<v1::RegisterNodesResponse> RegisterNodes(
      const v1::RegisterNodesRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);
  absl::StatusOr<v1::Node> DrainNode(absl::string_view node_id);
  // DRAINING -> ALIVE; on a DEAD node, clears its drain for when it is back.
  absl::StatusOr<v1::Node> UndrainNode(absl::string_view node_id);
  // FAILED_PRECONDITION if the node holds placements, unless force.
  absl::Status RemoveNode(absl::string_view node_id, bool force);
  absl::StatusOr<v1::Node> GetNode(absl::string_view node_id);
  // One page; see ListAllNodes for every page.
  absl::StatusOr<v1::ListNodesResponse> ListNodes(
      const v1::ListNodesRequest& request);
  // Every matching node, following next_page_token; the result has no token.
  absl::StatusOr<v1::ListNodesResponse> ListAllNodes(
      v1::ListNodesRequest request);
  absl::StatusOr<v1::ListSlicesResponse> ListSlices();
  absl::StatusOr<v1::ComputeClass> PutComputeClass(
      const v1::PutComputeClassRequest& request);
  absl::StatusOr<v1::ListComputeClassesResponse> ListComputeClasses();
  absl::Status DeleteComputeClass(absl::string_view name);

  // ---- Placement
  // A request without request_id gets a generated one (see the file comment);
  // the returned group carries it.
  absl::StatusOr<v1::PlacementGroup> CreatePlacementGroup(
      v1::CreatePlacementGroupRequest request);
  absl::StatusOr<v1::PlacementGroup> SubmitScalingConfig(
      v1::SubmitScalingConfigRequest request);
  absl::StatusOr<v1::PlacementGroup> GetPlacementGroup(absl::string_view id);
  // One page; see ListAllPlacementGroups for every page.
  absl::StatusOr<v1::ListPlacementGroupsResponse> ListPlacementGroups(
      const v1::ListPlacementGroupsRequest& request);
  // Every matching group, following next_page_token; the result has no
  // token.
  absl::StatusOr<v1::ListPlacementGroupsResponse> ListAllPlacementGroups(
      v1::ListPlacementGroupsRequest request);
  absl::Status RemovePlacementGroup(absl::string_view id);
  absl::StatusOr<v1::ExplainPlacementGroupResponse> ExplainPlacementGroup(
      const v1::ExplainPlacementGroupRequest& request);

  // Streams WatchPlacementGroups: on_event gets the current state of the
  // matching groups, then every change, until it returns false (then OK), the
  // stream ends, or `timeout` passes (DEADLINE_EXCEEDED;
  // absl::InfiniteDuration() waits forever). Opening the stream is retried on
  // UNAVAILABLE until the first event arrives; a broken stream afterwards is
  // returned as its error, except one the daemon ended ABORTED because it
  // fell behind (a slow reader, a re-read of the daemon's store): that is
  // opened again, up to 3 times, and on_event gets the current state again.
  absl::Status WatchPlacementGroups(
      const v1::WatchPlacementGroupsRequest& request, absl::Duration timeout,
      absl::FunctionRef<bool(const v1::PlacementGroupEvent&)> on_event);

  // Watches one group until it is CREATED or INFEASIBLE (or REMOVED) and
  // returns it in that state. DEADLINE_EXCEEDED if `timeout` passes first
  // (and only then: a first read past the call's own timeout is
  // UNAVAILABLE); NOT_FOUND if there is no such group (or no more). A watch
  // that breaks (UNAVAILABLE: the daemon stepped down or restarted;
  // ABORTED; CANCELLED) is followed, after a backoff, by a fresh read and a
  // new watch, and the group is read at least every 30 s: a removal that a
  // re-opened watch cannot report (a removed group is not in its current
  // state) still ends the wait.
  absl::StatusOr<v1::PlacementGroup> WaitForPlacementGroup(
      absl::string_view id, absl::Duration timeout);

  // ---- Telemetry
  absl::StatusOr<v1::GetClusterSummaryResponse> GetClusterSummary();

 private:
  // What repeating a call does (docs/clients.md, "Retries, deadlines,
  // idempotency").
  enum class Repeat {
    kHarmless,  // nothing twice: reads, upserts, creates with a request_id
    kRemove,    // a remove or delete: NOT_FOUND after an attempt that may
                // have reached the daemon is the earlier attempt's success
  };
  // Runs `attempt` (one RPC under the given context) until it succeeds, fails
  // with a code other than UNAVAILABLE or CANCELLED, runs out of attempts or
  // the call's deadline would pass during the backoff. Answers after which
  // nothing was done (a standby's) spend no attempt.
  absl::Status Call(
      Repeat repeat,
      absl::FunctionRef<grpc::Status(grpc::ClientContext*)> attempt);

  // Call() for a unary RPC: rpc(context, &response) -> grpc::Status.
  template <typename Response, typename Rpc>
  absl::StatusOr<Response> Unary(Repeat repeat, Rpc rpc) {
    Response response;
    absl::Status status = Call(repeat, [&](grpc::ClientContext* context) {
      response.Clear();
      return rpc(context, &response);
    });
    if (!status.ok()) return status;
    return response;
  }

  // A context for one attempt: deadline (unless infinite) and credentials.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;

  // One daemon's channel and stubs; kept for the client's life once made
  // (calls on other threads may still be using them).
  struct Endpoint {
    explicit Endpoint(std::shared_ptr<grpc::Channel> c);
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Inventory::Stub> inventory;
    std::unique_ptr<v1::Placement::Stub> placement;
    std::unique_ptr<v1::Telemetry::Stub> telemetry;
  };
  // Where calls go now.
  Endpoint* Current() const;
  // A standby named `leader`: calls go there from now on. False when the
  // client can't follow (no credentials) or already calls it.
  bool Follow(const std::string& leader);
  // What an UNAVAILABLE attempt's trailing metadata `sliced-leader` says.
  enum class Refusal {
    kFollowed,  // it named the leader, and calls go there now
    kFailover,  // a daemon not leading knows no leader yet: nothing was done
    kOther,     // no such metadata (the daemon may be gone), or a leader
                // this client could not follow
  };
  // After an UNAVAILABLE attempt under `context`: Follow()s the leader its
  // trailing metadata names, if `may_follow`; when it names none, or an
  // empty one (kFailover), FollowBack()s.
  Refusal Refused(const grpc::ClientContext& context, bool may_follow);
  // After an attempt that ended `status` under `context`: how it may be
  // tried again — UNAVAILABLE as Refused() reads it; CANCELLED as kOther (a
  // daemon dropped the call as it stopped, docs/ha.md: this client cancels
  // a call only after a watch's event, which is never retried) — or
  // nullopt for any other status, OK included: the answer stands.
  std::optional<Refusal> Retryable(const grpc::Status& status,
                                   const grpc::ClientContext& context,
                                   bool may_follow);
  // An unreachable daemon, or a standby that knows no leader: calls go back
  // to options.server (which may list every daemon:
  // "ipv4:host1:port,host2:port").
  void FollowBack();

  const ClientOptions options_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_ ABSL_GUARDED_BY(mu_);
  Endpoint* current_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// A fresh random request id ("req-" + 32 hex digits).
std::string NewRequestId();

}  // namespace sliced::client

#endif  // SLICED_CLIENT_SLICED_CLIENT_H_
