#include "server/ha.h"

#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/api/status.h"

namespace sliced::server {
namespace {

void Say(const std::string& line) {
  std::printf("sliced: %s\n", line.c_str());
  std::fflush(stdout);
}

// How long a failed start as leader waits before campaigning again.
constexpr absl::Duration kRetryPause = absl::Seconds(1);
// How often a daemon that lost leadership looks whether its old server's
// port is free for the standby's: a client finds the port closed that long.
constexpr absl::Duration kPortPoll = absl::Milliseconds(10);

// Whether `listen` (host:port as gRPC takes it) can be bound now: a plain
// bind as gRPC's (SO_REUSEADDR), so that waiting for a port to be freed
// does not log gRPC's bind errors. True when it cannot tell (gRPC says).
bool PortFree(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return true;
  std::string host = listen.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = listen.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                  &found) != 0) {
    return true;
  }
  bool bindable = true;
  for (const addrinfo* a = found; a != nullptr && bindable; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
                          a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) {
      bindable = false;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return bindable;
}

// The answer to a call this daemon does not serve, as a standby or stepping
// down: UNAVAILABLE naming the leader (in the message, and as
// api::WithLeader for the trailing metadata) when one is known that is not
// this daemon; when none is, the leader named is empty, which tells the
// clients that a failover is in progress and to wait for it (docs/ha.md).
// Asks etcd.
absl::Status NotLeader(storage::EtcdElection& election) {
  absl::StatusOr<std::string> leader = election.LeaderValue();
  if (leader.ok() && *leader == election.value()) {
    leader = absl::NotFoundError("this daemon's key is not gone yet");
  }
  if (!leader.ok()) {
    return api::WithLeader(
        absl::UnavailableError(absl::StrCat(
            "not the leader: this sliced is a standby and no leader is known "
            "(a failover is in progress?); retry: ",
            leader.status().message())),
        "");
  }
  return api::WithLeader(
      absl::UnavailableError(absl::StrCat(
          "not the leader: this sliced is a standby; the leader is at ",
          *leader)),
      *leader);
}

prometheus::MetricFamily Family(const char* name, const char* help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily family{name, help, type, {}};
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

// This process's CPU seconds, resident and virtual bytes from
// /proc/self/stat (fields 14, 15, 23, 24); false when it can't be read.
bool ReadProcStat(double& cpu_seconds, double& rss_bytes, double& vm_bytes) {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return false;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(paren + 2), ' ');  // from field 3 (state)
  int64_t utime = 0, stime = 0, vsize = 0, rss = 0;
  if (fields.size() < 22 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime) ||
      !absl::SimpleAtoi(fields[20], &vsize) ||
      !absl::SimpleAtoi(fields[21], &rss)) {
    return false;
  }
  cpu_seconds = static_cast<double>(utime + stime) /
                static_cast<double>(sysconf(_SC_CLK_TCK));
  rss_bytes = static_cast<double>(rss) *
              static_cast<double>(sysconf(_SC_PAGESIZE));
  vm_bytes = static_cast<double>(vsize);
  return true;
}

}  // namespace

// The series every daemon under --store=etcd exports, on the standby's
// /metrics and beside the leader's own (docs/ha.md): its role, its hot copy,
// and the process. Thread-safe (scrapes run on the HTTP server's threads).
class HaDaemon::Collector : public prometheus::Collectable {
 public:
  explicit Collector(const storage::EtcdMirror* mirror)
      : mirror_(mirror), started_(absl::Now()) {}

