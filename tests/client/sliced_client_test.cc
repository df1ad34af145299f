// SlicedClient against an in-process fake Placement service that fails on
// command: retries, request ids, deadlines, the status mapping, waiting.
#include "client/sliced_client.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace sliced::client {
namespace {

// Answers UNAVAILABLE to the first `fail_first` unary calls, then `status`.
class FakePlacement final : public v1::Placement::Service {
 public:
  grpc::Status SubmitScalingConfig(
      grpc::ServerContext* context,
      const v1::SubmitScalingConfigRequest* request,
      v1::PlacementGroup* response) override {
    {
      absl::MutexLock lock(&mu_);
      request_ids_.push_back(request->request_id());
      auto auth = context->client_metadata().find("authorization");
      if (auth != context->client_metadata().end()) {
        authorization_ = std::string(auth->second.data(), auth->second.size());
      }
    }
    response->set_placement_group_id("pg-1");
    response->set_request_id(request->request_id());
    return Next(*context);
  }
  grpc::Status RemovePlacementGroup(
      grpc::ServerContext* context, const v1::RemovePlacementGroupRequest*,
      v1::RemovePlacementGroupResponse*) override {
    return Next(*context);
  }
  grpc::Status GetPlacementGroup(grpc::ServerContext* context,
                                 const v1::GetPlacementGroupRequest* request,
                                 v1::PlacementGroup* response) override {
    absl::SleepFor(delay);
    if (++get_calls_ > gets_before_not_found) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no placement group");
    }
    response->set_placement_group_id(request->placement_group_id());
    response->set_state(v1::PENDING);
    return Next(*context);
  }
  grpc::Status WatchPlacementGroups(
      grpc::ServerContext* context,
      const v1::WatchPlacementGroupsRequest* request,
      grpc::ServerWriter<v1::PlacementGroupEvent>* writer) override {
    const int call = ++watch_calls_;
    if (call <= watch_fail_first) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "dropped");
    }
    v1::PlacementGroupEvent event;
    event.mutable_placement_group()->set_placement_group_id(
        request->placement_group_id());
    event.mutable_placement_group()->set_state(v1::PENDING);
    writer->Write(event);
    if (call <= watch_fail_first + watch_fall_behind_first) {
      return grpc::Status(grpc::StatusCode::ABORTED,
                          "this stream fell behind: open it again");
    }
    if (call <=
        watch_fail_first + watch_fall_behind_first + watch_step_down_first) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "sliced is stepping down");
    }
    if (!watch_creates) {
      while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
      return grpc::Status::CANCELLED;
    }
    event.mutable_placement_group()->set_state(v1::CREATED);
    writer->Write(event);
    return grpc::Status::OK;
  }

  int calls() const { return calls_.load(); }
  int watch_calls() const { return watch_calls_.load(); }
  std::vector<std::string> request_ids() {
    absl::MutexLock lock(&mu_);
    return request_ids_;
  }
  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

  int fail_first = 0;
  grpc::StatusCode fail_code = grpc::StatusCode::UNAVAILABLE;
  // When set, the failed answers name this leader in `sliced-leader`, as a
  // standby's refusals do ("": none known yet).
  std::optional<std::string> fail_leader;
  grpc::Status status = grpc::Status::OK;
  absl::Duration delay = absl::ZeroDuration();
  bool watch_creates = true;
  // The first this many watch openings are answered CANCELLED, no event.
  int watch_fail_first = 0;
  // The next this many send their first event, then end ABORTED as a daemon
  // ends a stream that fell behind.
  int watch_fall_behind_first = 0;
  // The next this many send their first event, then end UNAVAILABLE as a
  // leader that steps down ends its streams.
  int watch_step_down_first = 0;
  // GetPlacementGroup answers NOT_FOUND after this many calls (removed).
  int gets_before_not_found = 1 << 30;

 private:
  grpc::Status Next(grpc::ServerContext& context) {
    int n = ++calls_;
    if (n > fail_first) return status;
    if (fail_leader.has_value()) {
      context.AddTrailingMetadata("sliced-leader", *fail_leader);
    }
    return grpc::Status(fail_code, "try again");
  }

  std::atomic<int> calls_{0};
  std::atomic<int> watch_calls_{0};
  std::atomic<int> get_calls_{0};
  absl::Mutex mu_;
  std::vector<std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

