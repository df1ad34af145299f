// Ticker: a named thread that calls a function every interval until
// stopped (the lease check, the preemption deadlines).
//
// Thread-safe: Stop() may be called from any thread, more than once; it
// returns once the thread has ended (no tick runs after it).
#ifndef SLICED_SERVER_CORE_TICKER_H_
#define SLICED_SERVER_CORE_TICKER_H_

#include <pthread.h>

#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sliced::server {

class Ticker {
 public:
  Ticker() = default;  // not running
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  ~Ticker() { Stop(); }

  // Runs `tick` every `interval` on a thread named `name` (at most 15
  // characters). REQUIRES: not started before.
  void Start(std::string name, absl::Duration interval,
             std::function<void()> tick) {
    thread_ = std::thread(
        [this, name = std::move(name), interval, tick = std::move(tick)] {
          pthread_setname_np(pthread_self(), name.c_str());
          while (true) {
            {
              absl::MutexLock lock(&mu_);
              auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
                return stopping_;
              };
              if (mu_.AwaitWithTimeout(absl::Condition(&stopping), interval)) {
                return;
              }
            }
            tick();
          }
        });
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    absl::MutexLock lock(&join_mu_);  // one caller joins, others wait
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Mutex join_mu_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_TICKER_H_
