#include "client/sliced_client.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace sliced::client {
namespace {

// The trailing metadata a standby names the leader in (server/api/status.h).
constexpr char kLeaderMetadataKey[] = "sliced-leader";
constexpr int kMaxRedirects = 3;
// The longest wait between calls to a standby that knows no leader yet: the
// new leader is found soon after it leads.
constexpr absl::Duration kFailoverPoll = absl::Milliseconds(500);
// A failover's wait ends this much, plus the slowest of the call's failover
// refusals so far, before the call's deadline, or is not begun: the attempt
// after it has room to get an answer. A standby's refusal says that nothing was
// done and why; an attempt the deadline cuts short says neither.
constexpr absl::Duration kFailoverAttemptRoom = absl::Milliseconds(50);
// How often a watch the daemon ended as fallen behind is opened again (as
// the Python client's watch()).
constexpr int kWatchReopenings = 3;
// WaitForPlacementGroup reads the group again at least this often.
constexpr absl::Duration kWaitRecheck = absl::Seconds(30);

// The attempts, backoff and redirects of one call (or of a watch's opening),
// under its deadline.
class Retries {
 public:
  Retries(const ClientOptions& options, absl::Time deadline)
      : options_(options),
        deadline_(deadline),
        attempts_left_(std::max(1, options.max_attempts)),
        backoff_(options.initial_backoff) {}

  // Whether a standby's redirect may be followed now: up to kMaxRedirects in
  // a row. (A standby may still name the old leader for a moment, which then
  // says it knows none: they count again after each wait.)
  bool may_follow() const { return redirects_ < kMaxRedirects; }
  // A redirect was followed: the next attempt goes at once.
  void Followed() {
    ++redirects_;
    backoff_ = options_.initial_backoff;
  }
  // An attempt starts now (a failover's refusal times it).
  void Starting() { attempt_started_ = absl::Now(); }

  // After a failed attempt: sleeps before the next one (while `channel`, the
  // next attempt's, connects) and returns true, or returns false at once
  // when no attempt is left or the deadline would pass meanwhile.
  // `failover` (a standby that knows no leader yet, which did nothing): the
  // attempt is not spent, unless retries are off (max_attempts 1: a caller
  // with its own backoff), and the wait is at most kFailoverPoll, random in
  // its upper half, so that the clients that lost the leader together do not
  // call the standby in step. A failover's wait also leaves the next attempt
  // room before the deadline (kFailoverAttemptRoom).
  bool WaitForNext(bool failover, grpc::Channel& channel) {
    failover = failover && options_.max_attempts > 1;
    if (!failover && --attempts_left_ <= 0) return false;
    absl::Duration wait = backoff_;
    absl::Duration room;
    if (failover) {
      absl::BitGen gen;
      wait = std::min(backoff_, kFailoverPoll) * absl::Uniform(gen, 0.5, 1.0);
      slowest_refusal_ =
          std::max(slowest_refusal_, absl::Now() - attempt_started_);
      room = slowest_refusal_ + kFailoverAttemptRoom;
    }
    if (absl::Now() + wait + room >= deadline_) return false;
    // Meanwhile the channel of the next attempt connects: one whose
    // connection failed connects again only while something polls it,
    // which a call failing at once does not. Without this a daemon back
    // after a moment (a port handed from standby to leader) would stay
    // unreachable until gRPC's backup poll, up to 5 s later.
    const absl::Time until = absl::Now() + wait;
    channel.WaitForConnected(absl::ToChronoTime(until));
    absl::SleepFor(until - absl::Now());
    backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    redirects_ = 0;
    return true;
  }

