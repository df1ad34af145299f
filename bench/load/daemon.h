// Runs the real `sliced` daemon as a child process for the load generator:
// starts it on a free loopback port, waits for its "serving on" line and
// times the start-up (exec to that line), reads its RSS and CPU time from
// /proc, scrapes its /metrics, and kills it (SIGKILL or SIGTERM).
//
// Not thread-safe; owned by one thread.
#ifndef SLICED_BENCH_LOAD_DAEMON_H_
#define SLICED_BENCH_LOAD_DAEMON_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sliced::bench {

class DaemonProcess {
 public:
  // Starts `binary --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0
  // --data_dir=<data_dir> <extra_args...>` and waits (up to timeout_s) for
  // the start-up line; its stderr goes to <data_dir>.log. Returns
  // Unavailable if it exits or times out first,
  // with its last output.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const std::string& binary, const std::string& data_dir,
      const std::vector<std::string>& extra_args, double timeout_s = 120);
  ~DaemonProcess();  // SIGKILL if still running

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // Seconds from fork+exec to the "serving on" line.
  double startup_s() const { return startup_s_; }
  const std::string& banner() const { return banner_; }

  // The daemon's Prometheus /metrics, parsed: series name (labels dropped)
  // -> value summed over label sets. Empty when unreachable.
  std::map<std::string, double> ScrapeMetrics() const;
  // VmRSS in bytes; 0 when unreadable.
  int64_t RssBytes() const;
  // CPU time of every thread in seconds (the process's CPU clock, to the
  // nanosecond; else /proc's utime + stime); 0 when unreadable.
  double CpuSeconds() const;
  // Sends `signal` and reaps the process.
  void Stop(int signal);

 private:
  DaemonProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  double startup_s_ = 0;
  std::string banner_;
};

// Removes a directory tree (the daemon's temp data dir).
void RemoveTree(const std::string& path);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_LOAD_DAEMON_H_
