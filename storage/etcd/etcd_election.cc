#include "storage/etcd/etcd_election.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sliced::storage {
namespace {
constexpr absl::Duration kRetryPause = absl::Milliseconds(200);
}  // namespace

EtcdElection::EtcdElection(std::shared_ptr<EtcdClient> client,
                           EtcdElectionOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      value_(options_.value) {}

void EtcdElection::set_value(absl::string_view value) {
  absl::MutexLock lock(&mu_);
  value_ = std::string(value);
}

std::string EtcdElection::value() {
  absl::MutexLock lock(&mu_);
  return value_;
}

EtcdElection::~EtcdElection() {
  Stop();
  StopKeepAlive();
}

void EtcdElection::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  CancelCampaign();
}

void EtcdElection::StopKeepAlive() {
  int64_t lease = 0;
  {
    absl::MutexLock lock(&mu_);
    if (lost_.empty()) lost_ = "stopped";
    lease = lease_;
    lease_ = 0;
    leading_ = Leadership{};
  }
  if (keep_alive_.joinable()) keep_alive_.join();
  // Revoking deletes the leader key at once: a standby need not wait out
  // the TTL. When etcd can't be reached (the reason leadership was lost,
  // often) the next Campaign revokes it: etcd renews every lease when it
  // comes back, so the key would otherwise block every campaign for a TTL.
  if (lease != 0 && !Revoke(lease)) {
    absl::MutexLock lock(&mu_);
    unrevoked_ = lease;
  }
}

bool EtcdElection::Revoke(int64_t lease) {
  const absl::Status revoked = client_->RevokeLease(lease);
  // Anything but an unreachable etcd: the lease is gone, or will not go by
  // asking again.
  return revoked.code() != absl::StatusCode::kUnavailable &&
         revoked.code() != absl::StatusCode::kDeadlineExceeded;
}

void EtcdElection::KeepAliveLoop(int64_t lease, SteadyTime granted) {
  pthread_setname_np(pthread_self(), "sliced-lease");
  const absl::Duration every = options_.ttl / 3;
  // When the last renewal etcd answered (or the grant) was sent: etcd keeps
  // the lease until at least one TTL after that, and may let it go soon
  // after, so this daemon leads until then at most, whether or not a
  // renewal is in flight. On the steady clock: a step of the wall clock
  // neither ends a term nor stretches one.
  SteadyTime renewed = granted;
  std::string failure = "no renewal answered";
  while (true) {
    const SteadyTime expires =
        renewed + absl::ToChronoNanoseconds(options_.ttl);
    auto left = [&expires] {
      return absl::FromChrono(expires - std::chrono::steady_clock::now());
    };
    {
      absl::MutexLock lock(&mu_);
      auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopped_ || !lost_.empty();
      };
      // Lost (or stopped): a campaign waiting on this lease is ended, for
      // etcd's would go on. It waits only for the keys before its own, not
      // for its own lease, and would be won on a dead key when the leader
      // goes. Campaign then starts over on a new lease.
      if (mu_.AwaitWithTimeout(absl::Condition(&done),
                               std::min(every, left()))) {
        CancelCampaign();
        return;
      }
      if (left() <= absl::ZeroDuration()) {
        lost_ = absl::StrCat(
            "could not renew the election lease for ",
            absl::FormatDuration(absl::FromChrono(
                std::chrono::steady_clock::now() - renewed)),
            ": ", failure);
        CancelCampaign();
        return;
      }
    }
    const SteadyTime sent = std::chrono::steady_clock::now();
    absl::StatusOr<absl::Duration> ttl =
        client_->KeepAliveOnce(lease, absl::Now() + left());
    const std::string gone = ttl.ok() ? KeyGone() : "";
    absl::MutexLock lock(&mu_);
    if (!gone.empty()) {
      if (lost_.empty()) lost_ = gone;
    } else if (ttl.ok()) {
      renewed = sent;
    } else if (ttl.status().code() == absl::StatusCode::kNotFound) {
      if (lost_.empty()) lost_ = std::string(ttl.status().message());
    } else {
      failure = std::string(ttl.status().message());
    }
  }
}

void EtcdElection::CancelCampaign() {
  if (campaign_context_ != nullptr) campaign_context_->TryCancel();
}

std::string EtcdElection::KeyGone() {
  Leadership leading;
  {
    absl::MutexLock lock(&mu_);
    leading = leading_;
  }
  if (leading.key.empty()) return "";
  etcdserverpb::RangeRequest request;
  request.set_key(leading.key);
  request.set_keys_only(true);
  absl::StatusOr<etcdserverpb::RangeResponse> found = client_->Range(request);
  if (!found.ok()) return "";  // unreachable: the renewals say when it matters
  if (found->kvs_size() == 0) {
    return absl::StrCat("the election key ", leading.key, " was deleted");
  }
  if (found->kvs(0).create_revision() != leading.revision) {
    return absl::StrCat("the election key ", leading.key,
                        " was deleted and made again");
  }
  return "";
}

absl::StatusOr<Leadership> EtcdElection::Campaign() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::CancelledError("election stopped");
    }
    int64_t unrevoked;
    {
      absl::MutexLock lock(&mu_);
      unrevoked = unrevoked_;
    }
    if (unrevoked != 0) {
      if (!Revoke(unrevoked)) {
        absl::SleepFor(kRetryPause);
        continue;
      }
      absl::MutexLock lock(&mu_);
      unrevoked_ = 0;
    }
    const SteadyTime granted = std::chrono::steady_clock::now();
    absl::StatusOr<int64_t> lease = client_->GrantLease(options_.ttl);
    if (!lease.ok()) {
      absl::SleepFor(kRetryPause);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      lease_ = *lease;
      lost_.clear();
    }
    keep_alive_ = std::thread(
        [this, id = *lease, granted] { KeepAliveLoop(id, granted); });
    while (true) {
      grpc::ClientContext context;
      std::string value;
      {
        absl::MutexLock lock(&mu_);
        if (stopped_ || !lost_.empty()) break;
        campaign_context_ = &context;
        value = value_;
      }
      absl::StatusOr<v3electionpb::LeaderKey> key =
          client_->Campaign(context, options_.name, *lease, value);
      {
        absl::MutexLock lock(&mu_);
        campaign_context_ = nullptr;
        // The lease was found lost meanwhile: the campaign was cancelled,
        // or won on a key that is gone or goes within a TTL. Start over at
        // once, not leading on it.
        if (!lost_.empty()) break;
        if (key.ok()) {
          leading_ = Leadership{key->key(), key->rev(), key->lease()};
          return leading_;
        }
      }
      // A member went away mid-campaign: campaign again on the same lease
      // (etcd finds the key this lease already made).
      absl::SleepFor(kRetryPause);
    }
    StopKeepAlive();  // the lease lapsed while waiting: start over
  }
}

absl::StatusOr<std::string> EtcdElection::LeaderValue() {
  absl::StatusOr<mvccpb::KeyValue> kv = client_->Leader(options_.name);
  if (!kv.ok()) return kv.status();
  return kv->value();
}

void EtcdElection::MarkLost(absl::string_view why) {
  absl::MutexLock lock(&mu_);
  if (lost_.empty()) lost_ = std::string(why);
}

std::string EtcdElection::WaitLost() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopped_ || !lost_.empty();
  };
  mu_.Await(absl::Condition(&done));
  return stopped_ ? "" : lost_;
}

void EtcdElection::EndTerm() { StopKeepAlive(); }

std::string EtcdElection::AwaitLost() {
  std::string why = WaitLost();
  StopKeepAlive();
  return why;
}

}  // namespace sliced::storage