// The daemon of AConnectedClientGetsPastAPortClosedForAMoment, which runs
// this binary again with SLICED_FLAPPING_DAEMON set: it serves FakePlacement
// on a port it prints ("port N"); each line read from stdin closes the port
// for 5 ms ("back" once open again); it exits, before any test runs, when
// stdin ends.
void RunFlappingDaemon() {
  FakePlacement fake;
  int port = 0;
  auto serve = [&](int at) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(at),
                             grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake);
    return builder.BuildAndStart();
  };
  std::unique_ptr<grpc::Server> server = serve(0);
  std::printf("port %d\n", port);
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    server->Shutdown(std::chrono::system_clock::now());
    server->Wait();
    server.reset();
    absl::SleepFor(absl::Milliseconds(5));
    server = serve(port);
    std::printf(server != nullptr ? "back\n" : "lost the port\n");
    std::fflush(stdout);
  }
  std::_Exit(0);
}
const bool kFlappingDaemon = [] {
  if (std::getenv("SLICED_FLAPPING_DAEMON") != nullptr) RunFlappingDaemon();
  return false;
}();

// A standby (server/ha.h): every call UNAVAILABLE, the leader named in the
// trailing metadata `sliced-leader`; in its first `failover_calls` answers
// the name is empty (no leader is known yet: a failover is in progress).
class FakeStandby : public grpc::CallbackGenericService {
 public:
  explicit FakeStandby(std::string leader, int failover_calls = 0)
      : leader_(std::move(leader)), failover_calls_(failover_calls) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    const int n = calls++;
    absl::SleepFor(delay);
    context->AddTrailingMetadata("sliced-leader",
                                 n < failover_calls_ ? "" : leader_);
    class Finished : public grpc::ServerGenericBidiReactor {
     public:
      Finished() {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader"));
      }
      void OnDone() override { delete this; }
    };
    return new Finished();
  }
  std::atomic<int> calls{0};
  absl::Duration delay;  // before each refusal; set before the first call

 private:
  const std::string leader_;
  const int failover_calls_;
};

class SlicedClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.server = "127.0.0.1:" + std::to_string(port_);
    options_.initial_backoff = absl::Milliseconds(1);
    options_.timeout = absl::Seconds(10);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<SlicedClient> Client() {
    auto client = SlicedClient::Create(options_);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  // Opens a watch of pg-9 and reads two events; how many came (-1 if the
  // watch failed).
  static int WatchTwoEvents(SlicedClient& client) {
    v1::WatchPlacementGroupsRequest watch;
    watch.set_placement_group_id("pg-9");
    int events = 0;
    absl::Status status = client.WatchPlacementGroups(
        watch, absl::Seconds(10),
        [&](const v1::PlacementGroupEvent&) { return ++events < 2; });
    return status.ok() ? events : -1;
  }

  // Serves `standby` on a port of its own, where the next Client()'s calls
  // go; the leader it names is the fake placement unless said otherwise.
  std::unique_ptr<grpc::Server> ServeStandby(FakeStandby& standby) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterCallbackGenericService(&standby);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    options_.server = "127.0.0.1:" + std::to_string(port);
    return server;
  }

  FakePlacement fake_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ClientOptions options_;
};

TEST_F(SlicedClientTest, RetriesACreateWithOneGeneratedRequestId) {
  fake_.fail_first = 2;
  auto pg = Client()->SubmitScalingConfig(v1::SubmitScalingConfigRequest());
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(fake_.calls(), 3);
  std::vector<std::string> ids = fake_.request_ids();
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0].rfind("req-", 0), 0u) << ids[0];
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[1], ids[2]);
  EXPECT_EQ(pg->request_id(), ids[0]);
}

