// sliced_calib: DESIGN §7's calibration server, rebuilt so that every run of
// bench/go_ratio.py can measure it beside sliced with the same client.
//
// DESIGN §7 states the gRPC target (and issue 17 item 2 its 0.6) against a
// hand-built server that does nothing but what a durable create must: it
// answers `sliced.v1.Placement/CreatePlacementGroup` from one writer thread
// that takes every waiting request (no linger), writes one ~200-byte record
// per request in one RocksDB batch, syncs it, and only then replies. No
// inventory, no placement, no state in memory. What it reaches against the
// health check is the ceiling that client, machine and durable group commit
// leave; sliced's creates are measured as a share of it.
//
// Not a scheduler: a create "succeeds" with a fresh id and state CREATED
// whatever it asks, and every other RPC of the API is UNIMPLEMENTED. It
// serves the health service and reflection as sliced does, so that the Go
// client resolves the same method the same way.
//
//   sliced_calib --listen=127.0.0.1:0 --data_dir=DIR
//
// prints "sliced_calib: serving on HOST:PORT, ..." on stdout once it
// serves, and stops on SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "sliced/v1/sliced.grpc.pb.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC listen address");
ABSL_FLAG(std::string, data_dir, "", "RocksDB data directory (required)");

namespace sliced::bench {
namespace {

// The record a create leaves, as the calibration wrote: about 200 bytes.
constexpr size_t kRecordBytes = 200;

// One create waiting for its commit group.
struct Pending {
  grpc::ServerUnaryReactor* reactor;
  v1::PlacementGroup* reply;
  std::string record;
};

// Thread-safe: gRPC's threads call CreatePlacementGroup; one writer thread
// drains the queue.
class CalibrationService final : public v1::Placement::CallbackService {
 public:
  explicit CalibrationService(rocksdb::DB* db)
      : db_(db), writer_([this] { WriterLoop(); }) {}

  ~CalibrationService() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    writer_.join();
  }

  grpc::ServerUnaryReactor* CreatePlacementGroup(
      grpc::CallbackServerContext* context,
      const v1::CreatePlacementGroupRequest* request,
      v1::PlacementGroup* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    // The request's own bytes (its name varies per call), padded or cut to
    // the record's size.
    std::string record = request->SerializeAsString();
    record.resize(kRecordBytes, '.');
    absl::MutexLock lock(&mu_);
    queue_.push_back({reactor, reply, std::move(record)});
    return reactor;
  }

 private:
  void WriterLoop() {
    rocksdb::WriteOptions sync;
    sync.sync = true;
    for (;;) {
      std::deque<Pending> group;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](CalibrationService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
              return s->stopping_ || !s->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stopping, nothing left
        group.swap(queue_);
      }
      rocksdb::WriteBatch batch;
      std::vector<std::string> ids;
      ids.reserve(group.size());
      for (const Pending& p : group) {
        ids.push_back(absl::StrCat("pg-", next_id_++));
        batch.Put(ids.back(), p.record);
      }
      const rocksdb::Status s = db_->Write(sync, &batch);
      for (size_t i = 0; i < group.size(); ++i) {
        if (!s.ok()) {
          group[i].reactor->Finish(
              grpc::Status(grpc::StatusCode::UNAVAILABLE, s.ToString()));
          continue;
        }
        group[i].reply->set_placement_group_id(ids[i]);
        group[i].reply->set_state(v1::CREATED);
        group[i].reactor->Finish(grpc::Status::OK);
      }
    }
  }

  rocksdb::DB* const db_;
  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ = 1;  // writer thread only
  std::thread writer_;
};

int Main() {
  // Blocked before any thread starts, so that every thread inherits it and
  // the signals reach only the sigwait below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  if (dir.empty()) {
    std::fprintf(stderr, "sliced_calib: --data_dir: required\n");
    return 2;
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status opened = rocksdb::DB::Open(options, dir, &raw);
  if (!opened.ok()) {
    std::fprintf(stderr, "sliced_calib: --data_dir: %s\n",
                 opened.ToString().c_str());
    return 1;
  }
  std::unique_ptr<rocksdb::DB> db(raw);

  // As sliced does: the health proto's descriptor in the reflection pool.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto service = std::make_unique<CalibrationService>(db.get());
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "sliced_calib: --listen: cannot listen on %s\n",
                 absl::GetFlag(FLAGS_listen).c_str());
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus(true);

  const std::string host =
      absl::GetFlag(FLAGS_listen)
          .substr(0, absl::GetFlag(FLAGS_listen).rfind(':'));
  std::printf("sliced_calib: serving on %s:%d, RocksDB in %s\n", host.c_str(),
              port, dir.c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  server->Shutdown();
  service.reset();  // the writer answers what it holds, then stops
  return 0;
}

}  // namespace
}  // namespace sliced::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return sliced::bench::Main();
}
