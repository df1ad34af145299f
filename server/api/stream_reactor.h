// Stream plumbing shared by WatchPlacementGroups and TailLogs.
//
// StreamReactor: a server-streaming reactor fed from other threads: Deliver()
// queues a message and writes it when the previous write is done. Used by
// WatchPlacementGroups and TailLogs.
//
// Thread-safe. Deletes itself when gRPC is done with the call; `on_done`
// runs first (unsubscribe there). StreamLimiter::EndAll ends every open
// stream when the server stops (UNAVAILABLE: clients open it again).
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

  // Queues `message`; dropped once the stream is ending.
  void Deliver(Message message) {
    absl::MutexLock lock(&mu_);
    if (ending_) return;
    pending_.push_back(std::move(message));
    if (!writing_) WriteNext();
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
    if (ending_ && !writing_) return;   // Finish was called
    pending_.resize(writing_ ? 1 : 0);  // keep only the write in flight
    ending_ = true;
    end_status_ = context_ == nullptr ? ToGrpcStatus(status)
                                      : ToGrpcStatus(status, *context_);
    if (!writing_) this->Finish(end_status_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    pending_.pop_front();
    if (!ok) {
      // The call is gone (cancelled, or the client went away). Finish was
      // held back for this write if the stream was already ending: call it
      // now, once, or the reactor never completes and the server's
      // Shutdown waits for it forever.
      pending_.clear();
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
    pending_.resize(writing_ ? 1 : 0);  // keep only the write in flight
    End(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    if (on_done_) on_done_();
    if (slot_ != nullptr) slot_->Release(this);
    delete this;
  }

 private:
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    this->StartWrite(&pending_.front());
  }
  // Finishes now if idle; otherwise OnWriteDone finishes after the queue.
  void End(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    ending_ = true;
    end_status_ = std::move(status);
    if (!writing_) this->Finish(end_status_);
  }

  std::function<void()> on_done_;
  StreamLimiter* slot_ = nullptr;
  grpc::ServerContextBase* context_ = nullptr;
  absl::Mutex mu_;
  std::deque<Message> pending_ ABSL_GUARDED_BY(mu_);
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
