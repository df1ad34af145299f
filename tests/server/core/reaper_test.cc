// The reaper frees what is dropped on its own thread; a reference still
// held keeps the object alive; past kMaxPending waiting objects, Drop()
// frees on the caller's thread; the destructor frees what is pending.
#include "server/core/reaper.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace sliced::server {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

// Records the thread an object is freed on; optionally blocks its free
// until `release` is notified.
struct Freed {
  absl::Mutex mu;
  std::vector<std::thread::id> threads ABSL_GUARDED_BY(mu);

  std::shared_ptr<const void> Make(absl::Notification* release = nullptr,
                                   absl::Notification* freeing = nullptr) {
    return std::shared_ptr<const int>(
        new int(0), [this, release, freeing](const int* p) {
          if (freeing != nullptr) freeing->Notify();
          if (release != nullptr) release->WaitForNotification();
          delete p;
          absl::MutexLock lock(&mu);
          threads.push_back(std::this_thread::get_id());
        });
  }
  // Waits until `n` objects were freed; their threads.
  std::vector<std::thread::id> WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    auto done = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
      return threads.size() >= n;
    };
    mu.AwaitWithTimeout(absl::Condition(&done), kWait);
    return threads;
  }
};

TEST(ReaperTest, FreesOnItsOwnThread) {
  Freed freed;
  Reaper reaper("test-reaper");
  reaper.Drop(freed.Make());
  reaper.Drop(freed.Make());
  const std::vector<std::thread::id> threads = freed.WaitFor(2);
  ASSERT_EQ(threads.size(), 2u);
  for (std::thread::id t : threads) EXPECT_NE(t, std::this_thread::get_id());
  reaper.Drop(nullptr);  // nothing to free
  EXPECT_EQ(reaper.pending(), 0u);
}

TEST(ReaperTest, AReaderKeepsWhatItHolds) {
  Freed freed;
  Reaper reaper("test-reaper");
  std::shared_ptr<const void> p = freed.Make();
  std::weak_ptr<const void> weak = p;
  std::shared_ptr<const void> reader = p;
  reaper.Drop(std::move(p));
  // Once the reaper has let go, the reader's reference is the last.
  const absl::Time deadline = absl::Now() + kWait;
  while (reaper.pending() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(reaper.pending(), 0u);
  while (weak.use_count() > 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE(weak.expired());
  reader.reset();  // freed here, by the last reader
  EXPECT_TRUE(weak.expired());
  const std::vector<std::thread::id> threads = freed.WaitFor(1);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0], std::this_thread::get_id());
}

TEST(ReaperTest, PastTheBoundTheCallerFrees) {
  Freed freed;
  absl::Notification release, freeing;
  {
    Reaper reaper("test-reaper");
    // The reaper's thread is held up freeing the first object.
    reaper.Drop(freed.Make(&release, &freeing));
    ASSERT_TRUE(freeing.WaitForNotificationWithTimeout(kWait));
    for (size_t i = 0; i < Reaper::kMaxPending; ++i) {
      reaper.Drop(freed.Make());
    }
    EXPECT_EQ(reaper.pending(), Reaper::kMaxPending);
    {
      absl::MutexLock lock(&freed.mu);
      EXPECT_TRUE(freed.threads.empty());
    }
    // One more than it holds: freed here, at once.
    reaper.Drop(freed.Make());
    {
      absl::MutexLock lock(&freed.mu);
      ASSERT_EQ(freed.threads.size(), 1u);
      EXPECT_EQ(freed.threads[0], std::this_thread::get_id());
    }
    release.Notify();
    // The destructor frees what is still pending before it returns.
  }
  absl::MutexLock lock(&freed.mu);
  EXPECT_EQ(freed.threads.size(), Reaper::kMaxPending + 2);
}

}  // namespace
}  // namespace sliced::server
