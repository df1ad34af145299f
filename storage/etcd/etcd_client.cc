#include "storage/etcd/etcd_client.h"

#include <grpcpp/create_channel.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sliced::storage {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("etcd: ", status.error_message()));
}

bool IsAmbiguous(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

namespace {

// A gRPC target for the endpoints: "ipv4:a:1,b:2" for IP addresses (gRPC's
// static list), the name itself for one host name.
absl::StatusOr<std::string> Target(absl::string_view endpoints) {
  std::vector<std::string> addresses;
  for (absl::string_view e : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    e = absl::StripAsciiWhitespace(e);
    absl::ConsumePrefix(&e, "http://");
    if (e.empty() || e.rfind(':') == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd_endpoints: '", e, "' is not host:port"));
    }
    addresses.emplace_back(e);
  }
  if (addresses.empty()) {
    return absl::InvalidArgumentError("--etcd_endpoints is empty");
  }
  bool all_ipv4 = true;
  for (const std::string& a : addresses) {
    std::string host = a.substr(0, a.rfind(':'));
    if (host.find_first_not_of("0123456789.") != std::string::npos) {
      all_ipv4 = false;
    }
  }
  if (all_ipv4) return absl::StrCat("ipv4:", absl::StrJoin(addresses, ","));
  if (addresses.size() == 1) return addresses[0];
  return absl::InvalidArgumentError(
      "--etcd_endpoints: list IPv4 addresses, or a single host name");
}

}  // namespace

absl::StatusOr<std::shared_ptr<EtcdClient>> EtcdClient::Create(
    const EtcdClientOptions& options) {
  absl::StatusOr<std::string> target = Target(options.endpoints);
  if (!target.ok()) return target.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Reconnect fast after a member restarts (gRPC's default backoff grows to
  // 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(
      GRPC_ARG_KEEPALIVE_TIME_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  // Pings while calls are open, however long no data moved (a standby's
  // campaign waits without any).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel = grpc::CreateCustomChannel(
      *target, grpc::InsecureChannelCredentials(), args);
  return std::shared_ptr<EtcdClient>(new EtcdClient(options, channel));
}

EtcdClient::EtcdClient(const EtcdClientOptions& options,
                       std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      channel_(std::move(channel)),
      kv_(etcdserverpb::KV::NewStub(channel_)),
      lease_(etcdserverpb::Lease::NewStub(channel_)),
      watch_(etcdserverpb::Watch::NewStub(channel_)),
      election_(v3electionpb::Election::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> EtcdClient::CallContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(
      absl::ToChronoTime(absl::Now() + options_.call_timeout));
  // Wait for a connection within the deadline rather than failing at once
  // while the channel reconnects to another member.
  context->set_wait_for_ready(true);
  return context;
}

template <typename Response, typename Call>
absl::StatusOr<Response> EtcdClient::Unary(Call call) const {
  Response response;
  auto context = CallContext();
  absl::Status s = FromGrpc(call(context.get(), &response));
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request) {
  return Unary<etcdserverpb::RangeResponse>(
      [&](grpc::ClientContext* c, etcdserverpb::RangeResponse* r) {
        return kv_->Range(c, request, r);
      });
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) {
  return Unary<etcdserverpb::TxnResponse>(
      [&](grpc::ClientContext* c, etcdserverpb::TxnResponse* r) {
        return kv_->Txn(c, request, r);
      });
}

absl::StatusOr<int64_t> EtcdClient::Scan(
    absl::string_view key, absl::string_view range_end, int64_t revision,
    const std::function<absl::Status(const mvccpb::KeyValue&)>& each) {
  constexpr int64_t kPageSize = 10000;
  etcdserverpb::RangeRequest page;
  page.set_key(std::string(key));
  page.set_range_end(std::string(range_end));
  page.set_revision(revision);
  page.set_limit(kPageSize);
  while (true) {
    absl::StatusOr<etcdserverpb::RangeResponse> read = Range(page);
    if (read.status().code() == absl::StatusCode::kResourceExhausted &&
        page.limit() > 1) {
      page.set_limit(page.limit() / 2);  // large records: smaller pages
      continue;
    }
    if (!read.ok()) return read.status();
    if (page.revision() == 0) page.set_revision(read->header().revision());
    for (const mvccpb::KeyValue& kv : read->kvs()) {
      absl::Status s = each(kv);
      if (!s.ok()) return s;
    }
    if (!read->more() || read->kvs().empty()) break;
    page.set_key(read->kvs().rbegin()->key() + std::string(1, '\0'));
  }
  return page.revision();
}

std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                         etcdserverpb::WatchResponse>>
EtcdClient::Watch(grpc::ClientContext& context) {
  // etcd's clientv3.WithRequireLeader.
  context.AddMetadata("hasleader", "true");
  context.set_wait_for_ready(true);
  return watch_->Watch(&context);
}

absl::StatusOr<etcdserverpb::CompactionResponse> EtcdClient::Compact(
    int64_t revision) {
  etcdserverpb::CompactionRequest request;
  request.set_revision(revision);
  return Unary<etcdserverpb::CompactionResponse>(
      [&](grpc::ClientContext* c, etcdserverpb::CompactionResponse* r) {
        return kv_->Compact(c, request, r);
      });
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  etcdserverpb::LeaseGrantResponse response;
  auto context = CallContext();
  absl::Status s =
      FromGrpc(lease_->LeaseGrant(context.get(), request, &response));
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd: lease grant: ", response.error()));
  }
  return response.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAliveOnce(int64_t lease,
                                                         absl::Time deadline) {
  auto context = CallContext();
  if (deadline < absl::Now() + options_.call_timeout) {
    context->set_deadline(absl::ToChronoTime(deadline));
  }
  auto stream = lease_->LeaseKeepAlive(context.get());
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  bool got = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  context->TryCancel();
  absl::Status finished = FromGrpc(stream->Finish());
  if (!got) {
    return finished.ok() || finished.code() == absl::StatusCode::kCancelled
               ? absl::UnavailableError("etcd: lease keep-alive stream ended")
               : finished;
  }
  if (response.ttl() <= 0) {
    return absl::NotFoundError(
        absl::StrCat("etcd: lease ", absl::Hex(lease), " has expired"));
  }
  return absl::Seconds(response.ttl());
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  auto context = CallContext();
  return FromGrpc(lease_->LeaseRevoke(context.get(), request, &response));
}

absl::StatusOr<v3electionpb::LeaderKey> EtcdClient::Campaign(
    grpc::ClientContext& context, absl::string_view name, int64_t lease,
    absl::string_view value) {
  v3electionpb::CampaignRequest request;
  request.set_name(std::string(name));
  request.set_lease(lease);
  request.set_value(std::string(value));
  v3electionpb::CampaignResponse response;
  context.set_wait_for_ready(true);
  absl::Status s =
      FromGrpc(election_->Campaign(&context, request, &response));
  if (!s.ok()) return s;
  return response.leader();
}

absl::StatusOr<mvccpb::KeyValue> EtcdClient::Leader(absl::string_view name) {
  v3electionpb::LeaderRequest request;
  request.set_name(std::string(name));
  v3electionpb::LeaderResponse response;
  auto context = CallContext();
  absl::Status s =
      FromGrpc(election_->Leader(context.get(), request, &response));
  if (!s.ok()) {
    // etcd answers "election: no leader" as UNKNOWN.
    if (absl::StrContains(s.message(), "no leader")) {
      return absl::NotFoundError("etcd: the election has no leader");
    }
    return s;
  }
  return response.kv();
}

absl::Status EtcdClient::Resign(const v3electionpb::LeaderKey& leader) {
  v3electionpb::ResignRequest request;
  *request.mutable_leader() = leader;
  v3electionpb::ResignResponse response;
  auto context = CallContext();
  return FromGrpc(election_->Resign(context.get(), request, &response));
}

}  // namespace sliced::storage