 private:
  const ClientOptions& options_;
  const absl::Time deadline_;
  int attempts_left_;
  absl::Duration backoff_;
  int redirects_ = 0;
  absl::Time attempt_started_ = absl::Now();
  absl::Duration slowest_refusal_;  // of the failover's refusals so far
};

absl::StatusOr<std::string> ReadPem(absl::string_view what,
                                    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot read \"", path, "\""));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const ClientOptions& options) {
  const bool has_cert = !options.client_cert_pem.empty();
  const bool has_key = !options.client_key_pem.empty();
  if (options.root_ca_pem.empty()) {
    if (has_cert || has_key) {
      return absl::InvalidArgumentError(
          "client_cert_pem/client_key_pem: need root_ca_pem too (TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (has_cert != has_key) {
    return absl::InvalidArgumentError(
        "client_cert_pem and client_key_pem: give both or neither");
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadPem("root_ca_pem", options.root_ca_pem);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (has_cert) {
    absl::StatusOr<std::string> cert =
        ReadPem("client_cert_pem", options.client_cert_pem);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem("client_key_pem", options.client_key_pem);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

// A channel to `target` that reconnects on the schedule of the attempts:
// gRPC's own reconnect backoff starts at 1 s and grows to 120 s, and until
// it passes every call fails at once, so a daemon back (or a failover's port
// reopened) 0.1 s after a refused connection would stay unreachable to every
// attempt of a call.
std::shared_ptr<grpc::Channel> NewChannel(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(
                  std::max(options.initial_backoff, absl::Milliseconds(1)))));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(
                  std::max(options.max_backoff, options.initial_backoff))));
  // A target listing several daemons ("ipv4:h1:p,h2:p"): each call goes to
  // the next one connected, not always to the first that answered (gRPC's
  // pick_first). So a failover's waits ask every daemon in turn, and a
  // daemon cut off from etcd, which knows no leader for as long as that
  // lasts, does not hold the client while another leads (docs/ha.md). One
  // daemon keeps pick_first, which waits for a port closed for a moment
  // where round_robin fails the call at once.
  if ((absl::StartsWith(target, "ipv4:") ||
       absl::StartsWith(target, "ipv6:")) &&
      absl::StrContains(target, ',')) {
    args.SetLoadBalancingPolicyName("round_robin");
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

bool Settled(v1::PlacementGroupState state) {
  return state == v1::CREATED || state == v1::INFEASIBLE ||
         state == v1::REMOVED;
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

std::string NewRequestId() {
  absl::BitGen gen;
  return absl::StrFormat("req-%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

absl::StatusOr<std::unique_ptr<SlicedClient>> SlicedClient::Create(
    const ClientOptions& options) {
  if (options.server.empty()) {
    return absl::InvalidArgumentError("server: empty (want host:port)");
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts: must be >= 1, got ", options.max_attempts));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout: must be > 0");
  }
  auto credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  return std::make_unique<SlicedClient>(
      NewChannel(options.server, *credentials, options), options, *credentials);
}

SlicedClient::Endpoint::Endpoint(std::shared_ptr<grpc::Channel> c)
    : channel(std::move(c)),
      inventory(v1::Inventory::NewStub(channel)),
      placement(v1::Placement::NewStub(channel)),
      telemetry(v1::Telemetry::NewStub(channel)) {}

SlicedClient::SlicedClient(
    std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
    std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(options), credentials_(std::move(credentials)) {
  endpoints_.push_back(std::make_unique<Endpoint>(std::move(channel)));
  endpoints_.back()->address = options.server;
  current_ = endpoints_.back().get();
}

SlicedClient::Endpoint* SlicedClient::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::string SlicedClient::server() const { return Current()->address; }

SlicedClient::Refusal SlicedClient::Refused(const grpc::ClientContext& context,
                                            bool may_follow) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto leader = trailers.find(kLeaderMetadataKey);
  if (leader == trailers.end() || leader->second.empty()) {
    // Unreachable, so the leader it followed may be gone; or a standby
    // without a leader, which the address given may find sooner.
    FollowBack();
    return leader == trailers.end() ? Refusal::kOther : Refusal::kFailover;
  }
  return may_follow && Follow(std::string(leader->second.data(),
                                          leader->second.size()))
             ? Refusal::kFollowed
             : Refusal::kOther;
}

std::optional<SlicedClient::Refusal> SlicedClient::Retryable(
    const grpc::Status& status, const grpc::ClientContext& context,
    bool may_follow) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return Refused(context, may_follow);
    case grpc::StatusCode::CANCELLED:
      return Refusal::kOther;
    default:
      return std::nullopt;
  }
}

void SlicedClient::FollowBack() {
  absl::MutexLock lock(&mu_);
  current_ = endpoints_.front().get();
}

bool SlicedClient::Follow(const std::string& leader) {
  absl::MutexLock lock(&mu_);
  if (credentials_ == nullptr || leader.empty() ||
      current_->address == leader) {
    return false;
  }
  for (const auto& e : endpoints_) {
    if (e->address == leader) {
      current_ = e.get();
      return true;
    }
  }
  endpoints_.push_back(
      std::make_unique<Endpoint>(NewChannel(leader, credentials_, options_)));
  endpoints_.back()->address = leader;
  current_ = endpoints_.back().get();
  return true;
}

void SlicedClient::Prepare(grpc::ClientContext* context,
                           absl::Time deadline) const {
  if (deadline != absl::InfiniteFuture()) {
    context->set_deadline(absl::ToChronoTime(deadline));
  }
  if (!options_.bearer_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
}

absl::Status SlicedClient::Call(
    Repeat repeat,
    absl::FunctionRef<grpc::Status(grpc::ClientContext*)> attempt) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  Retries retries(options_, deadline);
  // Whether an earlier attempt may have done the work: it failed without a
  // daemon's word that nothing was done (`sliced-leader`, which standbys and
  // a leader stepping down send with their refusals).
  bool may_have_landed = false;
  for (;;) {
    grpc::ClientContext context;
    Prepare(&context, deadline);
    retries.Starting();
    const grpc::Status status = attempt(&context);
    if (repeat == Repeat::kRemove && may_have_landed &&
        status.error_code() == grpc::StatusCode::NOT_FOUND) {
      return absl::OkStatus();  // gone: the lost attempt removed it
    }
    const std::optional<Refusal> refusal =
        Retryable(status, context, retries.may_follow());
    if (!refusal.has_value()) return FromGrpcStatus(status);
    may_have_landed =
        may_have_landed ||
        !context.GetServerTrailingMetadata().contains(kLeaderMetadataKey);
    if (refusal == Refusal::kFollowed) {
      // A standby names the leader and did nothing: go there, at once,
      // without spending an attempt.
      retries.Followed();
      continue;
    }
    // A failover in progress did nothing either: any call waits for the new
    // leader, for as long as its deadline allows.
    if (!retries.WaitForNext(refusal == Refusal::kFailover,
                             *Current()->channel)) {
      return FromGrpcStatus(status);
    }
  }
}

absl::StatusOr<v1::RegisterNodesResponse> SlicedClient::RegisterNodes(
    const v1::RegisterNodesRequest& request) {
  return Unary<v1::RegisterNodesResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->RegisterNodes(context, request, response);
      });
}

absl::StatusOr<v1::HeartbeatResponse> SlicedClient::Heartbeat(
    const v1::HeartbeatRequest& request) {
  return Unary<v1::HeartbeatResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->Heartbeat(context, request, response);
      });
}

