// The fan-out of placement-group changes to WatchPlacementGroups streams
// (issue 17, item 5). One PlacementManager watcher for all streams: a change
// goes only to the streams whose filter it matches (indexed by job and by
// group id, so its cost is that of the streams it concerns), and is
// converted and serialized once for all of them. Each stream's queue is
// bounded (server/api/stream_reactor.h): a slow reader is ended ABORTED, not
// buffered without limit. A new stream's current state is converted and
// sent outside every lock the writer takes: the changes committed meanwhile
// wait in the hub (bounded too) and follow it.
//
// Thread-safe. Lock order: the manager's watch lock, then the hub's, then a
// stream's.
#ifndef SLICED_SERVER_API_WATCH_HUB_H_
#define SLICED_SERVER_API_WATCH_HUB_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/core/held_until_sent.h"
#include "server/core/placement_manager.h"

namespace sliced::server::api {

class WatchHub : public PlacementManager::Watcher {
 public:
  // A stream as the hub feeds it: serialized PlacementGroupEvents.
  class Stream {
   public:
    // Queues `event` and starts writing it.
    virtual void Send(const grpc::ByteBuffer& event) = 0;
    // Queues `event`; it is written at the next Send() or Flush().
    virtual void Queue(const grpc::ByteBuffer& event) = 0;
    virtual void Flush() = 0;
    // Ends the stream with `status` (not OK): what waits is dropped.
    virtual void End(const absl::Status& status) = 0;

   protected:
    ~Stream() = default;
  };

  // REQUIRES: `placement` outlives the hub. `max_held_bytes`, plus what has
  // been sent of its current state, bounds the changes held for a stream
  // while that state is sent (past it, the stream ends ABORTED, saying it
  // fell behind).
  WatchHub(PlacementManager* placement, size_t max_held_bytes);
  ~WatchHub() override;

  // Sends `stream` the current state of the groups of `job_id` (or every
  // job: "") and `pg_id` (or every group: ""), then every change to them,
  // until Remove(stream). The changes committed while the current state is
  // sent are held, and queued after it.
  void Add(Stream* stream, const std::string& job_id, const std::string& pg_id);
  void Remove(Stream* stream);

  // PlacementManager::Watcher (writer thread): builds the view only for a
  // change some stream gets, and serializes it once for all of them. The
  // streams queue it, and Flush(), after the commit's answers, starts their
  // writes: a commit's events never delay its answers.
  void Deliver(const PlacementGroup& g,
               absl::FunctionRef<const PlacementGroupView&()> view) override;
  void Flush() override;
  // After a re-read of the store (a failed commit that may have landed):
  // ends every stream ABORTED, saying it fell behind, for its client to
  // open it again and get the current state (the Python client does).
  void Restored() override;

 private:
  struct Filter {
    std::string job_id, pg_id;
  };

  // Queues `event` on `stream` (flushed at Flush()), or holds it while
  // Add() sends the stream's current state (ends it past max_held_bytes_
  // plus what Add() has sent).
  void QueueOrHold(Stream& stream, const grpc::ByteBuffer& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PlacementManager* const placement_;
  const size_t max_held_bytes_;
  absl::Mutex mu_;
  absl::flat_hash_map<Stream*, Filter> filters_ ABSL_GUARDED_BY(mu_);
  // Each stream in one index: by group id when it names one, else by job
  // when it names one, else `all_`.
  absl::flat_hash_map<std::string, absl::flat_hash_set<Stream*>> by_pg_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<Stream*>> by_job_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Stream*> all_ ABSL_GUARDED_BY(mu_);
  // Streams whose current state is being sent (Add), and their changes
  // since.
  absl::flat_hash_map<Stream*, HeldUntilSent<grpc::ByteBuffer>> held_
      ABSL_GUARDED_BY(mu_);
  // Streams that queued events since the last Flush().
  absl::flat_hash_set<Stream*> unflushed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_WATCH_HUB_H_
