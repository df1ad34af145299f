#include "storage/etcd/etcd_mirror.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "storage/records.h"

namespace sliced::storage {
namespace {

// The tables etcd holds (storage/etcd/etcd_store.cc: logs stay in the
// leader's memory).
constexpr Table kMirroredTables[] = {Table::kNodes, Table::kPlacementGroups,
                                     Table::kComputeClasses, Table::kCounters};

}  // namespace

EtcdMirror::EtcdMirror(std::shared_ptr<EtcdClient> client,
                       EtcdMirrorOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      election_prefix_(absl::StrCat(options_.election, "/")) {}

EtcdMirror::~EtcdMirror() { Stop(); }

void EtcdMirror::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (running_) return;
    running_ = true;
    loaded_ = false;
    watching_ = false;
    copy_ = Copy();
    revision_ = 0;
    head_revision_ = 0;
  }
  if (thread_.joinable()) thread_.join();  // a thread that ended on its own
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void EtcdMirror::Stop() {
  stopping_ = true;
  {
    absl::MutexLock lock(&mu_);
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  running_ = false;
  loaded_ = false;
  watching_ = false;
  copy_ = Copy();
}

void EtcdMirror::Run() {
  pthread_setname_np(pthread_self(), "sliced-mirror");
  bool load = true;
  while (!stopping()) {
    if (load) {
      if (!Load().ok()) {
        absl::SleepFor(options_.retry_pause);
        continue;
      }
      load = false;
    }
    load = Watch();
    if (!load && !stopping()) {
      {
        absl::MutexLock lock(&mu_);
        ++watch_restarts_;
      }
      absl::SleepFor(options_.retry_pause);
    }
  }
}

void EtcdMirror::Apply(Copy& copy, const std::string& key,
                       const std::string* value,
                       int64_t create_revision) const {
  if (absl::StartsWith(key, election_prefix_)) {
    if (value == nullptr) {
      copy.election_keys.erase(key);
    } else {
      copy.election_keys[key] = create_revision;
    }
    return;
  }
  absl::string_view rest(key);
  rest.remove_prefix(std::min(rest.size(), options_.prefix.size()));
  for (Table table : kMirroredTables) {
    const std::string table_prefix = absl::StrCat(TableName(table), "/");
    if (!absl::StartsWith(rest, table_prefix)) continue;
    const std::string id(rest.substr(table_prefix.size()));
    StoredState one;
    if (value != nullptr) {
      absl::Status parsed = AddRecord(table, id, *value, one);
      if (!parsed.ok()) {
        if (copy.broken.ok()) copy.broken = parsed;
        return;
      }
    }
    switch (table) {
      case Table::kNodes:
        if (value == nullptr) {
          copy.nodes.erase(id);
        } else {
          copy.nodes.insert_or_assign(id, std::move(one.nodes.back()));
        }
        break;
      case Table::kPlacementGroups:
        if (value == nullptr) {
          copy.placement_groups.erase(id);
        } else {
          copy.placement_groups.insert_or_assign(
              id, std::move(one.placement_groups.back()));
        }
        break;
      case Table::kComputeClasses:
        if (value == nullptr) {
          copy.compute_classes.erase(id);
        } else {
          copy.compute_classes.insert_or_assign(
              id, std::move(one.compute_classes.back()));
        }
        break;
      case Table::kCounters:
        // Only next_pg_sequence is read (storage/records.h); it is never
        // deleted.
        if (value != nullptr && id == kCounterNextPgSequence) {
          copy.next_pg_sequence = one.next_pg_sequence;
        }
        break;
      case Table::kLogs:
        break;
    }
    return;
  }
  // meta/ and keys of newer binaries: not records.
}

absl::Status EtcdMirror::Load() {
  Copy fresh;
  absl::StatusOr<int64_t> revision = client_->Scan(
      options_.prefix, PrefixEnd(options_.prefix), 0,
      [&](const mvccpb::KeyValue& kv) {
        if (stopping()) return absl::CancelledError("mirror stopped");
        Apply(fresh, kv.key(), &kv.value(), kv.create_revision());
        return absl::OkStatus();
      });
  if (!revision.ok()) return revision.status();
  absl::MutexLock lock(&mu_);
  copy_ = std::move(fresh);
  revision_ = *revision;
  head_revision_ = *revision;
  loaded_ = true;
  ++loads_;
  return absl::OkStatus();
}

bool EtcdMirror::Watch() {
  grpc::ClientContext context;
  int64_t from = 0;
  {
    absl::MutexLock lock(&mu_);
    if (stopping()) return false;
    watch_context_ = &context;
    from = revision_ + 1;
  }
  auto stream = client_->Watch(context);
  etcdserverpb::WatchRequest request;
  auto* create = request.mutable_create_request();
  create->set_key(options_.prefix);
  create->set_range_end(PrefixEnd(options_.prefix));
  create->set_start_revision(from);
  bool compacted = false;
  if (stream->Write(request)) {
    etcdserverpb::WatchResponse response;
    while (stream->Read(&response)) {
      if (response.compact_revision() > 0) {
        compacted = true;  // events from `from` on are gone: load again
        break;
      }
      if (response.canceled()) break;  // e.g. the member lost its leader
      absl::MutexLock lock(&mu_);
      watching_ = true;
      head_revision_ = std::max(head_revision_, response.header().revision());
      for (const mvccpb::Event& event : response.events()) {
        const bool put = event.type() == mvccpb::Event::PUT;
        Apply(copy_, event.kv().key(), put ? &event.kv().value() : nullptr,
              event.kv().create_revision());
        revision_ = std::max(revision_, event.kv().mod_revision());
        ++events_;
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    watch_context_ = nullptr;
    watching_ = false;
  }
  context.TryCancel();
  (void)stream->Finish();
  return compacted;
}

absl::StatusOr<StoredState> EtcdMirror::Take(int64_t fence_revision,
                                             absl::Duration timeout) {
  StoredState state;
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (!running_) {
      failed = absl::FailedPreconditionError("the standby's copy is stopped");
    } else {
      auto caught_up = [this, fence_revision]()
                           ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        if (!loaded_ || revision_ < fence_revision) return false;
        for (const auto& [key, created] : copy_.election_keys) {
          if (created < fence_revision) return false;
        }
        return true;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&caught_up), timeout)) {
        failed = absl::DeadlineExceededError(absl::StrCat(
            "the standby's copy did not catch up with the election (key "
            "revision ",
            fence_revision, ") within ", absl::FormatDuration(timeout),
            ": it is ", loaded_ ? "at revision " : "still loading, ",
            loaded_ ? absl::StrCat(revision_) : "",
            watching_ ? ", watching" : ", not watching"));
      } else if (!copy_.broken.ok()) {
        failed = copy_.broken;
      } else {
        state.nodes.reserve(copy_.nodes.size());
        for (auto& [key, node] : copy_.nodes) {
          state.nodes.push_back(std::move(node));
        }
        state.placement_groups.reserve(copy_.placement_groups.size());
        for (auto& [key, group] : copy_.placement_groups) {
          state.placement_groups.push_back(std::move(group));
        }
        for (auto& [key, compute_class] : copy_.compute_classes) {
          state.compute_classes.push_back(std::move(compute_class));
        }
        state.next_pg_sequence = copy_.next_pg_sequence;
        copy_ = Copy();
        loaded_ = false;
      }
    }
  }
  Stop();
  if (!failed.ok()) return failed;
  return state;
}

EtcdMirrorStats EtcdMirror::stats() const {
  absl::MutexLock lock(&mu_);
  EtcdMirrorStats s;
  s.running = running_;
  s.watching = watching_;
  s.revision = revision_;
  s.head_revision = head_revision_;
  s.records = static_cast<int64_t>(copy_.nodes.size() +
                                   copy_.placement_groups.size() +
                                   copy_.compute_classes.size());
  s.loads = loads_;
  s.events = events_;
  s.watch_restarts = watch_restarts_;
  return s;
}

}  // namespace sliced::storage