namespace {

// The node of a {Node node = 1} reply.
template <typename Response>
absl::StatusOr<v1::Node> NodeOf(absl::StatusOr<Response> response) {
  if (!response.ok()) return response.status();
  return response->node();
}

}  // namespace

absl::StatusOr<v1::Node> SlicedClient::DrainNode(absl::string_view node_id) {
  v1::DrainNodeRequest request;
  request.set_node_id(std::string(node_id));
  return NodeOf(Unary<v1::DrainNodeResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->DrainNode(context, request, response);
      }));
}

absl::StatusOr<v1::Node> SlicedClient::UndrainNode(absl::string_view node_id) {
  v1::UndrainNodeRequest request;
  request.set_node_id(std::string(node_id));
  return NodeOf(Unary<v1::UndrainNodeResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->UndrainNode(context, request, response);
      }));
}

absl::Status SlicedClient::RemoveNode(absl::string_view node_id, bool force) {
  v1::RemoveNodeRequest request;
  request.set_node_id(std::string(node_id));
  request.set_force(force);
  return Unary<v1::RemoveNodeResponse>(
             Repeat::kRemove,
             [&](auto* context, auto* response) {
               return Current()->inventory->RemoveNode(context, request,
                                                       response);
             })
      .status();
}

absl::StatusOr<v1::Node> SlicedClient::GetNode(absl::string_view node_id) {
  v1::GetNodeRequest request;
  request.set_node_id(std::string(node_id));
  return Unary<v1::Node>(Repeat::kHarmless, [&](auto* context, auto* response) {
    return Current()->inventory->GetNode(context, request, response);
  });
}

absl::StatusOr<v1::ListNodesResponse> SlicedClient::ListNodes(
    const v1::ListNodesRequest& request) {
  return Unary<v1::ListNodesResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->ListNodes(context, request, response);
      });
}

