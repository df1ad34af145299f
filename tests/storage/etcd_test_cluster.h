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
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
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
  // answers a read. `extra_flags` go to every member.
  static absl::StatusOr<std::unique_ptr<EtcdTestCluster>> Start(
      int members = 1, const std::vector<std::string>& extra_flags = {}) {
    std::unique_ptr<EtcdTestCluster> cluster(new EtcdTestCluster());
    char tmpl[] = "/tmp/sliced-etcd-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp");
    cluster->dir_ = tmpl;
    std::vector<std::string> initial;
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = absl::StrCat("m", i);
      m.client_port = FreePort();
      m.peer_port = FreePort();
      initial.push_back(
          absl::StrCat(m.name, "=http://127.0.0.1:", m.peer_port));
      cluster->members_.push_back(m);
    }
    for (Member& m : cluster->members_) {
      std::vector<std::string> args = {
          kBinary,
          "--name=" + m.name,
          absl::StrCat("--data-dir=", cluster->dir_, "/", m.name),
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
      m.pid = Spawn(args, absl::StrCat(cluster->dir_, "/", m.name, ".log"));
      if (m.pid <= 0) return absl::InternalError("fork etcd");
    }
    auto client = EtcdClient::Create({.endpoints = cluster->endpoints(),
                                      .call_timeout = absl::Seconds(1)});
    if (!client.ok()) return client.status();
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    etcdserverpb::RangeRequest probe;
    probe.set_key("probe");
    while (true) {
      auto read = (*client)->Range(probe);
      if (read.ok()) break;
      if (absl::Now() > give_up) {
        return absl::UnavailableError(absl::StrCat(
            "etcd did not come up (logs in ", cluster->dir_,
            "): ", read.status().message()));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return cluster;
  }

  ~EtcdTestCluster() {
    for (Member& m : members_) Kill(m);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Sends `sig` to member `i` (SIGSTOP/SIGCONT to pause and resume it).
  void Signal(int i, int sig) { kill(members_.at(i).pid, sig); }

  // host:port of every member, comma-separated.
  std::string endpoints() const {
    std::vector<std::string> out;
    for (const Member& m : members_) {
      out.push_back(absl::StrCat("127.0.0.1:", m.client_port));
    }
    return absl::StrJoin(out, ",");
  }

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };

  EtcdTestCluster() = default;

  static int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
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
