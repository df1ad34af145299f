#include "server/ha.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace sliced::server {
namespace {

void Say(const std::string& line) {
  std::printf("sliced: %s\n", line.c_str());
  std::fflush(stdout);
}

// How long a failed start as leader waits before campaigning again.
constexpr absl::Duration kRetryPause = absl::Seconds(1);

}  // namespace

// The standby's gRPC server: every method of every service answers
// UNAVAILABLE naming the leader (a generic service catches them all).
class HaDaemon::Redirect : public grpc::CallbackGenericService {
 public:
  // Binds `listen`; returns the bound port, 0 when it can't.
  int Start(const std::string& listen,
            std::shared_ptr<grpc::ServerCredentials> credentials,
            storage::EtcdElection* election) {
    election_ = election;
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
  ~Redirect() override {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
    }
  }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    absl::StatusOr<std::string> leader = election_->LeaderValue();
    std::string message;
    if (leader.ok()) {
      context->AddTrailingMetadata(kLeaderMetadataKey, *leader);
      message = absl::StrCat("not the leader: this sliced is a standby; the "
                             "leader is at ",
                             *leader);
    } else {
      message = absl::StrCat(
          "not the leader: this sliced is a standby and no leader is known "
          "(a failover is in progress?); retry: ",
          leader.status().message());
    }
    class Finished : public grpc::ServerGenericBidiReactor {
     public:
      explicit Finished(const std::string& message) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
      }
      void OnDone() override { delete this; }
    };
    return new Finished(message);
  }

 private:
  storage::EtcdElection* election_ = nullptr;
  std::unique_ptr<grpc::Server> server_;
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
  ASSIGN_OR_RETURN(std::shared_ptr<storage::EtcdClient> client,
                   storage::EtcdClient::Create(
                       {.endpoints = options.etcd_endpoints,
                        .call_timeout = options.lease_ttl / 3}));
  std::unique_ptr<HaDaemon> daemon(
      new HaDaemon(server_options, options, std::move(client)));
  ASSIGN_OR_RETURN(auto credentials, ServerCredentials(server_options));
  daemon->redirect_ = std::make_unique<Redirect>();
  const int port = daemon->redirect_->Start(
      server_options.listen, credentials, &daemon->election_);
  if (port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", server_options.listen,
        " (address in use or not a valid host:port)"));
  }
  // The leader serves on the port the standby got (--listen may say 0).
  std::string& listen = daemon->server_options_.listen;
  listen = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  if (daemon->options_.advertise.empty()) daemon->options_.advertise = listen;
  Say(absl::StrCat("standby on ", listen, " (etcd ", options.etcd_endpoints,
                   ", cluster ", options.cluster,
                   "); campaigning for leadership"));
  daemon->loop_ = std::thread([d = daemon.get()] { d->Loop(); });
  return daemon;
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
                         .ttl = options.lease_ttl}) {}

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
    absl::StatusOr<storage::Leadership> leadership = election_.Campaign();
    if (!leadership.ok()) break;  // stopped
    redirect_.reset();
    Lead(*leadership);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    auto credentials = ServerCredentials(server_options_);
    redirect_ = std::make_unique<Redirect>();
    while (credentials.ok() &&
           redirect_->Start(server_options_.listen, *credentials,
                            &election_) == 0) {
      absl::SleepFor(absl::Milliseconds(100));  // the leader's port frees
      redirect_ = std::make_unique<Redirect>();
    }
    Say(absl::StrCat("standby on ", server_options_.listen,
                     "; campaigning for leadership"));
  }
  redirect_.reset();
}

void HaDaemon::Lead(const storage::Leadership& leadership) {
  const absl::Time won = absl::Now();
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
           .retry_for = options_.lease_ttl});
  absl::StatusOr<std::unique_ptr<SlicedServer>> server =
      store.ok() ? SlicedServer::StartWithStore(server_options_,
                                                std::move(*store))
                 : store.status();
  if (!server.ok()) {
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
                   absl::FormatDuration(absl::Now() - won),
                   ", metrics on port ", (*server)->metrics_port()));
  {
    absl::MutexLock lock(&mu_);
    server_ = std::move(*server);
  }
  const std::string why = election_.AwaitLost();
  std::unique_ptr<SlicedServer> serving;
  {
    absl::MutexLock lock(&mu_);
    serving = std::move(server_);
  }
  serving->Shutdown();
  if (!why.empty()) Say(absl::StrCat("lost leadership: ", why));
}

}  // namespace sliced::server
