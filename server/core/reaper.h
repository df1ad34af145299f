// Reaper: a named thread that frees what the writer lets go of (the snapshot
// a commit replaced), so that no answer waits for the memory of the state it
// replaced. Freeing a replaced snapshot releases the chunks the commit copied
// and every chunk pointer of the tables it copied, which grows with the
// inventory; the next change does not need it done.
//
// The thread wakes when kWakeAt objects wait, or every kTick with fewer: a
// commit's Drop() costs a lock and no wake-up (on 2 cores, a thread switch
// per commit is a few % of the create rate), and a quiet daemon holds on to
// at most kWakeAt - 1 replaced snapshots for a tick.
//
// Bounded: at most kMaxPending objects wait. Past that, Drop() frees on the
// caller's thread, so a reaper that falls behind slows the writer down
// instead of letting memory grow.
//
// Thread-safe: Drop() from any thread. The destructor frees what is pending
// and joins the thread.
#ifndef SLICED_SERVER_CORE_REAPER_H_
#define SLICED_SERVER_CORE_REAPER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sliced::server {

class Reaper {
 public:
  static constexpr size_t kWakeAt = 8;
  static constexpr size_t kMaxPending = 16;
  static constexpr absl::Duration kTick = absl::Milliseconds(100);

  // Starts the thread, named `name` (at most 15 characters).
  explicit Reaper(std::string name);
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
  ~Reaper();

  // Lets go of `p`: the reaper's thread drops the reference, freeing the
  // object unless a reader still holds it (then the last reader frees it).
  void Drop(std::shared_ptr<const void> p);

  // Objects dropped and not yet let go of (for tests).
  size_t pending() const;

 private:
  void Loop(const std::string& name);

  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<const void>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_REAPER_H_