  void SetLeader(bool leader) {
    leader_ = leader;
    if (leader) ++terms_;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    std::vector<prometheus::MetricFamily> out;
    out.push_back(Family("sliced_ha_leader",
                         "1 while this daemon leads and serves, 0 while it "
                         "stands by",
                         MetricType::Gauge, leader_ ? 1 : 0));
    out.push_back(Family("sliced_ha_leader_terms_total",
                         "Times this process won the election",
                         MetricType::Counter,
                         static_cast<double>(terms_.load())));
    if (mirror_ != nullptr) {
      const storage::EtcdMirrorStats m = mirror_->stats();
      out.push_back(Family(
          "sliced_ha_standby_watching",
          "1 while the standby's copy is loaded and its etcd watch is open",
          MetricType::Gauge, m.watching ? 1 : 0));
      out.push_back(Family("sliced_ha_standby_revision",
                           "The etcd revision the standby's copy is exact at",
                           MetricType::Gauge,
                           static_cast<double>(m.revision)));
      out.push_back(Family(
          "sliced_ha_standby_lag_revisions",
          "etcd's revision in the latest watch message minus the copy's",
          MetricType::Gauge,
          static_cast<double>(std::max<int64_t>(
              0, m.head_revision - m.revision))));
      out.push_back(Family("sliced_ha_standby_records",
                           "Nodes, groups and classes in the standby's copy",
                           MetricType::Gauge,
                           static_cast<double>(m.records)));
      out.push_back(Family("sliced_ha_standby_loads_total",
                           "Full reads of the prefix by the standby (the "
                           "first of each standby term, after compaction)",
                           MetricType::Counter,
                           static_cast<double>(m.loads)));
      out.push_back(Family("sliced_ha_standby_events_total",
                           "etcd watch events applied to the standby's copy",
                           MetricType::Counter,
                           static_cast<double>(m.events)));
      out.push_back(Family("sliced_ha_standby_watch_restarts_total",
                           "Watch streams re-opened after breaking",
                           MetricType::Counter,
                           static_cast<double>(m.watch_restarts)));
    }
    double cpu = 0, rss = 0, vm = 0;
    if (ReadProcStat(cpu, rss, vm)) {
      out.push_back(Family("process_cpu_seconds_total",
                           "User and system CPU time spent in seconds",
                           MetricType::Counter, cpu));
      out.push_back(Family("process_resident_memory_bytes",
                           "Resident memory size in bytes", MetricType::Gauge,
                           rss));
      out.push_back(Family("process_virtual_memory_bytes",
                           "Virtual memory size in bytes", MetricType::Gauge,
                           vm));
    }
    std::error_code error;
    double fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", error);
         !error && it != std::filesystem::directory_iterator();
         it.increment(error)) {
      ++fds;
    }
    out.push_back(Family("process_open_fds", "Open file descriptors",
                         MetricType::Gauge, fds));
    out.push_back(Family("process_start_time_seconds",
                         "Start time of the process since the Unix epoch",
                         MetricType::Gauge,
                         absl::ToDoubleSeconds(started_ - absl::UnixEpoch())));
    return out;
  }

 private:
  const storage::EtcdMirror* const mirror_;
  const absl::Time started_;
  std::atomic<bool> leader_{false};
  std::atomic<int64_t> terms_{0};
};