namespace {

// Every page of a list call (`fetch`: one page), following next_page_token;
// the pages' items concatenated, without a token.
template <typename Response, typename Request, typename Fetch>
absl::StatusOr<Response> AllPages(Request request, Fetch fetch) {
  Response all;
  while (true) {
    absl::StatusOr<Response> page = fetch(request);
    if (!page.ok()) return page.status();
    all.MergeFrom(*page);
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  all.clear_next_page_token();
  return all;
}

}  // namespace

absl::StatusOr<v1::ListNodesResponse> SlicedClient::ListAllNodes(
    v1::ListNodesRequest request) {
  return AllPages<v1::ListNodesResponse>(
      std::move(request),
      [this](const v1::ListNodesRequest& r) { return ListNodes(r); });
}

absl::StatusOr<v1::ListSlicesResponse> SlicedClient::ListSlices() {
  v1::ListSlicesRequest request;
  return Unary<v1::ListSlicesResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->ListSlices(context, request, response);
      });
}

absl::StatusOr<v1::ComputeClass> SlicedClient::PutComputeClass(
    const v1::PutComputeClassRequest& request) {
  return Unary<v1::ComputeClass>(Repeat::kHarmless, [&](auto* context,
                                                        auto* response) {
    return Current()->inventory->PutComputeClass(context, request, response);
  });
}

absl::StatusOr<v1::ListComputeClassesResponse>
SlicedClient::ListComputeClasses() {
  v1::ListComputeClassesRequest request;
  return Unary<v1::ListComputeClassesResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->inventory->ListComputeClasses(context, request,
                                                        response);
      });
}

absl::Status SlicedClient::DeleteComputeClass(absl::string_view name) {
  v1::DeleteComputeClassRequest request;
  request.set_name(std::string(name));
  return Unary<v1::DeleteComputeClassResponse>(
             Repeat::kRemove,
             [&](auto* context, auto* response) {
               return Current()->inventory->DeleteComputeClass(context, request,
                                                               response);
             })
      .status();
}

absl::StatusOr<v1::PlacementGroup> SlicedClient::CreatePlacementGroup(
    v1::CreatePlacementGroupRequest request) {
  if (request.request_id().empty()) request.set_request_id(NewRequestId());
  return Unary<v1::PlacementGroup>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->placement->CreatePlacementGroup(context, request,
                                                          response);
      });
}

absl::StatusOr<v1::PlacementGroup> SlicedClient::SubmitScalingConfig(
    v1::SubmitScalingConfigRequest request) {
  if (request.request_id().empty()) request.set_request_id(NewRequestId());
  return Unary<v1::PlacementGroup>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->placement->SubmitScalingConfig(context, request,
                                                         response);
      });
}

absl::StatusOr<v1::PlacementGroup> SlicedClient::GetPlacementGroup(
    absl::string_view id) {
  v1::GetPlacementGroupRequest request;
  request.set_placement_group_id(std::string(id));
  return Unary<v1::PlacementGroup>(Repeat::kHarmless, [&](auto* context,
                                                          auto* response) {
    return Current()->placement->GetPlacementGroup(context, request, response);
  });
}

absl::StatusOr<v1::ListPlacementGroupsResponse>
SlicedClient::ListPlacementGroups(
    const v1::ListPlacementGroupsRequest& request) {
  return Unary<v1::ListPlacementGroupsResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->placement->ListPlacementGroups(context, request,
                                                         response);
      });
}

absl::StatusOr<v1::ListPlacementGroupsResponse>
SlicedClient::ListAllPlacementGroups(v1::ListPlacementGroupsRequest request) {
  return AllPages<v1::ListPlacementGroupsResponse>(
      std::move(request), [this](const v1::ListPlacementGroupsRequest& r) {
        return ListPlacementGroups(r);
      });
}

absl::Status SlicedClient::RemovePlacementGroup(absl::string_view id) {
  v1::RemovePlacementGroupRequest request;
  request.set_placement_group_id(std::string(id));
  return Unary<v1::RemovePlacementGroupResponse>(
             Repeat::kRemove,
             [&](auto* context, auto* response) {
               return Current()->placement->RemovePlacementGroup(
                   context, request, response);
             })
      .status();
}

