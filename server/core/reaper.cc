#include "server/core/reaper.h"

#include <pthread.h>

#include <utility>

namespace sliced::server {

Reaper::Reaper(std::string name) {
  thread_ = std::thread([this, name = std::move(name)] { Loop(name); });
}

Reaper::~Reaper() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Reaper::Drop(std::shared_ptr<const void> p) {
  if (p == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && pending_.size() < kMaxPending) {
      pending_.push_back(std::move(p));
      return;
    }
  }
  p.reset();  // full (or stopping): freed here, outside the lock
}

size_t Reaper::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

void Reaper::Loop(const std::string& name) {
  pthread_setname_np(pthread_self(), name.c_str());
  while (true) {
    std::vector<std::shared_ptr<const void>> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || pending_.size() >= kWakeAt;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), kTick);
      if (stopping_ && pending_.empty()) return;  // drained
      batch.swap(pending_);
    }
    // Oldest first, outside the lock: Drop() never waits for a free.
    for (std::shared_ptr<const void>& p : batch) p.reset();
  }
}

}  // namespace sliced::server
