// CuttableProxy: a TCP proxy on loopback to an etcd member, which a test
// cuts to stand for a lost connection (the member itself keeps running).
#ifndef SLICED_TESTS_STORAGE_CUTTABLE_PROXY_H_
#define SLICED_TESTS_STORAGE_CUTTABLE_PROXY_H_

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace sliced::storage {

// A TCP proxy on 127.0.0.1 to one etcd member, which Cut() disconnects
// (every open connection closed, new ones refused) until Restore().
class CuttableProxy {
 public:
  explicit CuttableProxy(int target_port) : target_port_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    int yes = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listener_, 16);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Pump(); });
  }
  ~CuttableProxy() {
    stop_ = true;
    thread_.join();
    CloseAll();
    close(listener_);
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }
  void Cut() {
    absl::MutexLock lock(&mu_);
    cut_ = true;
  }
  void Restore() {
    absl::MutexLock lock(&mu_);
    cut_ = false;
  }

 private:
  int Connect() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  void CloseAll() {
    for (auto [a, b] : pairs_) {
      close(a);
      close(b);
    }
    pairs_.clear();
  }
  // One thread: accepts, and copies bytes both ways.
  void Pump() {
    char buffer[65536];
    while (!stop_) {
      bool cut = false;
      {
        absl::MutexLock lock(&mu_);
        cut = cut_;
      }
      if (cut) CloseAll();
      std::vector<pollfd> fds = {{listener_, POLLIN, 0}};
      for (auto [a, b] : pairs_) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      // Only the pairs polled above have entries in fds; one accepted below
      // waits for the next round.
      const size_t polled = pairs_.size();
      if (fds[0].revents & POLLIN) {
        int client = accept(listener_, nullptr, nullptr);
        int upstream = cut || client < 0 ? -1 : Connect();
        if (upstream < 0) {
          if (client >= 0) close(client);
        } else {
          pairs_.push_back({client, upstream});
        }
      }
      std::vector<std::pair<int, int>> alive;
      for (size_t i = 0; i < pairs_.size(); ++i) {
        if (i >= polled) {
          alive.push_back(pairs_[i]);
          continue;
        }
        bool open = true;
        for (int side = 0; side < 2 && open; ++side) {
          const pollfd& p = fds[1 + 2 * i + side];
          if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
          ssize_t n = read(p.fd, buffer, sizeof(buffer));
          int to = side == 0 ? pairs_[i].second : pairs_[i].first;
          if (n <= 0 || write(to, buffer, n) != n) open = false;
        }
        if (open) {
          alive.push_back(pairs_[i]);
        } else {
          close(pairs_[i].first);
          close(pairs_[i].second);
        }
      }
      pairs_ = std::move(alive);
    }
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<int, int>> pairs_;  // Pump's thread only
  std::thread thread_;
};

}  // namespace sliced::storage

#endif  // SLICED_TESTS_STORAGE_CUTTABLE_PROXY_H_
