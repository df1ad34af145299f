// Stream plumbing shared by WatchPlacementGroups and TailLogs.
//
// StreamReactor: a server-streaming reactor fed from other threads: Deliver()
// queues a message and writes it when the previous write is done. Used by
// WatchPlacementGroups and TailLogs.
//
// Thread-safe. Deletes itself when gRPC is done with the call; `on_done`
// runs first (unsubscribe there). StreamLimiter::EndAll ends every open
// stream when the server stops (UNAVAILABLE: clients open it again). What
// waits to be written is bounded (set_max_pending_bytes): a client that
// reads too slowly gets ABORTED saying so, rather than the daemon's memory.
#ifndef SLICED_SERVER_API_STREAM_REACTOR_H_
#define SLICED_SERVER_API_STREAM_REACTOR_H_

#include <deque>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/api/status.h"

namespace sliced::server::api {

// Counts open streams against a limit, and ends them all when the server
// stops (EndAll). Thread-safe.
class StreamLimiter {
 public:
  // An open stream, as EndAll ends it.
  class Stream {
   public:
    // Ends the stream now with `status`.
    virtual void EndWith(const absl::Status& status) = 0;

   protected:
    ~Stream() = default;
  };

  explicit StreamLimiter(int max) : max_(max) {}
  // Takes a slot; ResourceExhausted (and nothing taken) when `max` streams
  // are open, EndAll's status (and nothing taken) once it ran.
  absl::Status TryAcquire() {
    absl::MutexLock lock(&mu_);
    if (!ended_.ok()) return ended_;
    if (open_ >= max_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("too many open streams (", max_, "); retry later"));
    }
    ++open_;
    return absl::OkStatus();
  }
  // `stream` holds a slot taken by TryAcquire until Release(stream). Ended at
  // once when EndAll ran meanwhile.
  void Hold(Stream* stream) {
    absl::MutexLock lock(&mu_);
    if (!ended_.ok()) {
      stream->EndWith(ended_);
      return;
    }
    streams_.insert(stream);
  }
  void Release(Stream* stream) {
    absl::MutexLock lock(&mu_);
    streams_.erase(stream);
    --open_;
  }
  // Ends every open stream with `status` (not OK), and refuses new ones with
  // it.
  void EndAll(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    ended_ = status;
    // A stream's OnDone (which releases it) never runs inside EndWith: gRPC
    // schedules it on another thread, and Release waits for this lock.
    for (Stream* stream : streams_) stream->EndWith(status);
  }
  int max() const { return max_; }

 private:
  const int max_;
  absl::Mutex mu_;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<Stream*> streams_ ABSL_GUARDED_BY(mu_);
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
};

// The bytes a queued message holds.
inline size_t MessageBytes(const grpc::ByteBuffer& message) {
  return message.Length();
}
inline size_t MessageBytes(const google::protobuf::MessageLite& message) {
  return message.ByteSizeLong();
}