TEST_F(SlicedClientTest, KeepsTheCallersRequestId) {
  v1::SubmitScalingConfigRequest request;
  request.set_request_id("mine");
  ASSERT_TRUE(Client()->SubmitScalingConfig(request).ok());
  EXPECT_EQ(fake_.request_ids(), std::vector<std::string>{"mine"});
}

TEST_F(SlicedClientTest, SendsTheBearerTokenOnlyWhenSet) {
  ASSERT_TRUE(
      Client()->SubmitScalingConfig(v1::SubmitScalingConfigRequest()).ok());
  EXPECT_EQ(fake_.authorization(), "");
  options_.bearer_token = "s3cret-token-0123456789";
  ASSERT_TRUE(
      Client()->SubmitScalingConfig(v1::SubmitScalingConfigRequest()).ok());
  EXPECT_EQ(fake_.authorization(), "Bearer s3cret-token-0123456789");
}

TEST_F(SlicedClientTest, GeneratedRequestIdsDiffer) {
  EXPECT_NE(NewRequestId(), NewRequestId());
  EXPECT_EQ(NewRequestId().size(), 4u + 32u);
}

TEST_F(SlicedClientTest, GivesUpAfterMaxAttempts) {
  fake_.fail_first = 100;
  options_.max_attempts = 3;
  auto pg = Client()->GetPlacementGroup("pg-1");
  EXPECT_EQ(pg.status(), absl::UnavailableError("try again"));
  EXPECT_EQ(fake_.calls(), 3);
}

// A remove is retried; its NOT_FOUND after an attempt whose reply was lost
// is that attempt's success (docs/clients.md).
TEST_F(SlicedClientTest, ARemoveIsRetriedAndGoneAfterALostReplyIsDone) {
  fake_.fail_first = 1;
  EXPECT_TRUE(Client()->RemovePlacementGroup("pg-1").ok());
  EXPECT_EQ(fake_.calls(), 2);

  fake_.fail_first = 3;  // counts from the first call above
  fake_.status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no pg-1");
  EXPECT_TRUE(Client()->RemovePlacementGroup("pg-1").ok());
  EXPECT_EQ(fake_.calls(), 4);
}

// NOT_FOUND stands when no earlier attempt can have removed anything: on
// the first attempt, or after refusals naming a leader (or none yet), which
// say the daemon did nothing.
TEST_F(SlicedClientTest, ARemovesNotFoundStandsUnlessAnAttemptMayHaveLanded) {
  fake_.status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no pg-1");
  EXPECT_EQ(Client()->RemovePlacementGroup("pg-1"),
            absl::NotFoundError("no pg-1"));
  EXPECT_EQ(fake_.calls(), 1);

  fake_.fail_first = 3;  // two refusals that did nothing
  fake_.fail_leader = "";
  EXPECT_EQ(Client()->RemovePlacementGroup("pg-1"),
            absl::NotFoundError("no pg-1"));
  EXPECT_EQ(fake_.calls(), 4);
}

// What a daemon that stops its server as the call arrives answers (a
// standby turning leader): retried as UNAVAILABLE is.
TEST_F(SlicedClientTest, ACallTheServerCancelledIsRetriedWhenRetryable) {
  fake_.fail_code = grpc::StatusCode::CANCELLED;
  fake_.fail_first = 1;
  ASSERT_TRUE(Client()->GetPlacementGroup("pg-1").ok());
  EXPECT_EQ(fake_.calls(), 2);
  fake_.fail_first = 3;
  ASSERT_TRUE(
      Client()->SubmitScalingConfig(v1::SubmitScalingConfigRequest()).ok());
  const std::vector<std::string> ids = fake_.request_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], ids[1]);  // the same request: it cannot create twice
  fake_.fail_first = 6;
  EXPECT_TRUE(Client()->RemovePlacementGroup("pg-1").ok());
  EXPECT_EQ(fake_.calls(), 7);
}

