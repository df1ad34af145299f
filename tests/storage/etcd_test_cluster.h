// Real etcd members for tests: Debian's etcd-server (/usr/bin/etcd) started
// on free loopback ports with data in a temp dir, stopped by pid (SIGKILL,
// then waited for) when the cluster object goes, or with the test process. Nothing listens off
// 127.0.0.1.
//
// Not thread-safe; one test owns it.
#ifndef SLICED_TESTS_STORAGE_ETCD_TEST_CLUSTER_H_
#define SLICED_TESTS_STORAGE_ETCD_TEST_CLUSTER_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "storage/etcd/etcd_client.h"

namespace sliced::storage {

class EtcdTestCluster {
 public:
  static constexpr char kBinary[] = "/usr/bin/etcd";

  // Empty when etcd can run here; else why the etcd tests skip.
  static std::string Unavailable() {
    if (access(kBinary, X_OK) == 0) return "";
    return absl::StrCat(kBinary,
                        " is missing: apt-get install etcd-server "
                        "(scripts/install-deps.sh) to run the etcd tests");
  }

  // Starts `members` members and waits (up to 20 s) until the cluster
  // answers a read. `extra_flags` go to every member. A member that exits
  // while the cluster comes up (a port taken between the choice and etcd's
  // bind, say) restarts the whole cluster on new ports, up to 3 times; the
  // error then carries the end of each member's log, as the temp dir goes
  // with the cluster.
  static absl::StatusOr<std::unique_ptr<EtcdTestCluster>> Start(
      int members = 1, const std::vector<std::string>& extra_flags = {}) {
    absl::Status last;
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::unique_ptr<EtcdTestCluster> cluster(new EtcdTestCluster());
      last = cluster->Launch(members, extra_flags);
      if (last.ok()) return cluster;
      if (!cluster->AnyExited()) break;  // up but not answering: no retry
    }
    return last;
  }