// The standby's gRPC server: every method of every service answers
// UNAVAILABLE naming the leader (a generic service catches them all).
class HaDaemon::Redirect : public grpc::CallbackGenericService {
 public:
  // Binds `listen`; returns the bound port, 0 when it can't.
  int Start(const std::string& listen,
            std::shared_ptr<grpc::ServerCredentials> credentials,
            storage::EtcdElection* election) {
    election_ = election;
    looker_ = std::thread([this] { Look(); });
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    int port = 0;
    builder.AddListeningPort(listen, std::move(credentials), &port);
    builder.RegisterCallbackGenericService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) return 0;
    server_->GetHealthCheckService()->SetServingStatus(false);
    return port;
  }
  // Between winning and serving (the state loading), calls are refused as
  // during a failover: empty `sliced-leader`, so the clients wait.
  void SetElected(bool elected) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    elected_ = elected;
    // A lookup under way asked for the daemon before this: its answer is
    // dropped, and calls wait for a fresh one.
    ++generation_;
    answered_ = false;
    fresh_until_ = absl::InfinitePast();
  }

  ~Redirect() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
    }
    if (looker_.joinable()) looker_.join();
  }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    const grpc::Status status = api::ToGrpcStatus(Refusal(), *context);
    class Finished : public grpc::ServerGenericBidiReactor {
     public:
      explicit Finished(const grpc::Status& status) { Finish(status); }
      void OnDone() override { delete this; }
    };
    return new Finished(status);
  }

 private:
  // How long a refusal is reused: the leader it names is at most this late
  // (plus the lookup's own time).
  static constexpr absl::Duration kRefusalFresh = absl::Milliseconds(100);

  // NotLeader(), asked of etcd at most once per kRefusalFresh: a standby
  // refuses every call, and during a failover every client polls it. The
  // lookup runs on a thread of its own (Look), and a call meanwhile gets
  // the last answer: a standby cut off from etcd, whose every lookup waits
  // TTL/3, still answers at once. Only the calls before its first answer
  // (after a start or SetElected) wait for it.
  absl::Status Refusal() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!elected_ && !looking_ && absl::Now() >= fresh_until_) wanted_ = true;
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return elected_ || answered_ || stopping_;
    };
    mu_.Await(absl::Condition(&ready));
    if (elected_) {
      return api::WithLeader(
          absl::UnavailableError(
              "not the leader yet: this sliced was elected and is loading "
              "the cluster state; retry"),
          "");
    }
    if (!answered_) {
      return api::WithLeader(
          absl::UnavailableError(
              "not the leader: this sliced's standby port is closing; retry"),
          "");
    }
    return refusal_;
  }

  // The looker thread: asks etcd whenever a call finds the last answer
  // stale, until the destructor.
  void Look() ABSL_LOCKS_EXCLUDED(mu_) {
    pthread_setname_np(pthread_self(), "sliced-redirect");
    auto asked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return wanted_ || stopping_;
    };
    while (true) {
      uint64_t generation;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(&asked));
        if (stopping_) return;
        wanted_ = false;
        looking_ = true;
        generation = generation_;
      }
      absl::Status answer = NotLeader(*election_);
      absl::MutexLock lock(&mu_);
      looking_ = false;
      if (generation != generation_) {
        wanted_ = true;  // asked before SetElected: ask again
        continue;
      }
      refusal_ = std::move(answer);
      answered_ = true;
      fresh_until_ = absl::Now() + kRefusalFresh;
    }
  }

  storage::EtcdElection* election_ = nullptr;
  std::unique_ptr<grpc::Server> server_;
  std::thread looker_;
  absl::Mutex mu_;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  // refusal_ holds an answer asked for since the last SetElected.
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time fresh_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;   // a call asks for a lookup
  bool looking_ ABSL_GUARDED_BY(mu_) = false;  // the looker asks etcd
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool elected_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<HaDaemon>> HaDaemon::Start(
    const ServerOptions& server_options, const HaOptions& options) {
  if (options.cluster.empty() ||
      options.cluster.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        "--etcd_cluster must be a non-empty name without '/'");
  }
  if (options.lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--etcd_lease_ttl must be >= 1s");
  }
  if (options.advertise.empty()) {
    // The leader is named by its advertised address: a wildcard names no
    // host, and every daemon listening on it would name the same one (a
    // standby then takes the leader's key for its own, and names none).
    const std::string& listen = server_options.listen;
    const absl::string_view host =
        absl::string_view(listen).substr(0, listen.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::" ||
        host == "*") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--advertise (host:port clients reach this daemon at) is required "
          "with a wildcard --listen (",
          Quote(listen),
          "): standbys name the leader by it, and a wildcard names no host"));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<storage::EtcdClient> client,
                   storage::EtcdClient::Create(
                       {.endpoints = options.etcd_endpoints,
                        .call_timeout = options.lease_ttl / 3}));
  std::unique_ptr<HaDaemon> daemon(
      new HaDaemon(server_options, options, std::move(client)));
  RETURN_IF_ERROR(ServerCredentials(server_options).status());
  RETURN_IF_ERROR(daemon->StartStandbyPorts());
  const std::string& listen = daemon->server_options_.listen;
  if (daemon->options_.advertise.empty()) daemon->options_.advertise = listen;
  Say(absl::StrCat("standby on ", listen, " (etcd ", options.etcd_endpoints,
                   ", cluster ", options.cluster, ", metrics port ",
                   daemon->standby_http_ ? daemon->standby_http_->port() : 0,
                   "); campaigning for leadership"));
  daemon->loop_ = std::thread([d = daemon.get()] { d->Loop(); });
  return daemon;
}