// The opening of a watch the daemon dropped as it stopped (CANCELLED, no
// event yet) is retried as a unary call is, spending an attempt; once the
// attempts are spent, the CANCELLED comes back.
TEST_F(SlicedClientTest, AWatchOpeningTheServerCancelledIsRetried) {
  fake_.watch_fail_first = 2;
  EXPECT_EQ(WatchTwoEvents(*Client()), 2);
  EXPECT_EQ(fake_.watch_calls(), 3);
  fake_.watch_fail_first = 1000;
  options_.max_attempts = 2;
  v1::WatchPlacementGroupsRequest watch;
  watch.set_placement_group_id("pg-9");
  EXPECT_EQ(Client()
                ->WatchPlacementGroups(watch, absl::Seconds(10),
                                       [](const v1::PlacementGroupEvent&) {
                                         return true;
                                       })
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(fake_.watch_calls(), 3 + 2);
}

// A stream the daemon ended because it fell behind is opened again (the
// current state comes again), up to 3 times; then its ABORTED comes back to
// the wait, which reads the group and watches again.
TEST_F(SlicedClientTest, AWatchThatFellBehindIsOpenedAgain) {
  fake_.watch_fall_behind_first = 3;
  auto pg = Client()->WaitForPlacementGroup("pg-7", absl::Seconds(10));
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(pg->state(), v1::CREATED);
  EXPECT_EQ(fake_.watch_calls(), 4);
  // One that keeps falling behind: read and watched again (with backoff)
  // until the wait's own timeout.
  fake_.watch_fall_behind_first = 1000;
  auto still = Client()->WaitForPlacementGroup("pg-7", absl::Seconds(1));
  EXPECT_EQ(still.status().code(), absl::StatusCode::kDeadlineExceeded)
      << still.status();
  EXPECT_GT(fake_.watch_calls(), 4 + 4);
}

TEST_F(SlicedClientTest, AWaitOutlivesADaemonSteppingDown) {
  // The leader steps down mid-wait (UNAVAILABLE after the first event): the
  // group is read again and watched again, not given up on.
  fake_.watch_step_down_first = 2;
  auto pg = Client()->WaitForPlacementGroup("pg-7", absl::Seconds(10));
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(pg->state(), v1::CREATED);
  EXPECT_EQ(fake_.watch_calls(), 3);
}

TEST_F(SlicedClientTest, AWaitEndsWhenTheGroupIsGoneAfterABrokenWatch) {
  // Removed while its watch was broken: the new read says so (a new watch
  // would say nothing of a removed group).
  fake_.watch_step_down_first = 1;
  fake_.gets_before_not_found = 1;
  auto pg = Client()->WaitForPlacementGroup("pg-7", absl::InfiniteDuration());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kNotFound) << pg.status();
}

TEST_F(SlicedClientTest, AWaitWhoseFirstReadTimesOutIsNoWaitTimeout) {
  // The Get before the watch runs out of the call's own deadline: the daemon
  // did not answer (UNAVAILABLE), the wait did not time out (slicectl would
  // give the group up on DEADLINE_EXCEEDED).
  fake_.delay = absl::Seconds(1);
  options_.timeout = absl::Milliseconds(200);
  auto pg = Client()->WaitForPlacementGroup("pg-7", absl::Seconds(30));
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kUnavailable) << pg.status();
  EXPECT_NE(pg.status().message().find("reading placement group pg-7"),
            std::string::npos)
      << pg.status();
}

TEST_F(SlicedClientTest, OtherErrorsComeBackAsGivenWithoutRetry) {
  fake_.status =
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                   "scaling_config.topology: `topology` must be specified");
  auto pg = Client()->SubmitScalingConfig(v1::SubmitScalingConfigRequest());
  EXPECT_EQ(pg.status(),
            absl::InvalidArgumentError(
                "scaling_config.topology: `topology` must be specified"));
  EXPECT_EQ(fake_.calls(), 1);
}

