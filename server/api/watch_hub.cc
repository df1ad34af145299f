#include "server/api/watch_hub.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/api/convert_placement.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server::api {
namespace {

// `view` as a serialized PlacementGroupEvent.
grpc::ByteBuffer EventOf(const PlacementGroupView& view) {
  v1::PlacementGroupEvent event;
  PlacementGroupToProto(view, event.mutable_placement_group());
  grpc::ByteBuffer out;
  bool own = false;
  (void)grpc::SerializationTraits<v1::PlacementGroupEvent>::Serialize(
      event, &out, &own);
  return out;
}

}  // namespace

// Each stream gets its current state in Add(), so the hub needs none of its
// own.
WatchHub::WatchHub(PlacementManager* placement, size_t max_held_bytes)
    : placement_(placement), max_held_bytes_(max_held_bytes) {
  placement_->WatchChanges(this);
}

WatchHub::~WatchHub() { placement_->Unwatch(this); }

void WatchHub::Add(Stream* stream, const std::string& job_id,
                   const std::string& pg_id) {
  PlacementManager::ListFilter filter;
  filter.job_id = job_id;
  filter.placement_group_id = pg_id;
  // Subscribed, and holding its changes, atomically with the copy.
  const PlacementManager::CurrentState current =
      placement_->WithCurrentState(filter, [&] {
        absl::MutexLock lock(&mu_);
        filters_[stream] = Filter{job_id, pg_id};
        if (!pg_id.empty()) {
          by_pg_[pg_id].insert(stream);
        } else if (!job_id.empty()) {
          by_job_[job_id].insert(stream);
        } else {
          all_.insert(stream);
        }
        held_[stream];
      });
  // Commits go on meanwhile: this converts every group of the state. What
  // is sent of it raises the bound on the changes held meanwhile.
  SentInSteps sent(max_held_bytes_);
  for (const auto& g : current.groups) {
    const grpc::ByteBuffer event = EventOf(ViewOf(*g, *current.snapshot));
    stream->Send(event);
    if (const size_t allow = sent.Sent(event.Length())) {
      absl::MutexLock lock(&mu_);
      if (auto it = held_.find(stream); it != held_.end()) {
        it->second.Allow(allow);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  auto it = held_.find(stream);
  if (it == held_.end()) return;  // removed meanwhile
  if (!it->second.items().empty()) {
    for (const grpc::ByteBuffer& event : it->second.items()) {
      stream->Queue(event);
    }
    stream->Flush();
  }
  held_.erase(it);
}

void WatchHub::Remove(Stream* stream) {
  absl::MutexLock lock(&mu_);
  auto it = filters_.find(stream);
  if (it == filters_.end()) return;
  auto drop = [stream](auto& index, const std::string& key) {
    auto bucket = index.find(key);
    if (bucket == index.end()) return;
    bucket->second.erase(stream);
    if (bucket->second.empty()) index.erase(bucket);
  };
  if (!it->second.pg_id.empty()) {
    drop(by_pg_, it->second.pg_id);
  } else if (!it->second.job_id.empty()) {
    drop(by_job_, it->second.job_id);
  } else {
    all_.erase(stream);
  }
  filters_.erase(it);
  held_.erase(stream);
  unflushed_.erase(stream);
}

void WatchHub::Deliver(const PlacementGroup& g,
                       absl::FunctionRef<const PlacementGroupView&()> view) {
  absl::MutexLock lock(&mu_);
  std::vector<Stream*> targets(all_.begin(), all_.end());
  if (auto it = by_job_.find(g.job_id); it != by_job_.end()) {
    targets.insert(targets.end(), it->second.begin(), it->second.end());
  }
  if (auto it = by_pg_.find(g.id); it != by_pg_.end()) {
    for (Stream* s : it->second) {
      const std::string& job = filters_.at(s).job_id;
      if (job.empty() || job == g.job_id) targets.push_back(s);
    }
  }
  if (targets.empty()) return;
  const grpc::ByteBuffer event = EventOf(view());  // once for all of them
  for (Stream* s : targets) QueueOrHold(*s, event);
}

void WatchHub::QueueOrHold(Stream& stream, const grpc::ByteBuffer& event) {
  auto it = held_.empty() ? held_.end() : held_.find(&stream);
  if (it == held_.end()) {
    stream.Queue(event);
    unflushed_.insert(&stream);
  } else if (!it->second.Hold(event, event.Length(), max_held_bytes_)) {
    stream.End(absl::AbortedError(absl::StrCat(
        "this stream fell behind: more than ",
        max_held_bytes_ + it->second.allowed(),
        " bytes of changes were committed while its current state was sent "
        "(--max_watch_buffer_bytes, ",
        max_held_bytes_,
        ", plus what had been sent of that state); open it again for the "
        "current state")));
  }
}

void WatchHub::Restored() {
  const absl::Status behind = absl::AbortedError(
      "this stream fell behind: the daemon re-read its store after a failed "
      "commit, and changes since may be missing from it; open it again for "
      "the current state");
  absl::MutexLock lock(&mu_);
  for (const auto& [stream, filter] : filters_) stream->End(behind);
}

void WatchHub::Flush() {
  absl::MutexLock lock(&mu_);
  for (Stream* s : unflushed_) s->Flush();
  unflushed_.clear();
}

}  // namespace sliced::server::api