absl::StatusOr<v1::ExplainPlacementGroupResponse>
SlicedClient::ExplainPlacementGroup(
    const v1::ExplainPlacementGroupRequest& request) {
  return Unary<v1::ExplainPlacementGroupResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->placement->ExplainPlacementGroup(context, request,
                                                           response);
      });
}

absl::StatusOr<v1::GetClusterSummaryResponse>
SlicedClient::GetClusterSummary() {
  v1::GetClusterSummaryRequest request;
  return Unary<v1::GetClusterSummaryResponse>(
      Repeat::kHarmless, [&](auto* context, auto* response) {
        return Current()->telemetry->GetClusterSummary(context, request,
                                                       response);
      });
}

absl::Status SlicedClient::WatchPlacementGroups(
    const v1::WatchPlacementGroupsRequest& request, absl::Duration timeout,
    absl::FunctionRef<bool(const v1::PlacementGroupEvent&)> on_event) {
  const absl::Time deadline = absl::Now() + timeout;
  Retries retries(options_, deadline);
  int reopened = 0;
  for (;;) {
    grpc::ClientContext context;
    Prepare(&context, deadline);
    retries.Starting();
    std::unique_ptr<grpc::ClientReader<v1::PlacementGroupEvent>> reader =
        Current()->placement->WatchPlacementGroups(&context, request);
    v1::PlacementGroupEvent event;
    bool delivered = false;
    while (reader->Read(&event)) {
      delivered = true;
      if (!on_event(event)) {
        context.TryCancel();
        reader->Finish();
        return absl::OkStatus();
      }
    }
    const grpc::Status status = reader->Finish();
    // A stream the daemon ended because it fell behind (a slow reader, or a
    // re-read of its store) is opened again: the current state, then every
    // change, as for the Python client.
    if (status.error_code() == grpc::StatusCode::ABORTED &&
        absl::StrContains(status.error_message(), "fell behind") &&
        reopened < kWatchReopenings) {
      ++reopened;
      continue;
    }
    // Only the opening is retried: once events came, the caller decides.
    if (delivered) return FromGrpcStatus(status);
    const std::optional<Refusal> refusal =
        Retryable(status, context, retries.may_follow());
    if (!refusal.has_value()) return FromGrpcStatus(status);
    if (refusal == Refusal::kFollowed) {
      retries.Followed();  // a standby: open the watch on the leader, at once
      continue;
    }
    if (!retries.WaitForNext(refusal == Refusal::kFailover,
                             *Current()->channel)) {
      return FromGrpcStatus(status);
    }
  }
}

absl::StatusOr<v1::PlacementGroup> SlicedClient::WaitForPlacementGroup(
    absl::string_view id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;  // inf + now = inf
  absl::Duration backoff = absl::Milliseconds(100);
  while (true) {
    // Get first: NOT_FOUND for an unknown or removed id (a watch would just
    // stay silent).
    absl::StatusOr<v1::PlacementGroup> current = GetPlacementGroup(id);
    if (!current.ok() &&
        current.status().code() == absl::StatusCode::kDeadlineExceeded) {
      // The call's deadline (options.timeout), not the wait's: the daemon
      // did not answer, which says nothing of the group.
      return absl::UnavailableError(
          absl::StrCat("reading placement group ", id,
                       " during the wait: ", current.status().message()));
    }
    if (!current.ok() || Settled(current->state())) return current;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("placement group ", id, " is still ",
                       v1::PlacementGroupState_Name(current->state()),
                       " after ", absl::FormatDuration(timeout),
                       current->pending_reason().empty() ? "" : ": ",
                       current->pending_reason()));
    }
    v1::WatchPlacementGroupsRequest request;
    request.set_placement_group_id(std::string(id));
    const absl::Status status =
        WatchPlacementGroups(request, std::min(left, kWaitRecheck),
                             [&](const v1::PlacementGroupEvent& e) {
                               *current = e.placement_group();
                               return !Settled(current->state());
                             });
    if (status.ok() && Settled(current->state())) return current;
    // The window ended (or the stream did): read it again.
    if (status.ok() || status.code() == absl::StatusCode::kDeadlineExceeded) {
      continue;
    }
    if (status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kAborted &&
        status.code() != absl::StatusCode::kCancelled) {
      return status;
    }
    absl::SleepFor(std::min(backoff, deadline - absl::Now()));
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

}  // namespace sliced::client
