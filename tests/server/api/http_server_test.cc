// The HTTP port stops however soon after it starts: cpp-httplib 0.11's
// stop() does nothing until the listener thread runs its accept loop, so a
// port closed at once (a standby elected as soon as it starts) waited in
// accept() for good.
#include "server/api/http_server.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace sliced::server::api {
namespace {

TEST(HttpServerTest, StopsAtOnceAfterItStarts) {
  // Threads that keep both cores busy, so that a new listener thread is
  // rarely scheduled before Start returns.
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < 2; ++i) {
    hogs.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  absl::Notification done;
  // A stuck destructor never returns: the test fails (aborts) instead of
  // waiting for ctest's timeout.
  std::thread watchdog([&] {
    if (!done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
      std::fprintf(stderr, "an HttpServer's destructor did not return\n");
      std::abort();
    }
  });
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  for (int round = 0; round < 300; ++round) {
    auto server = HttpServer::Start(options, {}, nullptr);
    ASSERT_TRUE(server.ok()) << server.status();
    server->reset();
  }
  done.Notify();
  watchdog.join();
  stop = true;
  for (std::thread& t : hogs) t.join();
}

}  // namespace
}  // namespace sliced::server::api