absl::Status HaDaemon::StartStandbyPorts() {
  if (redirect_ == nullptr) {
    ASSIGN_OR_RETURN(auto credentials, ServerCredentials(server_options_));
    auto redirect = std::make_unique<Redirect>();
    const int port =
        PortFree(server_options_.listen)
            ? redirect->Start(server_options_.listen, credentials, &election_)
            : 0;
    if (port == 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", server_options_.listen,
          " (address in use or not a valid host:port)"));
    }
    redirect_ = std::move(redirect);
    // The leader serves on the port the standby got (--listen may say 0).
    std::string& listen = server_options_.listen;
    listen = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  }
  std::string& metrics = server_options_.metrics_listen;
  if (standby_http_ == nullptr && !metrics.empty()) {
    absl::StatusOr<std::unique_ptr<api::HttpServer>> http =
        api::HttpServer::Start({.listen = metrics,
                                .tls_cert = server_options_.tls_cert,
                                .tls_key = server_options_.tls_key,
                                .tls_client_ca = server_options_.tls_client_ca,
                                .auth = nullptr},
                               {collector_}, /*api=*/nullptr);
    if (!http.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot serve metrics on ", metrics, ": ", http.status().message()));
    }
    standby_http_ = std::move(*http);
    metrics = absl::StrCat(metrics.substr(0, metrics.rfind(':')), ":",
                           standby_http_->port());
  }
  return absl::OkStatus();
}

void HaDaemon::StopStandbyPorts() {
  redirect_.reset();
  standby_http_.reset();
}

HaDaemon::HaDaemon(const ServerOptions& server_options,
                   const HaOptions& options,
                   std::shared_ptr<storage::EtcdClient> client)
    : server_options_(server_options),
      options_(options),
      client_(client),
      election_(client, {.name = absl::StrCat("/sliced/", options.cluster,
                                              "/leader"),
                         .value = "",  // set in Loop, once advertise is known
                         .ttl = options.lease_ttl}),
      mirror_(options.hot_standby
                  ? std::make_shared<storage::EtcdMirror>(
                        client,
                        storage::EtcdMirrorOptions{
                            .prefix =
                                absl::StrCat("/sliced/", options.cluster, "/"),
                            .election = absl::StrCat(
                                "/sliced/", options.cluster, "/leader")})
                  : nullptr),
      collector_(std::make_shared<Collector>(mirror_.get())) {
  server_options_.extra_metrics.push_back(collector_);
}

HaDaemon::~HaDaemon() { Shutdown(); }

void HaDaemon::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  election_.Stop();
  if (loop_.joinable()) loop_.join();
}

absl::Status HaDaemon::ReloadAuth() {
  absl::MutexLock lock(&mu_);
  if (server_ == nullptr) {
    return absl::FailedPreconditionError(
        "a standby has no auth to reload (it answers every call with the "
        "leader's address)");
  }
  return server_->ReloadAuth();
}

void HaDaemon::Loop() {
  pthread_setname_np(pthread_self(), "sliced-ha");
  election_.set_value(options_.advertise);
  while (true) {
    if (mirror_ != nullptr) mirror_->Start();
    absl::StatusOr<storage::Leadership> leadership = election_.Campaign();
    if (!leadership.ok()) break;  // stopped
    Lead(*leadership);
    auto stopping = [this] {
      absl::MutexLock lock(&mu_);
      return stopping_;
    };
    // The standby's ports open as soon as the old server's close (its calls
    // in flight may still be finishing, on stepping_down_, for up to its
    // grace); past that, someone else holds a port, and the log says so.
    const absl::Time warn_at =
        absl::Now() + options_.lease_ttl + absl::Seconds(5);
    bool warned = false;
    // Until a shutdown (SIGTERM) ends the wait.
    while (!stopping()) {
      absl::Status started = StartStandbyPorts();
      if (started.ok()) break;
      if (started.code() != absl::StatusCode::kUnavailable) {
        Say(absl::StrCat("standby without its ports: ", started.ToString()));
        break;
      }
      if (!warned && absl::Now() >= warn_at) {
        Say(absl::StrCat("standby still waiting for its ports: ",
                         started.message(), "; retrying"));
        warned = true;
      }
      absl::SleepFor(kPortPoll);
    }
    if (stepping_down_.joinable()) stepping_down_.join();
    if (stopping()) break;
    Say(absl::StrCat("standby on ", server_options_.listen,
                     "; campaigning for leadership"));
  }
  StopStandbyPorts();
  if (mirror_ != nullptr) mirror_->Stop();
}

