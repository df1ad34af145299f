// A thin C++ client of etcd's v3 gRPC API (Debian ships none): the KV, Lease
// and Election calls sliced uses, over stubs generated from etcd's own
// .proto files (storage/etcd/CMakeLists.txt). One channel to the cluster;
// gRPC's pick_first moves to the next endpoint when a member goes away (any
// member serves: followers forward to the raft leader).
//
// Errors: every call returns etcd's gRPC status as an absl::Status with the
// same code and an "etcd: " prefix (the one conversion, FromGrpc). A call
// that ends UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN or CANCELLED may or may
// not have been applied (IsAmbiguous).
//
// Thread-safe: calls may come from any thread.
#ifndef SLICED_STORAGE_ETCD_ETCD_CLIENT_H_
#define SLICED_STORAGE_ETCD_ETCD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.grpc.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace sliced::storage {

struct EtcdClientOptions {
  // Comma-separated member addresses, host:port (an http:// prefix is
  // dropped). Required. IP addresses may be listed several; a host name
  // must be the only endpoint (it is resolved by DNS).
  std::string endpoints = "";
  // Deadline of each unary call (default 2 s).
  absl::Duration call_timeout = absl::Seconds(2);
  // While calls are open, the connection is pinged this often, and a ping
  // unanswered for keepalive_timeout closes it, so that a member that stops
  // answering without closing its connections (a host gone, a partition
  // that drops packets) is left for the next one within seconds, not when
  // the kernel gives up on TCP. etcd refuses pings more often than its
  // --grpc-keepalive-min-time (default 5 s).
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
};

class EtcdClient {
 public:
  // Returns InvalidArgument for empty or malformed endpoints. Does not
  // connect yet (the first call does).
  static absl::StatusOr<std::shared_ptr<EtcdClient>> Create(
      const EtcdClientOptions& options);

  absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request);
  absl::StatusOr<etcdserverpb::CompactionResponse> Compact(int64_t revision);

  // Reads every key in [key, range_end) at `revision`, in key order, calling
  // `each` on each; 0 reads the newest revision (linearizably) and the pages
  // after the first at the revision that one saw. Pages of up to 10,000
  // keys, halved while a page exceeds the receive limit. Returns the
  // revision read, or the first error (`each`'s, or etcd's: Unavailable,
  // OutOfRange when `revision` was compacted).
  absl::StatusOr<int64_t> Scan(
      absl::string_view key, absl::string_view range_end, int64_t revision,
      const std::function<absl::Status(const mvccpb::KeyValue&)>& each);

  // Opens a stream of etcd's Watch service on `context` (no deadline: the
  // caller ends it with context.TryCancel()). The context asks etcd to
  // cancel the stream when its member loses the raft leader
  // ("hasleader"), so that a partitioned member cannot leave it silent.
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                           etcdserverpb::WatchResponse>>
  Watch(grpc::ClientContext& context);

  // A lease of `ttl` (rounded up to whole seconds); returns its id.
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl);
  // Renews `lease` once; returns the TTL etcd now gives it (NotFound when
  // the lease has expired or was revoked). Gives up at `deadline` when that
  // comes before call_timeout.
  absl::StatusOr<absl::Duration> KeepAliveOnce(
      int64_t lease, absl::Time deadline = absl::InfiniteFuture());
  absl::Status RevokeLease(int64_t lease);

  // Blocks until `lease` leads election `name` with `value` proclaimed, or
  // `context` is cancelled (no deadline of its own).
  absl::StatusOr<v3electionpb::LeaderKey> Campaign(
      grpc::ClientContext& context, absl::string_view name, int64_t lease,
      absl::string_view value);
  // The current leader's key-value (its value is what it proclaimed);
  // NotFound when the election has no leader.
  absl::StatusOr<mvccpb::KeyValue> Leader(absl::string_view name);
  absl::Status Resign(const v3electionpb::LeaderKey& leader);

  absl::Duration call_timeout() const { return options_.call_timeout; }

 private:
  explicit EtcdClient(const EtcdClientOptions& options,
                      std::shared_ptr<grpc::Channel> channel);
  // A context whose deadline is call_timeout from now.
  std::unique_ptr<grpc::ClientContext> CallContext() const;
  // Runs `call(context, &response)` with CallContext().
  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(Call call) const;

  const EtcdClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
  std::unique_ptr<v3electionpb::Election::Stub> election_;
};

// etcd's status as an absl::Status: same code, message "etcd: <message>".
absl::Status FromGrpc(const grpc::Status& status);

// Whether a call that failed with `status` may have been applied anyway (a
// timeout, a lost connection): the caller retries it or reports it unknown.
bool IsAmbiguous(const absl::Status& status);

// The first key after every key that starts with `prefix` (etcd's
// range_end for a prefix scan).
std::string PrefixEnd(absl::string_view prefix);

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_ETCD_ETCD_CLIENT_H_