TEST_F(SlicedClientTest, TheDeadlineCoversEveryAttempt) {
  fake_.fail_first = 100;
  options_.timeout = absl::Milliseconds(300);
  options_.initial_backoff =
      absl::Milliseconds(200);  // the 3rd try would be late
  options_.max_attempts = 10;
  absl::Time start = absl::Now();
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_.calls(), 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  fake_.fail_first = 0;
  fake_.delay = absl::Milliseconds(500);
  options_.timeout = absl::Milliseconds(100);
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(SlicedClientTest, WaitForPlacementGroupWatchesUntilCreated) {
  auto pg = Client()->WaitForPlacementGroup("pg-7", absl::Seconds(10));
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_EQ(pg->placement_group_id(), "pg-7");
  EXPECT_EQ(pg->state(), v1::CREATED);
}

TEST_F(SlicedClientTest, WaitForPlacementGroupTimesOutSayingTheState) {
  fake_.watch_creates = false;
  auto pg = Client()->WaitForPlacementGroup("pg-7", absl::Milliseconds(200));
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(pg.status().message().find("pg-7 is still PENDING"),
            std::string::npos)
      << pg.status();
}

TEST_F(SlicedClientTest, UnreachableServerIsUnavailable) {
  server_->Shutdown();
  options_.max_attempts = 2;
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status().code(),
            absl::StatusCode::kUnavailable);
}