void HaDaemon::Lead(const storage::Leadership& leadership) {
  const absl::Time won = absl::Now();
  // The standby's port answers "loading; retry" until the leader's binds it.
  if (redirect_ != nullptr) redirect_->SetElected(true);
  std::string loaded_from = "etcd";
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::OpenEtcdStore(
          client_,
          {.prefix = absl::StrCat("/sliced/", options_.cluster, "/"),
           .fence_key = leadership.key,
           .fence_revision = leadership.revision,
           .on_fenced =
               [this](absl::string_view why) { election_.MarkLost(why); },
           .max_txn_ops = options_.max_txn_ops,
           .max_request_bytes = options_.max_request_bytes,
           .retry_for = options_.lease_ttl,
           .mirror = mirror_,
           .loaded_from = &loaded_from});
  absl::StatusOr<std::unique_ptr<SlicedServer>> server =
      store.ok() ? SlicedServer::StartWithStore(
                       server_options_, std::move(*store),
                       [this] { StopStandbyPorts(); })
                 : store.status();
  if (!server.ok()) {
    if (redirect_ != nullptr) redirect_->SetElected(false);
    const absl::StatusCode code = server.status().code();
    Say(absl::StrCat("elected, but cannot serve: ",
                     server.status().ToString()));
    if (code == absl::StatusCode::kFailedPrecondition ||
        code == absl::StatusCode::kDataLoss ||
        code == absl::StatusCode::kInvalidArgument) {
      _exit(1);  // the stored state or the flags are wrong: a person must look
    }
    election_.MarkLost(server.status().message());
    election_.AwaitLost();
    absl::SleepFor(kRetryPause);
    return;
  }
  Say(absl::StrCat("leading (etcd key ", leadership.key, ", revision ",
                   leadership.revision, "): serving on ",
                   server_options_.listen, ", ", (*server)->node_count(),
                   " nodes loaded in ",
                   absl::FormatDuration(absl::Now() - won), " from ",
                   loaded_from, ", metrics on port ",
                   (*server)->metrics_port()));
  {
    absl::MutexLock lock(&mu_);
    server_ = std::move(*server);
  }
  collector_->SetLeader(true);
  const std::string why = election_.WaitLost();
  collector_->SetLeader(false);
  std::unique_ptr<SlicedServer> serving;
  {
    absl::MutexLock lock(&mu_);
    serving = std::move(server_);
  }
  if (!why.empty()) Say(absl::StrCat("lost leadership: ", why));
  // Nothing more is served here from now on. What comes next asks etcd
  // (revoking the lease, then the next leader's name), and when etcd can't
  // be reached, often why leadership was lost, each waits up to TTL/3:
  // meanwhile a new leader may already serve, and clients wait for it.
  serving->Refuse(api::WithLeader(
      absl::UnavailableError(
          "not the leader: this sliced is stepping down and no leader is "
          "known yet (a failover is in progress?); retry"),
      ""));
  election_.EndTerm();
  // Clients are sent where the standby would send them. A commit under way
  // is answered within the store's retry_for (one TTL); the rest at once.
  // On a thread of its own, so that the standby's port opens as soon as
  // the server's closes (Loop), not once the last call has finished.
  stepping_down_ = std::thread(
      [serving = std::move(serving), refusal = NotLeader(election_),
       grace = options_.lease_ttl + absl::Seconds(2)] {
        pthread_setname_np(pthread_self(), "sliced-stepdown");
        serving->StepDown(refusal, grace);
      });
}

}  // namespace sliced::server