  ~EtcdTestCluster() {
    for (Member& m : members_) Kill(m);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Sends `sig` to member `i` (SIGSTOP/SIGCONT to pause and resume it).
  // SIGSTOP returns once every thread of the member is stopped (up to 5 s):
  // kill() only queues it, and a thread running on the other core went on
  // to answer a request sent right after (seen under ASan: a commit meant
  // to time out was acknowledged in 11 ms).
  void Signal(int i, int sig) {
    const pid_t pid = members_.at(i).pid;
    kill(pid, sig);
    if (sig != SIGSTOP) return;
    for (int tries = 0; tries < 500 && !AllStopped(pid); ++tries) {
      usleep(10 * 1000);
    }
  }

  // host:port of every member, comma-separated.
  std::string endpoints() const {
    std::vector<std::string> out;
    for (const Member& m : members_) {
      out.push_back(absl::StrCat("127.0.0.1:", m.client_port));
    }
    return absl::StrJoin(out, ",");
  }

 private:
  // Whether every thread of `pid` is stopped ('T' in /proc/<pid>/task/*/stat).
  static bool AllStopped(pid_t pid) {
    std::error_code ec;
    const std::string tasks = absl::StrCat("/proc/", pid, "/task");
    for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream in(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
      // "pid (comm) S ...": the state follows the last ')'.
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size() ||
          stat[paren + 2] != 'T') {
        return false;
      }
    }
    return !ec;
  }

  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };

  EtcdTestCluster() = default;

  absl::Status Launch(int members, const std::vector<std::string>& extra_flags) {
    char tmpl[] = "/tmp/sliced-etcd-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp");
    dir_ = tmpl;
    std::vector<std::string> initial;
    std::set<int> chosen;
    auto fresh_port = [&chosen] {
      int port;
      do port = FreePort(); while (!chosen.insert(port).second);
      return port;
    };
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = absl::StrCat("m", i);
      m.client_port = fresh_port();
      m.peer_port = fresh_port();
      initial.push_back(
          absl::StrCat(m.name, "=http://127.0.0.1:", m.peer_port));
      members_.push_back(m);
    }
    for (Member& m : members_) {
      std::vector<std::string> args = {
          kBinary,
          "--name=" + m.name,
          absl::StrCat("--data-dir=", dir_, "/", m.name),
          absl::StrCat("--listen-client-urls=http://127.0.0.1:", m.client_port),
          absl::StrCat("--advertise-client-urls=http://127.0.0.1:",
                       m.client_port),
          absl::StrCat("--listen-peer-urls=http://127.0.0.1:", m.peer_port),
          absl::StrCat("--initial-advertise-peer-urls=http://127.0.0.1:",
                       m.peer_port),
          "--initial-cluster=" + absl::StrJoin(initial, ","),
          "--initial-cluster-state=new",
          "--heartbeat-interval=100",
          "--election-timeout=1000"};
      args.insert(args.end(), extra_flags.begin(), extra_flags.end());
      m.pid = Spawn(args, LogPath(m));
      if (m.pid <= 0) return absl::InternalError("fork etcd");
    }
    auto client = EtcdClient::Create(
        {.endpoints = endpoints(), .call_timeout = absl::Seconds(1)});
    if (!client.ok()) return client.status();
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    etcdserverpb::RangeRequest probe;
    probe.set_key("probe");
    while (true) {
      auto read = (*client)->Range(probe);
      if (read.ok()) return absl::OkStatus();
      if (AnyExited() || absl::Now() > give_up) {
        return absl::UnavailableError(absl::StrCat(
            "etcd did not come up (", read.status().message(), ")",
            LogTails()));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  // Whether a member has exited (and been reaped).
  bool AnyExited() {
    bool any = false;
    for (Member& m : members_) {
      if (m.pid > 0 && waitpid(m.pid, nullptr, WNOHANG) == m.pid) m.pid = -1;
      if (m.pid <= 0) any = true;
    }
    return any;
  }

  std::string LogPath(const Member& m) const {
    return absl::StrCat(dir_, "/", m.name, ".log");
  }

  // The last lines of every member's log, each headed by the member and
  // whether it still runs.
  std::string LogTails() const {
    std::string out;
    for (const Member& m : members_) {
      std::ifstream in(LogPath(m));
      std::deque<std::string> tail;
      for (std::string line; std::getline(in, line);) {
        tail.push_back(line);
        if (tail.size() > 5) tail.pop_front();
      }
      absl::StrAppend(&out, "\n--- ", m.name, " (",
                      m.pid > 0 ? "running" : "exited", "), end of its log:");
      for (const std::string& line : tail) absl::StrAppend(&out, "\n", line);
    }
    return out;
  }

  // A free 127.0.0.1 port below the kernel's ephemeral range. A port in
  // that range may go, between this choice and etcd's bind, to another
  // test's bind to port 0 or to any outgoing connection's source port;
  // below it, ports are handed out only by name (as tests/e2e's free_port).
  static int FreePort() {
    int low = 32768;  // Linux's default
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    range >> low;
    const int first = std::max(1024, low - 12000);
    static std::mt19937 pick{std::random_device{}()};
    std::uniform_int_distribution<int> in_range(first, std::max(first, low - 1));
    for (int i = 0; i < 200; ++i) {
      const int port = in_range(pick);
      if (!PortTaken(port)) return port;
    }
    return in_range(pick);  // etcd's bind then fails, and Start retries
  }

  static bool PortTaken(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    const bool taken =
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0;
    close(fd);
    return taken;
  }

  static pid_t Spawn(const std::vector<std::string>& args,
                     const std::string& log) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a crashed test
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }

  static void Kill(Member& m) {
    if (m.pid <= 0) return;
    kill(m.pid, SIGKILL);
    waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }

  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace sliced::storage

#endif  // SLICED_TESTS_STORAGE_ETCD_TEST_CLUSTER_H_
