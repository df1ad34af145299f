// Child-process daemon control; see daemon.h.
#include "bench/load/daemon.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sliced::bench {

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const std::string& binary, const std::string& data_dir,
    const std::vector<std::string>& extra_args, double timeout_s) {
  std::vector<std::string> args = {binary, "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0",
                                   "--data_dir=" + data_dir};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  auto daemon = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(fds[1], 1);
    const int log = open((data_dir + ".log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log >= 0) dup2(log, 2);
    close(fds[0]);
    close(fds[1]);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  daemon->pid_ = pid;
  daemon->stdout_fd_ = fds[0];
  std::string out;
  const auto deadline = start + std::chrono::duration<double>(timeout_s);
  while (out.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      return absl::UnavailableError(absl::StrCat(binary, " did not start in ",
                                                 timeout_s, " s: ", out));
    }
    char buf[512];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat(binary, " exited: ", out));
    }
    out.append(buf, n);
  }
  daemon->startup_s_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  daemon->banner_ = out.substr(0, out.find('\n'));
  // "sliced: serving on HOST:PORT, data dir ..."
  const size_t on = daemon->banner_.find("serving on ");
  const size_t comma = daemon->banner_.find(',', on);
  if (on == std::string::npos || comma == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("unexpected banner: ", daemon->banner_));
  }
  const std::string hostport = daemon->banner_.substr(on + 11, comma - on - 11);
  if (!absl::SimpleAtoi(hostport.substr(hostport.rfind(':') + 1), &daemon->port_)) {
    return absl::UnavailableError(absl::StrCat("no port in banner: ", daemon->banner_));
  }
  const size_t metrics = daemon->banner_.find("metrics on port ");
  if (metrics != std::string::npos) {
    if (!absl::SimpleAtoi(daemon->banner_.substr(metrics + 16), &daemon->metrics_port_)) {
      daemon->metrics_port_ = 0;  // no metrics: the columns stay empty
    }
  }
  return daemon;
}

std::map<std::string, double> DaemonProcess::ScrapeMetrics() const {
  std::map<std::string, double> out;
  if (metrics_port_ <= 0) return out;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(metrics_port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[16384];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
    }
  }
  close(fd);
  std::istringstream in(response);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string series = line.substr(0, space);
    double value = 0;
    if (!absl::SimpleAtod(line.substr(space + 1), &value)) continue;
    out[series.substr(0, series.find('{'))] += value;
  }
  return out;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Stop(SIGKILL);
}

void DaemonProcess::Stop(int signal) {
  if (pid_ <= 0) return;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
}

int64_t DaemonProcess::RssBytes() const {
  std::ifstream f(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream in(line.substr(6));
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

double DaemonProcess::CpuSeconds() const {
  // The process's CPU clock: every thread's, those ended included, to the
  // nanosecond (a call's worth of work shows; /proc's ticks are 10 ms).
  clockid_t clock;
  timespec ts;
  if (clock_getcpuclockid(pid_, &clock) == 0 &&
      clock_gettime(clock, &ts) == 0) {
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  }
  std::ifstream f(absl::StrCat("/proc/", pid_, "/stat"));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream in(text.substr(paren + 2));
  std::string field;
  double utime = 0, stime = 0;
  // Fields after the command: state is field 3; utime 14, stime 15.
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) / sysconf(_SC_CLK_TCK);
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace sliced::bench