template <typename Message>
class StreamReactor : public grpc::ServerWriteReactor<Message>,
                      public StreamLimiter::Stream {
 public:
  explicit StreamReactor(std::function<void()> on_done = nullptr)
      : on_done_(std::move(on_done)) {}

  void set_on_done(std::function<void()> on_done) {
    on_done_ = std::move(on_done);
  }
  // The stream holds a slot of `limiter` (already acquired) until it is
  // done, and ends when the limiter ends every stream; `context` is the
  // call's (for the trailing metadata of that end).
  void set_slot(StreamLimiter* limiter, grpc::ServerContextBase* context) {
    slot_ = limiter;
    context_ = context;
    limiter->Hold(this);
  }

  // From now on at most `bytes` plus what waits now may wait to be written:
  // a large first batch (the current state) is let through, and behind it
  // the changes may pile up by as much as the client has read of it, while
  // the client catches up (a watch opened during a burst of commits). The
  // stream never holds more than its first batch did, plus `bytes`; past
  // that it ends ABORTED, saying the client fell behind.
  void set_max_pending_bytes(size_t bytes) {
    absl::MutexLock lock(&mu_);
    max_pending_bytes_ = bytes;
    first_batch_bytes_ = pending_bytes_;
  }

  // Queues `message` and starts writing it if no write is in flight;
  // dropped once the stream is ending.
  void Deliver(Message message) {
    absl::MutexLock lock(&mu_);
    if (Enqueue(std::move(message)) && !writing_) WriteNext();
  }
  // Queues `message` only: it is written after the write in flight, or at
  // the next Deliver() or Flush(). The writer thread queues a commit's
  // watch events this way and flushes them after the commit's answers.
  void Queue(Message message) {
    absl::MutexLock lock(&mu_);
    Enqueue(std::move(message));
  }
  // Starts writing what Queue() left waiting, if no write is in flight.
  void Flush() {
    absl::MutexLock lock(&mu_);
    if (!writing_ && !pending_.empty()) WriteNext();
  }

  // Ends the stream with OK once every queued message is written.
  void FinishWhenDrained() {
    absl::MutexLock lock(&mu_);
    End(grpc::Status::OK);
  }

  // Ends the stream now with `status` (with the leader it names in the
  // trailing metadata): the write in flight completes, the queued messages
  // are dropped. Nothing if it has finished already.
  void EndWith(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    EndNow(context_ == nullptr ? ToGrpcStatus(status)
                               : ToGrpcStatus(status, *context_));
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    const size_t written = MessageBytes(pending_.front());
    pending_bytes_ -= written;
    pending_.pop_front();
    if (!ok) {
      // The call is gone (cancelled, or the client went away). Finish was
      // held back for this write if the stream was already ending: call it
      // now, once, or the reactor never completes and the server's
      // Shutdown waits for it forever.
      pending_.clear();
      pending_bytes_ = 0;
      if (!ending_) {
        ending_ = true;
        end_status_ = grpc::Status::CANCELLED;
      }
      this->Finish(end_status_);
    } else if (!pending_.empty()) {
      WriteNext();
    } else if (ending_) {
      this->Finish(end_status_);
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    DropQueued();
    End(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    if (on_done_) on_done_();
    if (slot_ != nullptr) slot_->Release(this);
    delete this;
  }

 private:
  // Appends `message` to the queue; false (and the stream ends ABORTED when
  // it overflows) if it is dropped.
  bool Enqueue(Message message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return false;
    const size_t bytes = MessageBytes(message);
    if (max_pending_bytes_ > 0 &&
        pending_bytes_ + bytes > max_pending_bytes_ + first_batch_bytes_) {
      EndNow(grpc::Status(
          grpc::StatusCode::ABORTED,
          absl::StrCat("this stream fell behind: ", pending_.size(),
                       " messages (", pending_bytes_,
                       " bytes) were waiting for the client to read them; "
                       "open it again for the current state")));
      return false;
    }
    pending_bytes_ += bytes;
    pending_.push_back(std::move(message));
    return true;
  }
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    this->StartWrite(&pending_.front());
  }
  // Drops what waits, keeping only the write in flight.
  void DropQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pending_.resize(writing_ ? 1 : 0);
    pending_bytes_ = writing_ ? MessageBytes(pending_.front()) : 0;
  }
  // Ends with `status` now: the write in flight completes, the queued
  // messages are dropped. Nothing if it has finished already.
  void EndNow(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_ && !writing_) return;  // Finish was called
    DropQueued();
    ending_ = true;
    end_status_ = std::move(status);
    if (!writing_) this->Finish(end_status_);
  }
  // Finishes now if idle with nothing queued; otherwise OnWriteDone
  // finishes after the queue (messages Queue() left waiting included).
  void End(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    ending_ = true;
    end_status_ = std::move(status);
    if (writing_) return;
    if (pending_.empty()) {
      this->Finish(end_status_);
    } else {
      WriteNext();
    }
  }

  std::function<void()> on_done_;
  StreamLimiter* slot_ = nullptr;
  grpc::ServerContextBase* context_ = nullptr;
  absl::Mutex mu_;
  std::deque<Message> pending_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of pending_
  size_t max_pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // What waited at set_max_pending_bytes().
  size_t first_batch_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
};

// A stream that ends at once with `status` (e.g. a denied call).
template <typename Message>
class FailedStream : public grpc::ServerWriteReactor<Message> {
 public:
  FailedStream(const absl::Status& status, grpc::ServerContextBase& context) {
    this->Finish(ToGrpcStatus(status, context));
  }
  void OnDone() override { delete this; }
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_STREAM_REACTOR_H_
