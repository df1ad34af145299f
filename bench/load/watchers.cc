#include "bench/load/watchers.h"

#include "absl/synchronization/notification.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::bench {

class Watchers::Stream
    : public grpc::ClientReadReactor<v1::PlacementGroupEvent> {
 public:
  Stream(v1::Placement::Stub* stub, const std::string& job, Watchers* owner)
      : owner_(owner) {
    request_.set_job_id(job);
    stub->async()->WatchPlacementGroups(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    owner_->events_.fetch_add(1);
    StartRead(&event_);
  }
  void OnDone(const grpc::Status&) override {
    if (!cancelled_.load()) owner_->ended_.fetch_add(1);
    done_.Notify();
  }
  void Cancel() {
    cancelled_ = true;
    context_.TryCancel();
  }
  void Wait() { done_.WaitForNotification(); }

 private:
  Watchers* const owner_;
  grpc::ClientContext context_;
  v1::WatchPlacementGroupsRequest request_;
  v1::PlacementGroupEvent event_;
  std::atomic<bool> cancelled_{false};
  absl::Notification done_;
};

Watchers::Watchers(const std::shared_ptr<grpc::Channel>& channel, int n,
                   const std::function<std::string(int)>& job_of) {
  stub_ = v1::Placement::NewStub(channel);
  for (int i = 0; i < n; ++i) {
    streams_.push_back(std::make_unique<Stream>(stub_.get(), job_of(i), this));
  }
}

Watchers::~Watchers() {
  for (auto& s : streams_) s->Cancel();
  for (auto& s : streams_) s->Wait();
}

}  // namespace sliced::bench