// A daemon whose port reopens between two attempts (a restart; a failover
// moving a port from standby to leader) is reached by the next one: the
// channel reconnects on the attempts' schedule. With gRPC's default (1 s)
// all three attempts (at 0, 0.1 and 0.3 s) fail at once.
TEST_F(SlicedClientTest, ADaemonBackBetweenAttemptsIsReachedByTheNextOne) {
  server_->Shutdown();
  server_->Wait();
  server_.reset();
  options_.initial_backoff = absl::Milliseconds(100);
  options_.max_attempts = 3;
  auto client = Client();
  std::thread restart([this] {
    absl::SleepFor(absl::Milliseconds(50));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port_),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::PlacementGroup> pg = client->GetPlacementGroup("pg-1");
  restart.join();
  ASSERT_NE(server_, nullptr) << "port " << port_ << " was taken meanwhile";
  EXPECT_TRUE(pg.ok()) << pg.status() << " after "
                       << absl::FormatDuration(absl::Now() - start);
  EXPECT_EQ(fake_.calls(), 1);
}

// RunFlappingDaemon in a child process, killed when this goes.
class FlappingDaemon {
 public:
  FlappingDaemon() {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    std::string self = std::filesystem::read_symlink("/proc/self/exe");
    std::vector<char*> argv = {self.data(), nullptr};
    std::vector<std::string> env_strings = {"SLICED_FLAPPING_DAEMON=1"};
    for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
    std::vector<char*> env;
    for (std::string& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    if (posix_spawn(&pid_, self.c_str(), &actions, nullptr, argv.data(),
                    env.data()) != 0) {
      pid_ = 0;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    in_ = to_child[1];
    out_ = fdopen(from_child[0], "r");
    for (std::string line = Line(); !line.empty(); line = Line()) {
      if (std::sscanf(line.c_str(), "port %d", &port_) == 1) break;
    }
  }
  ~FlappingDaemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (in_ >= 0) close(in_);
    if (out_ != nullptr) std::fclose(out_);
  }
  // The port served; 0 if the child did not start.
  int port() const { return port_; }
  // Closes the port for 5 ms; whether it is open again.
  bool Flap() { return write(in_, "\n", 1) == 1 && Line() == "back\n"; }

 private:
  std::string Line() {
    char line[256];
    return out_ != nullptr && std::fgets(line, sizeof(line), out_) ? line : "";
  }
  pid_t pid_ = 0;
  int in_ = -1;
  FILE* out_ = nullptr;
  int port_ = 0;
};

// A port closed for 5 ms under a connected client (a standby's port handed
// to the new leader's server, server/ha.cc), five times, while the client
// calls every 2 ms: no call fails. The daemon is another process, as in
// life (in this one the server's threads would drive the channel's
// reconnection, which a call failing at once does not).
TEST(SlicedClientFlapTest, AConnectedClientGetsPastAPortClosedForAMoment) {
  FlappingDaemon daemon;
  ASSERT_NE(daemon.port(), 0);
  ClientOptions options;
  options.server = "127.0.0.1:" + std::to_string(daemon.port());
  auto client = SlicedClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->GetPlacementGroup("pg-1").ok());
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::vector<std::string> errors;
  std::thread caller([&] {
    while (!stop) {
      absl::StatusOr<v1::PlacementGroup> pg =
          (*client)->GetPlacementGroup("pg-1");
      if (pg.ok()) {
        ++ok;
      } else {
        errors.push_back(pg.status().ToString());
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  for (int round = 0; round < 5; ++round) {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(daemon.Flap()) << "round " << round;
  }
  absl::SleepFor(absl::Milliseconds(500));
  stop = true;
  caller.join();
  EXPECT_TRUE(errors.empty()) << errors.size() << " calls failed (" << ok
                              << " succeeded), the first: " << errors[0];
  EXPECT_GT(ok, 0);
}

TEST_F(SlicedClientTest, FollowsAStandbyToTheLeaderEvenForARemove) {
  const std::string leader = options_.server;
  FakeStandby standby(leader);  // the fake placement leads
  auto server = ServeStandby(standby);
  ASSERT_NE(server, nullptr);
  auto client = Client();
  // A standby did nothing: the remove goes to the leader, spending no
  // attempt.
  EXPECT_TRUE(client->RemovePlacementGroup("pg-1").ok());
  EXPECT_EQ(client->server(), leader);
  EXPECT_TRUE(client->GetPlacementGroup("pg-1").ok());
  EXPECT_EQ(standby.calls.load(), 1);
  EXPECT_EQ(fake_.calls(), 2);
  // A watch opened on the standby is opened again on the leader.
  EXPECT_EQ(WatchTwoEvents(*Client()), 2);
  EXPECT_EQ(standby.calls.load(), 2);
  // The leader goes away: the client goes back to the address it was given.
  server_->Shutdown();
  EXPECT_FALSE(client->GetPlacementGroup("pg-1").ok());
  EXPECT_EQ(client->server(), options_.server);
  server->Shutdown();
}

// During a failover the standby knows no leader for a while, then names the
// new one. Its answers did nothing, so any call waits for the leader, past
// max_attempts, within the call's deadline.
TEST_F(SlicedClientTest, WaitsOutAFailoverWithoutSpendingAttempts) {
  const std::string leader = options_.server;
  FakeStandby standby(leader, /*failover_calls=*/6);
  auto server = ServeStandby(standby);
  ASSERT_NE(server, nullptr);
  options_.max_attempts = 2;
  auto client = Client();
  EXPECT_TRUE(client->RemovePlacementGroup("pg-1").ok());
  EXPECT_EQ(standby.calls.load(), 6 + 1);
  EXPECT_EQ(fake_.calls(), 1);
  EXPECT_EQ(client->server(), leader);

  // The opening of a watch waits the same way.
  FakeStandby watch_standby(leader, /*failover_calls=*/5);
  auto watch_server = ServeStandby(watch_standby);
  ASSERT_NE(watch_server, nullptr);
  EXPECT_EQ(WatchTwoEvents(*Client()), 2);
  EXPECT_EQ(watch_standby.calls.load(), 5 + 1);
  watch_server->Shutdown();
  server->Shutdown();
}

// A failover that outlasts the call's deadline: the standby's UNAVAILABLE,
// as it gave it, before the deadline; with retries off, at once. An
// unreachable daemon still spends attempts.
TEST_F(SlicedClientTest, AFailoverLongerThanTheDeadlineIsUnavailable) {
  FakeStandby standby(options_.server, /*failover_calls=*/1000000);
  auto server = ServeStandby(standby);
  ASSERT_NE(server, nullptr);
  options_.max_attempts = 2;
  options_.timeout = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status(),
            absl::UnavailableError("not the leader"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_GT(standby.calls.load(), 2);  // attempts were not spent

  // Retries off (a caller with a backoff of its own): the refusal at once.
  standby.calls = 0;
  options_.max_attempts = 1;
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status(),
            absl::UnavailableError("not the leader"));
  EXPECT_EQ(standby.calls.load(), 1);
  server->Shutdown();

  options_.timeout = absl::Seconds(10);
  const absl::Time unreachable = absl::Now();
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - unreachable, absl::Seconds(5));
}

// The last try of a failover's waits leaves itself room to be answered: a
// standby 100 ms slow to refuse, a 350 ms deadline. Without that room the
// fourth try, begun at ~0.3 s, is cut short: DEADLINE_EXCEEDED, which says
// neither that nothing was done nor why.
TEST_F(SlicedClientTest, TheLastTryOfAFailoverHasRoomToBeAnswered) {
  FakeStandby standby(options_.server, /*failover_calls=*/1000000);
  standby.delay = absl::Milliseconds(100);
  auto server = ServeStandby(standby);
  ASSERT_NE(server, nullptr);
  options_.timeout = absl::Milliseconds(350);
  EXPECT_EQ(Client()->GetPlacementGroup("pg-1").status(),
            absl::UnavailableError("not the leader"));
  EXPECT_GE(standby.calls.load(), 1);
  server->Shutdown();
}

// A daemon that knows no leader for good (cut off from etcd while another
// leads) listed first beside the leader: the waits of a failover ask the
// other daemon too, and the call reaches the leader. (gRPC's default,
// pick_first, kept every call on the first daemon until the deadline.)
TEST_F(SlicedClientTest, ADaemonThatKnowsNoLeaderDoesNotHoldTheClient) {
  const std::string leader = options_.server;
  FakeStandby cut_off(/*leader=*/"", /*failover_calls=*/1000000);
  auto server = ServeStandby(cut_off);
  ASSERT_NE(server, nullptr);
  options_.server = absl::StrCat("ipv4:", options_.server, ",", leader);
  options_.timeout = absl::Seconds(5);
  auto client = Client();
  // round_robin offers a daemon only once its connection is up, which may
  // come after the leader's: call until the cut-off daemon has been asked
  // (at least 5 calls), and every call must reach the leader.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  int calls = 0;
  while (calls < 5 || cut_off.calls.load() == 0) {
    ASSERT_LT(absl::Now(), give_up) << "the cut-off daemon was never asked";
    EXPECT_TRUE(client->GetPlacementGroup("pg-1").ok()) << calls;
    ++calls;
  }
  EXPECT_EQ(fake_.calls(), calls);
  server->Shutdown();
}

TEST(SlicedClientCreateTest, RejectsBadOptions) {
  struct Case {
    const char* name;
    void (*mutate)(ClientOptions&);
    const char* expect;
  };
  const Case cases[] = {
      {"empty server", [](ClientOptions& o) { o.server = ""; }, "server"},
      {"no attempts", [](ClientOptions& o) { o.max_attempts = 0; },
       "max_attempts"},
      {"zero timeout",
       [](ClientOptions& o) { o.timeout = absl::ZeroDuration(); }, "timeout"},
      {"missing CA",
       [](ClientOptions& o) { o.root_ca_pem = "/nonexistent/ca.pem"; },
       "root_ca_pem: cannot read \"/nonexistent/ca.pem\""},
      {"cert without CA",
       [](ClientOptions& o) {
         o.client_cert_pem = "c.pem";
         o.client_key_pem = "k.pem";
       },
       "need root_ca_pem"},
      {"cert without key",
       [](ClientOptions& o) {
         o.root_ca_pem = "/dev/null";
         o.client_cert_pem = "c.pem";
       },
       "give both or neither"},
  };
  for (const Case& c : cases) {
    ClientOptions options;
    c.mutate(options);
    auto client = SlicedClient::Create(options);
    ASSERT_FALSE(client.ok()) << c.name;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name;
    EXPECT_NE(client.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << client.status();
  }
}

TEST(FromGrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    absl::Status s = FromGrpcStatus(grpc::Status(
        static_cast<grpc::StatusCode>(code), "as the server said"));
    EXPECT_EQ(static_cast<int>(s.code()), code);
    EXPECT_EQ(s.message(), "as the server said");
  }
}

}  // namespace
}  // namespace sliced::client
