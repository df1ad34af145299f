// sliced_load: end-to-end load and scaling against the real daemon.
//
//   sliced_load --daemon=build/server/sliced [--quick] --out_dir=DIR
//
// 1. Throughput: starts a daemon on a fresh data dir (durable commits,
//    leases off), registers a generated fleet, then for each repetition and
//    each client count runs the no-op health check and every workload
//    (closed_loop.h) back to back, so each ratio to the gRPC ceiling comes
//    from one run.
// 2. Scaling: per fleet size, a fresh daemon: RSS empty, after registering
//    the nodes (RegisterNodes batches of 1,000), after creating nodes x
//    --pgs_per_node placement groups; then kill -9 and restart, timing exec
//    to the "serving on" line.
// 3. Churn (issue 17): per fleet size, a fresh daemon: the time to register
//    the fleet in batches of 1,000, then create_remove phases (16 clients)
//    alternating quiet and with one new node registering every 0.5 s,
//    paired per repetition so each ratio comes from back-to-back phases.
// 4. Heartbeats (issue 17): per fleet size, a fresh daemon with leases on:
//    the daemon's CPU for every node beating once per --beat_lease (one
//    node per RPC, then --beat_batch per RPC) with nothing else running,
//    then create_remove phases quiet / with single beats / with batched
//    beats, back to back per repetition.
// 5. Watchers (issue 17): a fresh daemon with --fleet_nodes nodes;
//    create_remove (one job per client) quiet, then with 1,000 watchers
//    each on its own job, with 1,000 watchers on jobs no group is in,
//    then with 50 and 200 unfiltered watchers, back to back per repetition
//    (--watch_reps, default 9: the target is a ratio near the noise).
// Writes DIR/load.json and the Markdown sections DIR/load.md,
// DIR/scale.md, DIR/churn.md, DIR/heartbeats.md and DIR/watch.md (--parts
// picks which of 1-5 run). With --target=HOST:PORT it only runs (1) against
// that daemon (no daemon CPU, no scaling). --check exits 1 when a phase made no
// progress or more than 1 % of its RPCs failed.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/common/json.h"
#include "bench/common/output.h"
#include "bench/common/stats.h"
#include "bench/gen/fleet.h"
#include "bench/load/beats.h"
#include "bench/load/closed_loop.h"
#include "bench/load/daemon.h"
#include "bench/load/watchers.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "sliced/v1/sliced.grpc.pb.h"

ABSL_FLAG(std::string, daemon, "", "path to the sliced binary to start");
ABSL_FLAG(std::string, target, "", "an already running daemon (HOST:PORT) instead");
ABSL_FLAG(bool, register_fleet, true,
          "the throughput part registers its generated fleet first; false: "
          "use the nodes the --target daemon has (re-registering them would "
          "be refused under groups they hold)");
ABSL_FLAG(bool, quick, false, "2 s phases, 1 repetition, scaling to 10k nodes");
ABSL_FLAG(std::string, clients, "16,64", "client counts");
ABSL_FLAG(std::string, workloads, "create_remove,scaling,mix", "workloads besides health");
ABSL_FLAG(double, duration, 0, "measured seconds per phase (default 5; quick 2)");
ABSL_FLAG(double, warmup, 0.5, "warm-up seconds per phase, not counted");
ABSL_FLAG(int, reps, 0, "repetitions (default 3; quick 1)");
ABSL_FLAG(int, connections, 1, "HTTP/2 connections shared by the clients (ghz: 1)");
ABSL_FLAG(int64_t, fleet_nodes, 1000, "nodes registered for the throughput runs");
ABSL_FLAG(std::string, scale_nodes, "",
          "fleet sizes for RSS and restart (default 1000,10000,100000; quick "
          "1000,10000; 'none' to skip)");
ABSL_FLAG(double, pgs_per_node, 0.5, "placement groups created per node when scaling");
ABSL_FLAG(int, restarts, 0, "restarts timed per fleet size (default 3; quick 1)");
ABSL_FLAG(std::string, work_dir, "/tmp", "where the daemons' temp data dirs go");
ABSL_FLAG(std::string, out_dir, ".", "where the JSON and Markdown go");
ABSL_FLAG(uint64_t, seed, 1, "fleet and client seed");
ABSL_FLAG(std::string, parts, "throughput,scale,churn,heartbeats,watch",
          "which parts run: throughput, scale, churn, heartbeats, watch");
ABSL_FLAG(
    std::string, beat_nodes, "",
    "fleet sizes for the heartbeat runs (default 10000,100000; quick 1000)");
ABSL_FLAG(double, beat_lease, 10, "seconds between two heartbeats of one node");
ABSL_FLAG(int, beat_batch, 1000, "heartbeats per RPC in the batched phases");
ABSL_FLAG(std::string, churn_nodes, "",
          "fleet sizes for the churn runs (default 10000,100000; quick 1000)");
ABSL_FLAG(double, churn_interval, 0.5, "seconds between churn registrations");
ABSL_FLAG(int, churn_clients, 16, "closed-loop clients in the churn phases");
ABSL_FLAG(int, churn_alone, 0,
          "RegisterNodes(1) calls timed at each end of the node order with "
          "nothing else running, per churn fleet size, over all rounds "
          "(default 2000; quick 20)");
ABSL_FLAG(int, alone_rounds, 0,
          "rounds those calls are split into, alternating between the sizes' "
          "daemons (default 5; quick 2)");
ABSL_FLAG(bool, check, false, "exit 1 unless every phase made sane progress");
ABSL_FLAG(std::string, watch_phases, "",
          "the watch part's phases besides \"none\" (default all: \"1000 "
          "filtered,1000 idle,50 unfiltered,200 unfiltered\")");
ABSL_FLAG(int, watch_reps, 0,
          "repetitions of the watch part (default --reps when given, else 9; "
          "quick 1): one pair of 5 s phases swings by +-0.15, and its target "
          "is a ratio near 0.8");
ABSL_FLAG(bool, keep_scale_data, false,
          "keep the scaling part's data dirs (to profile a restart by hand)");

namespace sliced::bench {
namespace {

namespace v1 = ::sliced::v1;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> ParseList(const std::string& flag) {
  std::vector<int64_t> out;
  for (absl::string_view s : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (absl::SimpleAtoi(s, &n) && n > 0) out.push_back(n);
  }
  return out;
}

std::vector<std::shared_ptr<grpc::Channel>> Channels(const std::string& target, int n) {
  std::vector<std::shared_ptr<grpc::Channel>> out;
  for (int i = 0; i < std::max(1, n); ++i) {
    grpc::ChannelArguments args;
    args.SetInt("sliced.bench.connection", i);  // distinct args: own connection
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    out.push_back(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }
  return out;
}

v1::Node ToProto(const scheduler::Node& n) {
  v1::Node out;
  out.set_node_id(n.node_id);
  out.set_address(n.address);
  for (const auto& [k, v] : n.labels) (*out.mutable_labels())[k] = v;
  for (const auto& [k, v] : n.resources) {
    (*out.mutable_resources())[k] = scheduler::FromFixedPoint(v);
  }
  return out;
}

// Registers the fleet in RegisterNodes batches of 1,000.
absl::Status Register(const std::shared_ptr<grpc::Channel>& channel, const Fleet& fleet) {
  auto stub = v1::Inventory::NewStub(channel);
  for (size_t i = 0; i < fleet.nodes.size(); i += 1000) {
    v1::RegisterNodesRequest req;
    for (size_t k = i; k < std::min(fleet.nodes.size(), i + 1000); ++k) {
      *req.add_nodes() = ToProto(fleet.nodes[k]);
    }
    v1::RegisterNodesResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    const grpc::Status s = stub->RegisterNodes(&ctx, req, &resp);
    if (!s.ok()) return absl::UnavailableError("RegisterNodes: " + s.error_message());
    Progress("registered %d / %d nodes", std::min(fleet.nodes.size(), i + 1000),
             fleet.nodes.size());
  }
  return absl::OkStatus();
}

// Latency of a 200-byte append + fdatasync in the work dir (what one
// durable commit costs the storage), as context for the figures.
struct FsyncProbe {
  double p50_ms = 0, p99_ms = 0;
};
FsyncProbe ProbeFsync(const std::string& dir) {
  const std::string path = dir + "/sliced-bench-fsync-probe";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FsyncProbe probe;
  if (fd < 0) return probe;
  const std::string payload(200, 'x');
  std::vector<double> ms;
  for (int i = 0; i < 300; ++i) {
    const auto t = Clock::now();
    if (write(fd, payload.data(), payload.size()) < 0 || fdatasync(fd) != 0) break;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  close(fd);
  unlink(path.c_str());
  probe.p50_ms = Percentile(ms, 0.5);
  probe.p99_ms = Percentile(ms, 0.99);
  return probe;
}

std::string TempDir(const std::string& tag) {
  std::string tmpl = absl::GetFlag(FLAGS_work_dir) + "/sliced-bench-" + tag + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

double Mb(int64_t bytes) { return bytes / 1048576.0; }

struct ScalePoint {
  int64_t nodes = 0, pgs = 0, pg_errors = 0;
  double register_s = 0;
  int64_t rss_empty = 0, rss_nodes = 0, rss_pgs = 0, rss_restart = 0;
  LoadResult create;
  std::vector<double> restart_s;
  std::string banner;
};

absl::StatusOr<ScalePoint> MeasureScale(const std::string& binary, int64_t nodes) {
  ScalePoint p;
  p.nodes = nodes;
  const std::string dir = TempDir("scale");
  const std::vector<std::string> args = {"--heartbeat_timeout=0"};
  auto daemon = DaemonProcess::Start(binary, dir, args);
  if (!daemon.ok()) return daemon.status();
  p.rss_empty = (*daemon)->RssBytes();
  const Fleet fleet = GenerateFleet({nodes, absl::GetFlag(FLAGS_seed)});
  auto channels = Channels((*daemon)->target(), 1);
  const auto t0 = Clock::now();
  if (absl::Status s = Register(channels[0], fleet); !s.ok()) return s;
  p.register_s = std::chrono::duration<double>(Clock::now() - t0).count();
  p.rss_nodes = (*daemon)->RssBytes();
  LoadOptions lo;
  lo.workload = "create_only";
  lo.clients = 64;
  lo.warmup_s = 0;
  lo.duration_s = 3600;
  lo.max_ops = static_cast<int64_t>(nodes * absl::GetFlag(FLAGS_pgs_per_node));
  Progress("creating %d placement groups on %d nodes", lo.max_ops, nodes);
  DaemonProcess* d = daemon->get();
  p.create = RunClosedLoop(channels, lo, {[d] { return d->CpuSeconds(); }, nullptr});
  p.pgs = p.create.ops;
  p.pg_errors = p.create.errors;
  p.rss_pgs = (*daemon)->RssBytes();
  for (int r = 0; r < std::max(1, absl::GetFlag(FLAGS_restarts)); ++r) {
    Progress("restart %d at %d nodes", r + 1, nodes);
    (*daemon)->Stop(SIGKILL);
    daemon = DaemonProcess::Start(binary, dir, args);
    if (!daemon.ok()) return daemon.status();
    p.restart_s.push_back((*daemon)->startup_s());
    p.banner = (*daemon)->banner();
  }
  p.rss_restart = (*daemon)->RssBytes();
  (*daemon)->Stop(SIGTERM);
  if (absl::GetFlag(FLAGS_keep_scale_data)) {
    std::fprintf(stderr, "sliced_load: kept the data dir %s\n", dir.c_str());
  } else {
    RemoveTree(dir);
    RemoveTree(dir + ".log");
  }
  return p;
}

// The 1-minute load average, to record beside each figure.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

// The create_remove phase of repetition `rep` that churn and heartbeat
// phases are measured against (--churn_clients clients).
LoadOptions CreateRemovePhase(int rep, double duration) {
  LoadOptions lo;
  lo.workload = "create_remove";
  lo.clients = absl::GetFlag(FLAGS_churn_clients);
  lo.duration_s = duration;
  lo.warmup_s = absl::GetFlag(FLAGS_warmup);
  lo.seed = absl::GetFlag(FLAGS_seed) + rep;
  return lo;
}

// One quiet phase and the churn phase run right after it.
struct ChurnPair {
  LoadResult quiet, churn;
  std::vector<double> register_ms;  // each churn RegisterNodes call
  std::string load_quiet, load_churn;
};

struct ChurnPoint {
  int64_t nodes = 0;
  double register_s = 0;
  std::string load_register;
  std::vector<ChurnPair> pairs;
};

// The first calls of a batch in the "alone" rounds, whose CPU is also
// shown apart.
constexpr int kColdCalls = 20;

// One node registered at a time with nothing else running: at the front of
// the node order, where adds one after another use up the gaps near it, and
// at its end, where no index moves.
// One daemon per fleet size, all of them up at once, and the rounds
// alternate between them, so that the sizes' figures share the machine's
// load of the moment and their ratio is measured in one window.
struct AloneRound {
  std::string load;
  // By size, as AloneResult::nodes; each call's latency in ms.
  std::vector<std::vector<double>> front_ms, back_ms;
  // By size: the daemon's CPU (all its threads) per call in ms, over the
  // round's calls at that end; and over the first kColdCalls of them, which
  // also pay to bring back into the caches what the other daemons' turns
  // evicted.
  std::vector<double> front_cpu_ms, back_cpu_ms;
  std::vector<double> front_first_cpu_ms, back_first_cpu_ms;
};
struct AloneResult {
  std::vector<int64_t> nodes;  // ascending
  std::vector<AloneRound> rounds;
};

// A CPU node like the fleet's; "churn-" sorts before "cpu-" and "s...", so
// every one lands at the front of the node-id order (the most index shift).
// Another `prefix` puts it elsewhere: "zz-…" after every other node.
scheduler::Node ChurnNode(int64_t nodes, int64_t i,
                          absl::string_view prefix = "churn") {
  scheduler::Node n;
  n.node_id = absl::StrFormat("%s-%d-%06d", prefix, nodes, i);
  n.address = n.node_id + ".bench.internal";
  n.labels = {{"ray.io/node-id", n.node_id},
              {"ray.io/availability-zone", "us-central2-b"},
              {"sliced.io/capacity-tier", "on-demand"}};
  n.resources = {{"CPU", 32 * scheduler::kResourceScale},
                 {"memory", int64_t{128'000'000'000} * scheduler::kResourceScale}};
  return n;
}

// Registers `node` alone in one call; the call's latency in ms.
absl::StatusOr<double> TimedRegister(v1::Inventory::Stub& stub,
                                     const scheduler::Node& node) {
  v1::RegisterNodesRequest req;
  *req.add_nodes() = ToProto(node);
  v1::RegisterNodesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const auto t = Clock::now();
  const grpc::Status s = stub.RegisterNodes(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("RegisterNodes(", node.node_id, "): ", s.error_message()));
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Registers a new node every `interval` seconds until `stop`; returns each
// successful call's latency in ms.
std::vector<double> RegisterEvery(const std::shared_ptr<grpc::Channel>& channel,
                                  int64_t nodes, int64_t& next, double interval,
                                  const std::atomic<bool>& stop) {
  auto stub = v1::Inventory::NewStub(channel);
  std::vector<double> ms;
  auto tick = Clock::now();
  while (!stop.load()) {
    if (auto took = TimedRegister(*stub, ChurnNode(nodes, next++)); took.ok()) {
      ms.push_back(*took);
    }
    tick += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
    while (!stop.load() && Clock::now() < tick) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return ms;
}

// Times `calls` RegisterNodes calls of one new node each, back to back, at
// the front of the node order ("aa-…", before every node the harness
// registers), then as many at its end ("zz-…"); nothing else runs. Reads the
// daemon's CPU around each end's calls: its CPU per call at that end, in ms,
// over them all and over the first kColdCalls. `next` numbers the new nodes
// (ids stay unique across rounds).
absl::Status RegisterAlone(v1::Inventory::Stub& stub, const DaemonProcess& d,
                           int64_t nodes, int calls, int64_t& next,
                           AloneRound& round, size_t size) {
  for (const bool front : {true, false}) {
    std::vector<double>& ms = (front ? round.front_ms : round.back_ms)[size];
    const int cold = std::min(calls, kColdCalls);
    const double cpu0 = d.CpuSeconds();
    double cpu_cold = cpu0;
    for (int i = 0; i < calls; ++i) {
      auto took =
          TimedRegister(stub, ChurnNode(nodes, next + i, front ? "aa" : "zz"));
      if (!took.ok()) return took.status();
      ms.push_back(*took);
      if (i + 1 == cold) cpu_cold = d.CpuSeconds();
    }
    (front ? round.front_cpu_ms : round.back_cpu_ms)[size] =
        (d.CpuSeconds() - cpu0) * 1e3 / calls;
    (front ? round.front_first_cpu_ms : round.back_first_cpu_ms)[size] =
        (cpu_cold - cpu0) * 1e3 / cold;
  }
  next += calls;
  return absl::OkStatus();
}

// Waits until `d` uses under 1 % of a core over half a second (at most
// 60 s); the seconds waited.
double WaitIdle(const DaemonProcess& d) {
  const auto t0 = Clock::now();
  double cpu = d.CpuSeconds();
  while (Clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double now = d.CpuSeconds();
    if (now - cpu < 0.005) break;
    cpu = now;
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Per size a fresh daemon with the generated fleet registered, all up at
// once (and idle); then `rounds` rounds, each timing `calls` registrations per
// end on every daemon in turn (the order of the sizes reversed every other
// round).
absl::StatusOr<AloneResult> MeasureAlone(const std::string& binary,
                                         std::vector<int64_t> sizes, int rounds,
                                         int calls) {
  std::sort(sizes.begin(), sizes.end());
  AloneResult result;
  result.nodes = sizes;
  struct Up {
    std::unique_ptr<DaemonProcess> daemon;
    std::string dir;
    std::unique_ptr<v1::Inventory::Stub> stub;
    int64_t next = 0;
  };
  std::vector<Up> ups;
  auto stop_all = [&] {
    for (Up& u : ups) {
      u.daemon->Stop(SIGTERM);
      RemoveTree(u.dir);
      RemoveTree(u.dir + ".log");
    }
  };
  for (int64_t n : sizes) {
    Up u;
    u.dir = TempDir("alone");
    auto daemon =
        DaemonProcess::Start(binary, u.dir, {"--heartbeat_timeout=0"});
    if (!daemon.ok()) {
      stop_all();
      return daemon.status();
    }
    u.daemon = *std::move(daemon);
    ups.push_back(std::move(u));
    Progress("one node at a time, alone: registering %d nodes", n);
    const Fleet fleet = GenerateFleet({n, absl::GetFlag(FLAGS_seed)});
    auto channels = Channels(ups.back().daemon->target(), 2);
    if (absl::Status s = Register(channels[0], fleet); !s.ok()) {
      stop_all();
      return s;
    }
    ups.back().stub = v1::Inventory::NewStub(channels[1]);
  }
  // Registering a fleet may leave work behind (RocksDB flushes and
  // compacts on threads of its own); the rounds start when no daemon does
  // any.
  for (size_t i = 0; i < ups.size(); ++i) {
    const double waited = WaitIdle(*ups[i].daemon);
    Progress("one node at a time, alone: the %d-node daemon idle after %.1f s",
             sizes[i], waited);
  }
  for (int r = 0; r < rounds; ++r) {
    Progress("one node at a time, alone: round %d/%d", r + 1, rounds);
    AloneRound round;
    round.load = LoadAverage();
    round.front_ms.resize(sizes.size());
    round.back_ms.resize(sizes.size());
    round.front_cpu_ms.resize(sizes.size());
    round.back_cpu_ms.resize(sizes.size());
    round.front_first_cpu_ms.resize(sizes.size());
    round.back_first_cpu_ms.resize(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t i = r % 2 == 0 ? k : sizes.size() - 1 - k;
      if (absl::Status s = RegisterAlone(*ups[i].stub, *ups[i].daemon, sizes[i],
                                         calls, ups[i].next, round, i);
          !s.ok()) {
        stop_all();
        return s;
      }
    }
    result.rounds.push_back(std::move(round));
  }
  stop_all();
  return result;
}

absl::StatusOr<ChurnPoint> MeasureChurn(const std::string& binary, int64_t nodes,
                                        int reps, double duration) {
  ChurnPoint p;
  p.nodes = nodes;
  const std::string dir = TempDir("churn");
  auto daemon = DaemonProcess::Start(binary, dir, {"--heartbeat_timeout=0"});
  if (!daemon.ok()) return daemon.status();
  const Fleet fleet = GenerateFleet({nodes, absl::GetFlag(FLAGS_seed)});
  auto channels = Channels((*daemon)->target(), 1);
  auto side = Channels((*daemon)->target(), 2)[1];  // its own connection
  p.load_register = LoadAverage();
  const auto t0 = Clock::now();
  if (absl::Status s = Register(channels[0], fleet); !s.ok()) return s;
  p.register_s = std::chrono::duration<double>(Clock::now() - t0).count();
  DaemonProcess* d = daemon->get();
  const DaemonProbe probe{[d] { return d->CpuSeconds(); }, nullptr};
  int64_t next = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const LoadOptions lo = CreateRemovePhase(rep, duration);
    ChurnPair pair;
    Progress("churn at %d nodes, rep %d/%d: quiet", nodes, rep + 1, reps);
    pair.load_quiet = LoadAverage();
    pair.quiet = RunClosedLoop(channels, lo, probe);
    Progress("churn at %d nodes, rep %d/%d: one node every %.1f s", nodes, rep + 1,
             reps, absl::GetFlag(FLAGS_churn_interval));
    pair.load_churn = LoadAverage();
    std::atomic<bool> stop{false};
    std::thread churner([&] {
      pair.register_ms = RegisterEvery(side, nodes, next,
                                       absl::GetFlag(FLAGS_churn_interval), stop);
    });
    pair.churn = RunClosedLoop(channels, lo, probe);
    stop = true;
    churner.join();
    p.pairs.push_back(std::move(pair));
  }
  (*daemon)->Stop(SIGTERM);
  RemoveTree(dir);
  RemoveTree(dir + ".log");
  return p;
}

// Heartbeats: the daemon alone under them, and creates beside them.
struct BeatAlone {
  BeatResult beats;
  double daemon_cores = 0;
  double sender_cores = 0;  // this process (only the beats' senders run)
  std::string load;
};
struct BeatTriple {  // one repetition, back to back
  LoadResult quiet, single, batched;
  BeatResult single_beats, batched_beats;
  std::string load;
};
struct BeatPoint {
  int64_t nodes = 0;
  BeatAlone single, batched;
  std::vector<BeatTriple> reps;
};

absl::StatusOr<BeatPoint> MeasureHeartbeats(const std::string& binary,
                                            int64_t nodes, int reps,
                                            double duration) {
  BeatPoint p;
  p.nodes = nodes;
  const std::string dir = TempDir("beats");
  // Leases on (the checker scans every node each second), long enough that
  // no node of the fleet turns DEAD while a phase does not beat it.
  auto daemon =
      DaemonProcess::Start(binary, dir, {"--heartbeat_timeout=3600s"});
  if (!daemon.ok()) return daemon.status();
  const Fleet fleet = GenerateFleet({nodes, absl::GetFlag(FLAGS_seed)});
  auto channels = Channels((*daemon)->target(), 1);
  auto side = Channels((*daemon)->target(), 2)[1];  // the agents' connection
  if (absl::Status s = Register(channels[0], fleet); !s.ok()) return s;
  DaemonProcess* d = daemon->get();
  const DaemonProbe probe{[d] { return d->CpuSeconds(); }, nullptr};
  BeatOptions single;
  for (const scheduler::Node& n : fleet.nodes)
    single.node_ids.push_back(n.node_id);
  single.lease_s = absl::GetFlag(FLAGS_beat_lease);
  BeatOptions batched = single;
  batched.batch = absl::GetFlag(FLAGS_beat_batch);
  // Runs `body` while `beats` are sent; returns what the beats did.
  auto with_beats = [&](const BeatOptions& beats,
                        const std::function<void()>& body) {
    std::atomic<bool> stop{false};
    BeatResult r;
    std::thread sender([&] { r = RunBeats(side, beats, stop); });
    body();
    stop = true;
    sender.join();
    return r;
  };
  auto alone = [&](const BeatOptions& beats, const char* what) {
    Progress("heartbeats at %d nodes: %s, alone", nodes, what);
    BeatAlone a;
    a.load = LoadAverage();
    double cpu0 = 0;
    const auto t0 = Clock::now();
    a.beats = with_beats(beats, [&] {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup)));
      cpu0 = d->CpuSeconds();
      const double own0 = ProcessCpuSeconds();
      std::this_thread::sleep_for(std::chrono::duration<double>(duration));
      const double wall =
          std::chrono::duration<double>(Clock::now() - t0).count() -
          absl::GetFlag(FLAGS_warmup);
      a.daemon_cores = (d->CpuSeconds() - cpu0) / wall;
      a.sender_cores = (ProcessCpuSeconds() - own0) / wall;
    });
    return a;
  };
  p.single = alone(single, "one node per RPC");
  p.batched = alone(batched, "batched");
  for (int rep = 0; rep < reps; ++rep) {
    const LoadOptions lo = CreateRemovePhase(rep, duration);
    BeatTriple t;
    t.load = LoadAverage();
    Progress("heartbeats at %d nodes, rep %d/%d: quiet", nodes, rep + 1, reps);
    t.quiet = RunClosedLoop(channels, lo, probe);
    Progress("heartbeats at %d nodes, rep %d/%d: one node per RPC", nodes,
             rep + 1, reps);
    t.single_beats = with_beats(
        single, [&] { t.single = RunClosedLoop(channels, lo, probe); });
    Progress("heartbeats at %d nodes, rep %d/%d: batched", nodes, rep + 1,
             reps);
    t.batched_beats = with_beats(
        batched, [&] { t.batched = RunClosedLoop(channels, lo, probe); });
    p.reps.push_back(std::move(t));
  }
  (*daemon)->Stop(SIGTERM);
  RemoveTree(dir);
  RemoveTree(dir + ".log");
  return p;
}

std::string HeartbeatMarkdown(const std::vector<BeatPoint>& points,
                              double duration) {
  const int batch = absl::GetFlag(FLAGS_beat_batch);
  std::string md = absl::StrFormat(
      "Per fleet size a fresh daemon (durable, `--heartbeat_timeout=3600s`: "
      "the "
      "lease checker scans every node each second, and no node expires). Every "
      "node heartbeats once per %.0f s, paced evenly (open loop, on a "
      "connection of their own, sent from one thread with gRPC's callback API "
      "so that RPCs overlap): one node per Heartbeat RPC, or %d per RPC. "
      "First the daemon with beats and nothing else (its CPU over "
      "%.1f s), then per repetition create_remove (%d clients) quiet, with the "
      "single beats, with the batched beats, back to back. Ratios are to the "
      "quiet phase of the same repetition; bold: medians. Load average (1/5/15 "
      "min) at the start.\n\n"
      "| nodes | beats | beats/s sent (RPC p99 ms) | daemon CPU, beats alone "
      "(cores) | their sender's CPU, on the same cores | load |\n"
      "| --- | --- | --- | --- | --- | --- |\n",
      absl::GetFlag(FLAGS_beat_lease), batch, duration,
      absl::GetFlag(FLAGS_churn_clients));
  for (const BeatPoint& p : points) {
    for (const auto& [what, a] : {std::pair{"1 per RPC", &p.single},
                                  std::pair{"batched", &p.batched}}) {
      absl::StrAppendFormat(&md, "| %d | %s | %.0f (%.1f) | %.2f | %.2f | %s |\n",
                            p.nodes, what, a->beats.beats_per_s,
                            a->beats.p99_ms, a->daemon_cores, a->sender_cores,
                            a->load);
    }
  }
  md +=
      "\n| nodes | rep | quiet ops/s, p99 ms | + 1 per RPC: ops/s, p99 ms "
      "(ratios) | "
      "+ batched: ops/s, p99 ms (ratios) | beats/s sent (1 per RPC; batched) | "
      "load |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const BeatPoint& p : points) {
    std::vector<double> single_ops, single_p99, batched_ops, batched_p99;
    for (size_t i = 0; i < p.reps.size(); ++i) {
      const BeatTriple& t = p.reps[i];
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
      single_ops.push_back(ratio(t.single.ops_per_s, t.quiet.ops_per_s));
      single_p99.push_back(ratio(t.single.p99_us, t.quiet.p99_us));
      batched_ops.push_back(ratio(t.batched.ops_per_s, t.quiet.ops_per_s));
      batched_p99.push_back(ratio(t.batched.p99_us, t.quiet.p99_us));
      absl::StrAppendFormat(
          &md,
          "| %d | %d | %.0f, %.1f | %.0f, %.1f (%.2f, %.2f) | %.0f, %.1f "
          "(%.2f, %.2f) | %.0f; %.0f | %s |\n",
          p.nodes, static_cast<int>(i + 1), t.quiet.ops_per_s,
          t.quiet.p99_us / 1000, t.single.ops_per_s, t.single.p99_us / 1000,
          single_ops.back(), single_p99.back(), t.batched.ops_per_s,
          t.batched.p99_us / 1000, batched_ops.back(), batched_p99.back(),
          t.single_beats.beats_per_s, t.batched_beats.beats_per_s, t.load);
    }
    absl::StrAppendFormat(&md,
                          "| %d | **median** | | (**%.2f**, **%.2f**) | "
                          "(**%.2f**, **%.2f**) | | |\n",
                          p.nodes, Median(single_ops), Median(single_p99),
                          Median(batched_ops), Median(batched_p99));
  }
  md +=
      "\nTarget (issue 17, item 4): with every node beating once per lease, "
      "placements' p99 within 2× quiet (p99 ratio ≤ 2).\n";
  return md;
}

// Watchers: creates beside open watch streams.
struct WatchSetup {
  std::string name;  // "none", "1000 filtered", ...
  int streams = 0;
  // Watcher i watches job <jobs><i>; every group when empty. The clients'
  // jobs are bench-<client>.
  std::string jobs;
};
struct WatchPhase {
  LoadResult creates;
  int64_t events = 0, ended = 0;
  int64_t rss = 0;
  std::string load;
};

absl::StatusOr<std::vector<std::vector<WatchPhase>>> MeasureWatch(
    const std::string& binary, const std::vector<WatchSetup>& setups, int reps,
    double duration) {
  const std::string dir = TempDir("watch");
  auto daemon = DaemonProcess::Start(
      binary, dir, {"--heartbeat_timeout=0", "--max_streams=5000"});
  if (!daemon.ok()) return daemon.status();
  const Fleet fleet = GenerateFleet(
      {absl::GetFlag(FLAGS_fleet_nodes), absl::GetFlag(FLAGS_seed)});
  auto channels = Channels((*daemon)->target(), 1);
  auto side = Channels((*daemon)->target(), 2)[1];  // the watchers' connection
  if (absl::Status s = Register(channels[0], fleet); !s.ok()) return s;
  DaemonProcess* d = daemon->get();
  const DaemonProbe probe{[d] { return d->CpuSeconds(); }, nullptr};
  std::vector<std::vector<WatchPhase>> out(setups.size());
  for (int rep = 0; rep < reps; ++rep) {
    LoadOptions lo = CreateRemovePhase(rep, duration);
    lo.job_per_client = true;
    for (size_t k = 0; k < setups.size(); ++k) {
      const WatchSetup& w = setups[k];
      Progress("watch, rep %d/%d: %s", rep + 1, reps, w.name);
      WatchPhase phase;
      phase.load = LoadAverage();
      {
        Watchers watchers(side, w.streams, [&](int i) {
          return w.jobs.empty() ? std::string() : w.jobs + std::to_string(i);
        });
        // Let every stream open (and deliver its current state).
        std::this_thread::sleep_for(std::chrono::milliseconds(500 + w.streams));
        const int64_t before = watchers.events();
        phase.creates = RunClosedLoop(channels, lo, probe);
        phase.events = watchers.events() - before;
        phase.ended = watchers.ended();
        phase.rss = d->RssBytes();
      }
      out[k].push_back(std::move(phase));
    }
  }
  (*daemon)->Stop(SIGTERM);
  RemoveTree(dir);
  RemoveTree(dir + ".log");
  return out;
}

std::string WatchMarkdown(const std::vector<WatchSetup>& setups,
                          const std::vector<std::vector<WatchPhase>>& phases,
                          double duration) {
  std::string md = absl::StrFormat(
      "A fresh daemon (durable, `--heartbeat_timeout=0`, `--max_streams=5000`) "
      "with "
      "%d nodes; create_remove at %d clients, each client's groups in its own "
      "job "
      "(`bench-<client>`), %.1f s measured per phase; per repetition the "
      "phases "
      "run back to back: no watcher, then the watchers below opened first (on "
      "their own connection, C++ callback API, reading and discarding), closed "
      "after. Filtered watcher i watches job `bench-<i>`, so %d of them see "
      "events; idle watcher i watches job `idle-<i>`, which no group is in. "
      "CPU: cores used over the measured window by the daemon and by the "
      "load process (its clients and watchers). Ratios are to the no-watcher "
      "phase of the same repetition; bold: medians.\n\n"
      "| watchers | rep | creates ops/s, p99 ms | ops ratio | p99 ratio | "
      "events delivered | streams ended by the server | daemon RSS | "
      "CPU cores: daemon, load process | load |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      static_cast<int>(absl::GetFlag(FLAGS_fleet_nodes)),
      absl::GetFlag(FLAGS_churn_clients), duration,
      absl::GetFlag(FLAGS_churn_clients));
  for (size_t k = 0; k < setups.size(); ++k) {
    std::vector<double> ops, p99;
    for (size_t r = 0; r < phases[k].size(); ++r) {
      const WatchPhase& p = phases[k][r];
      const LoadResult& quiet = phases[0][r].creates;
      ops.push_back(quiet.ops_per_s > 0 ? p.creates.ops_per_s / quiet.ops_per_s
                                        : 0);
      p99.push_back(quiet.p99_us > 0 ? p.creates.p99_us / quiet.p99_us : 0);
      absl::StrAppendFormat(
          &md,
          "| %s | %d | %.0f, %.1f | %.2f | %.2f | %d | %d | %.0f MB | %.2f, "
          "%.2f | %s |\n",
          setups[k].name, static_cast<int>(r + 1), p.creates.ops_per_s,
          p.creates.p99_us / 1000, ops.back(), p99.back(),
          static_cast<int>(p.events), static_cast<int>(p.ended), Mb(p.rss),
          p.creates.daemon_cpu_cores, p.creates.client_cpu_cores, p.load);
    }
    absl::StrAppendFormat(
        &md, "| %s | **median** | | **%.2f** | **%.2f** | | | | | |\n",
        setups[k].name, Median(ops), Median(p99));
  }
  md +=
      "\nTarget (issue 17, item 5): with 1,000 filtered watchers, creates "
      "within 20 % "
      "of the no-watcher figure (ops ratio ≥ 0.80).\n";
  return md;
}

// The churn section: per size, registration time and the quiet/churn pairs.
std::string ChurnMarkdown(const std::vector<ChurnPoint>& points, double duration) {
  std::string md = absl::StrFormat(
      "Per fleet size a fresh daemon (durable, `--heartbeat_timeout=0`): the "
      "generated fleet registered in RegisterNodes batches of 1,000 (TPU "
      "hosts first, then the CPU nodes, whose ids sort before every TPU "
      "host's), then per repetition a quiet create_remove phase and right "
      "after it the same phase while one new CPU node registers every %.1f s "
      "(ids `churn-…`, sorting before every other node: each lands at the "
      "front of the node order). %d closed-loop clients, %.1f s warm-up, "
      "%.1f s measured per phase. Ratios are churn ÷ quiet of the same pair; "
      "the bold figure is the median over the pairs. Load average (1/5/15 "
      "min) read at the start of each phase.\n\n"
      "| nodes | register (batches of 1,000) | rep | quiet ops/s, p99 ms | churn ops/s, p99 ms | ops ratio | p99 ratio | RegisterNodes(1) p50 / max ms | load (quiet; churn) |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      absl::GetFlag(FLAGS_churn_interval), absl::GetFlag(FLAGS_churn_clients),
      absl::GetFlag(FLAGS_warmup), duration);
  for (const ChurnPoint& p : points) {
    std::vector<double> ops_ratio, p99_ratio;
    for (size_t i = 0; i < p.pairs.size(); ++i) {
      const ChurnPair& c = p.pairs[i];
      const double o = c.quiet.ops_per_s > 0 ? c.churn.ops_per_s / c.quiet.ops_per_s : 0;
      const double l = c.quiet.p99_us > 0 ? c.churn.p99_us / c.quiet.p99_us : 0;
      ops_ratio.push_back(o);
      p99_ratio.push_back(l);
      std::vector<double> reg = c.register_ms;
      const double reg_max = reg.empty() ? 0 : *std::max_element(reg.begin(), reg.end());
      absl::StrAppendFormat(
          &md, "| %d | %s | %d | %.0f, %.1f | %.0f, %.1f | %.2f | %.2f | %.1f / %.1f (%d calls) | %s; %s |\n",
          p.nodes,
          i == 0 ? absl::StrFormat("%.1f s (load %s)", p.register_s, p.load_register)
                 : std::string(""),
          static_cast<int>(i + 1), c.quiet.ops_per_s, c.quiet.p99_us / 1000,
          c.churn.ops_per_s, c.churn.p99_us / 1000, o, l, Median(reg), reg_max,
          static_cast<int>(reg.size()), c.load_quiet, c.load_churn);
    }
    absl::StrAppendFormat(&md, "| %d | **median** | | | | **%.2f** | **%.2f** | | |\n",
                          p.nodes, Median(ops_ratio), Median(p99_ratio));
  }
  md += "\nTargets (issue 17, DESIGN §7): registering 100k nodes ≤ 15 s; with churn, "
        "creates at 100k nodes keep ≥ 90 % of the quiet throughput (ops ratio ≥ 0.90) "
        "and p99 ≤ 2× quiet (p99 ratio ≤ 2).\n";
  return md;
}

// The churn section's "one node at a time, alone" table: per size the
// pooled p50 / p90, then per round the p50s and their ratio to the smallest
// size's in that round.
std::string AloneMarkdown(const AloneResult& a) {
  std::string md =
      "\n**One node at a time, alone.** Per fleet size a fresh daemon "
      "(durable, `--heartbeat_timeout=0`) with the generated fleet "
      "registered, all of them up at once; then rounds in which each daemon "
      "in turn (the sizes' order reversed every other round) gets one new "
      "CPU node per RegisterNodes call, back to back on one connection with "
      "nothing else running: first at the front of the node order (ids "
      "`aa-…`, each after the last: they take the gaps near the front, and "
      "spread them again when none is near), then as many at its end "
      "(`zz-…`). So every size's calls share the machine's load of the "
      "moment, and the ratio to the smallest size is taken within a round; "
      "the bold figure is the median over the rounds. The daemon's CPU per "
      "call (all its threads, read from its CPU clock around each end's "
      "calls) is the work a change costs, whatever else the machine runs; "
      "the latency adds the waits (the synced commit, the scheduler). The "
      "first calls of a batch also pay to bring back into the caches what "
      "the other daemons' turns evicted, more of it in a larger daemon: "
      "their CPU per call is shown apart, and counted with the rest. Issue "
      "17, item 1: the cost of one node's change is independent of the "
      "inventory size.\n\n"
      "| nodes | calls per end | front p50 / p90 ms | end p50 / p90 ms | "
      "daemon CPU per call, front; end ms (median of rounds) | the same, "
      "first " +
      std::to_string(kColdCalls) +
      " calls of each batch |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  // Size i's calls at one end over every round.
  auto pooled = [&](std::vector<std::vector<double>> AloneRound::*end,
                    size_t i) {
    std::vector<double> ms;
    for (const AloneRound& r : a.rounds) {
      ms.insert(ms.end(), (r.*end)[i].begin(), (r.*end)[i].end());
    }
    return ms;
  };
  // Size i's CPU per call at one end, by round.
  auto cpu = [&](std::vector<double> AloneRound::*end, size_t i) {
    std::vector<double> ms;
    for (const AloneRound& r : a.rounds) ms.push_back((r.*end)[i]);
    return ms;
  };
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    std::vector<double> front = pooled(&AloneRound::front_ms, i);
    std::vector<double> back = pooled(&AloneRound::back_ms, i);
    absl::StrAppendFormat(
        &md,
        "| %d | %d | %.2f / %.2f | %.2f / %.2f | %.3f; %.3f | %.3f; %.3f |\n",
        a.nodes[i], static_cast<int>(front.size()), Median(front),
        Percentile(front, 0.9), Median(back), Percentile(back, 0.9),
        Median(cpu(&AloneRound::front_cpu_ms, i)),
        Median(cpu(&AloneRound::back_cpu_ms, i)),
        Median(cpu(&AloneRound::front_first_cpu_ms, i)),
        Median(cpu(&AloneRound::back_first_cpu_ms, i)));
  }
  if (a.nodes.size() < 2) return md;
  md += absl::StrFormat(
      "\n| round | load | p50 front ms (%d → %d nodes) | ratio | p50 end ms | "
      "ratio | CPU per call front ms | ratio | CPU per call end ms | ratio |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      a.nodes.front(), a.nodes.back());
  // The ratios by round: p50 front, p50 end, CPU front, CPU end.
  std::array<std::vector<double>, 4> ratios;
  for (size_t r = 0; r < a.rounds.size(); ++r) {
    const AloneRound& round = a.rounds[r];
    const std::array<std::pair<double, double>, 4> pairs = {{
        {Median(round.front_ms.front()), Median(round.front_ms.back())},
        {Median(round.back_ms.front()), Median(round.back_ms.back())},
        {round.front_cpu_ms.front(), round.front_cpu_ms.back()},
        {round.back_cpu_ms.front(), round.back_cpu_ms.back()},
    }};
    absl::StrAppendFormat(&md, "| %d | %s |", static_cast<int>(r + 1),
                          round.load);
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [lo, hi] = pairs[k];
      ratios[k].push_back(hi / lo);
      absl::StrAppendFormat(
          &md, k < 2 ? " %.2f → %.2f | %.2f |" : " %.3f → %.3f | %.2f |", lo,
          hi, hi / lo);
    }
    md += "\n";
  }
  absl::StrAppendFormat(
      &md,
      "| **median** | | | **%.2f** | | **%.2f** | | **%.2f** | | **%.2f** |\n",
      Median(ratios[0]), Median(ratios[1]), Median(ratios[2]),
      Median(ratios[3]));
  return md;
}

void WriteResultJson(JsonWriter& j, const LoadResult& r) {
  j.BeginObject().Key("workload").String(r.workload).Key("clients").Number(r.clients)
      .Key("ops").Number(r.ops).Key("errors").Number(r.errors)
      .Key("window_s").Number(r.window_s).Key("ops_per_s").Number(r.ops_per_s)
      .Key("p50_us").Number(r.p50_us).Key("p99_us").Number(r.p99_us)
      .Key("p999_us").Number(r.p999_us).Key("client_cpu_cores").Number(r.client_cpu_cores)
      .Key("daemon_cpu_cores").Number(r.daemon_cpu_cores)
      .Key("paired_health_ops_per_s").Number(r.paired_health_ops_per_s)
      .Key("commits_per_s").Number(r.commits_per_s)
      .Key("ops_per_commit").Number(r.ops_per_commit).Key("commit_ms").Number(r.commit_ms);
  j.Key("error_codes").BeginObject();
  for (const auto& [code, n] : r.error_codes) j.Key(code).Number(n);
  j.EndObject().Key("create_states").BeginObject();
  for (const auto& [state, n] : r.create_states) j.Key(state).Number(n);
  j.EndObject().EndObject();
}

bool Sane(const LoadResult& r) {
  return r.ops > 0 && r.errors * 100 <= r.ops + r.errors;
}

int Main() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  double duration = absl::GetFlag(FLAGS_duration);
  if (duration <= 0) duration = quick ? 2 : 5;
  int reps = absl::GetFlag(FLAGS_reps);
  if (reps <= 0) reps = quick ? 1 : 3;
  if (absl::GetFlag(FLAGS_restarts) <= 0) absl::SetFlag(&FLAGS_restarts, quick ? 1 : 3);
  if (absl::GetFlag(FLAGS_churn_alone) <= 0)
    absl::SetFlag(&FLAGS_churn_alone, quick ? 20 : 2000);
  if (absl::GetFlag(FLAGS_alone_rounds) <= 0)
    absl::SetFlag(&FLAGS_alone_rounds, quick ? 2 : 5);
  std::string scale_flag = absl::GetFlag(FLAGS_scale_nodes);
  if (scale_flag.empty()) scale_flag = quick ? "1000,10000" : "1000,10000,100000";
  const std::vector<int64_t> scale_sizes = ParseList(scale_flag == "none" ? "" : scale_flag);
  const std::vector<int64_t> client_counts = ParseList(absl::GetFlag(FLAGS_clients));
  std::vector<std::string> workloads;  // besides health
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workloads), ',', absl::SkipEmpty())) {
    if (w != "health") workloads.emplace_back(w);
  }
  std::string churn_flag = absl::GetFlag(FLAGS_churn_nodes);
  if (churn_flag.empty()) churn_flag = quick ? "1000" : "10000,100000";
  const std::vector<int64_t> churn_sizes = ParseList(churn_flag == "none" ? "" : churn_flag);
  const std::string parts = absl::GetFlag(FLAGS_parts);
  auto part = [&parts](absl::string_view name) {
    for (absl::string_view p : absl::StrSplit(parts, ',', absl::SkipEmpty())) {
      if (p == name) return true;
    }
    return false;
  };
  const std::string binary = absl::GetFlag(FLAGS_daemon);
  std::string target = absl::GetFlag(FLAGS_target);
  if (binary.empty() && target.empty()) {
    std::fprintf(stderr, "sliced_load: give --daemon=PATH or --target=HOST:PORT\n");
    return 2;
  }
  bool sane = true;

  const FsyncProbe fsync_probe = ProbeFsync(absl::GetFlag(FLAGS_work_dir));
  // 1. Throughput against the health-check ceiling.
  std::unique_ptr<DaemonProcess> daemon;
  std::string dir;
  const bool throughput = part("throughput");
  if (throughput && target.empty()) {
    dir = TempDir("load");
    auto d = DaemonProcess::Start(binary, dir, {"--heartbeat_timeout=0"});
    if (!d.ok()) {
      std::fprintf(stderr, "sliced_load: %s\n", d.status().ToString().c_str());
      return 1;
    }
    daemon = *std::move(d);
    target = daemon->target();
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  if (throughput) channels = Channels(target, absl::GetFlag(FLAGS_connections));
  if (throughput && absl::GetFlag(FLAGS_register_fleet)) {
    const Fleet fleet =
        GenerateFleet({absl::GetFlag(FLAGS_fleet_nodes), absl::GetFlag(FLAGS_seed)});
    if (absl::Status s = Register(channels[0], fleet); !s.ok()) {
      std::fprintf(stderr, "sliced_load: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  DaemonProbe probe;
  if (daemon) {
    probe.cpu_seconds = [d = daemon.get()] { return d->CpuSeconds(); };
    probe.metrics = [d = daemon.get()] { return d->ScrapeMetrics(); };
  }
  // results[clients][workload] = one LoadResult per repetition.
  std::map<int64_t, std::map<std::string, std::vector<LoadResult>>> results;
  // Each workload phase right after its own health-check phase, so every
  // ratio compares two phases run back to back.
  auto run_phase = [&](const std::string& w, int64_t c, int rep) {
    Progress("rep %d/%d: %d clients, %s", rep + 1, reps, c, w);
    LoadOptions lo;
    lo.workload = w;
    lo.clients = static_cast<int>(c);
    lo.duration_s = duration;
    lo.warmup_s = absl::GetFlag(FLAGS_warmup);
    lo.seed = absl::GetFlag(FLAGS_seed) + rep;
    LoadResult r = RunClosedLoop(channels, lo, probe);
    if (!Sane(r)) {
      sane = false;
      std::fprintf(stderr, "sliced_load: %s at %d clients: %d ok, %d errors (%s)\n",
                   w.c_str(), static_cast<int>(c), static_cast<int>(r.ops),
                   static_cast<int>(r.errors), r.first_error.c_str());
    }
    return r;
  };
  for (int rep = 0; throughput && rep < reps; ++rep) {
    for (int64_t c : client_counts) {
      if (workloads.empty()) results[c]["health"].push_back(run_phase("health", c, rep));
      for (const std::string& w : workloads) {
        LoadResult health = run_phase("health", c, rep);
        LoadResult r = run_phase(w, c, rep);
        r.paired_health_ops_per_s = health.ops_per_s;
        results[c]["health"].push_back(std::move(health));
        results[c][w].push_back(std::move(r));
      }
    }
  }
  if (daemon) {
    daemon->Stop(SIGTERM);
    RemoveTree(dir);
    RemoveTree(dir + ".log");
  }

  // 2. Scaling and restart.
  std::vector<ScalePoint> scale;
  if (!binary.empty() && part("scale")) {
    for (int64_t n : scale_sizes) {
      auto p = MeasureScale(binary, n);
      if (!p.ok()) {
        std::fprintf(stderr, "sliced_load: scaling at %d nodes: %s\n",
                     static_cast<int>(n), p.status().ToString().c_str());
        return 1;
      }
      sane = sane && p->pgs > 0 && p->pg_errors == 0;
      scale.push_back(*std::move(p));
    }
  }
  // 3. Churn.
  std::vector<ChurnPoint> churn;
  if (!binary.empty() && part("churn")) {
    for (int64_t n : churn_sizes) {
      auto p = MeasureChurn(binary, n, reps, duration);
      if (!p.ok()) {
        std::fprintf(stderr, "sliced_load: churn at %d nodes: %s\n",
                     static_cast<int>(n), p.status().ToString().c_str());
        return 1;
      }
      for (const ChurnPair& c : p->pairs) sane = sane && Sane(c.quiet) && Sane(c.churn);
      churn.push_back(*std::move(p));
    }
  }
  std::optional<AloneResult> alone;
  if (!binary.empty() && part("churn") && !churn_sizes.empty()) {
    const int rounds = absl::GetFlag(FLAGS_alone_rounds);
    const int calls = std::max(1, absl::GetFlag(FLAGS_churn_alone) / rounds);
    auto a = MeasureAlone(binary, churn_sizes, rounds, calls);
    if (!a.ok()) {
      std::fprintf(stderr, "sliced_load: one node at a time, alone: %s\n",
                   a.status().ToString().c_str());
      return 1;
    }
    alone = *std::move(a);
  }
  // 5. Watchers.
  std::vector<WatchSetup> watch_setups;
  {
    // The no-watcher phase always runs first: the ratios are to it.
    const std::string only = absl::GetFlag(FLAGS_watch_phases);
    for (WatchSetup w : std::vector<WatchSetup>{{"none", 0, ""},
                                                {"1000 filtered", 1000, "bench-"},
                                                {"1000 idle", 1000, "idle-"},
                                                {"50 unfiltered", 50, ""},
                                                {"200 unfiltered", 200, ""}}) {
      if (w.name == "none" || only.empty() ||
          absl::c_linear_search(absl::StrSplit(only, ','), w.name)) {
        watch_setups.push_back(w);
      }
    }
  }
  std::vector<std::vector<WatchPhase>> watch;
  if (!binary.empty() && part("watch")) {
    int watch_reps = absl::GetFlag(FLAGS_watch_reps);
    if (watch_reps <= 0) {
      watch_reps = absl::GetFlag(FLAGS_reps) > 0 ? reps : quick ? 1 : 9;
    }
    auto w = MeasureWatch(binary, watch_setups, watch_reps, duration);
    if (!w.ok()) {
      std::fprintf(stderr, "sliced_load: watch: %s\n",
                   w.status().ToString().c_str());
      return 1;
    }
    for (const auto& phases : *w) {
      for (const WatchPhase& p : phases) sane = sane && Sane(p.creates);
    }
    watch = *std::move(w);
  }
  // 4. Heartbeats.
  std::string beat_flag = absl::GetFlag(FLAGS_beat_nodes);
  if (beat_flag.empty()) beat_flag = quick ? "1000" : "10000,100000";
  std::vector<BeatPoint> beats;
  if (!binary.empty() && part("heartbeats")) {
    for (int64_t n : ParseList(beat_flag == "none" ? "" : beat_flag)) {
      auto p = MeasureHeartbeats(binary, n, reps, duration);
      if (!p.ok()) {
        std::fprintf(stderr, "sliced_load: heartbeats at %d nodes: %s\n",
                     static_cast<int>(n), p.status().ToString().c_str());
        return 1;
      }
      for (const BeatTriple& t : p->reps) {
        sane = sane && Sane(t.quiet) && Sane(t.single) && Sane(t.batched) &&
               t.single_beats.errors == 0 && t.batched_beats.errors == 0;
      }
      beats.push_back(*std::move(p));
    }
  }
  Progress("%s", "");

  // JSON.
  JsonWriter j;
  j.BeginObject().Key("duration_s").Number(duration).Key("warmup_s")
      .Number(absl::GetFlag(FLAGS_warmup)).Key("reps").Number(reps)
      .Key("connections").Number(absl::GetFlag(FLAGS_connections))
      .Key("fleet_nodes").Number(absl::GetFlag(FLAGS_fleet_nodes))
      .Key("fdatasync_p50_ms").Number(fsync_probe.p50_ms)
      .Key("fdatasync_p99_ms").Number(fsync_probe.p99_ms);
  j.Key("throughput").BeginArray();
  for (const auto& [c, by_w] : results) {
    for (const auto& [w, runs] : by_w) {
      for (const LoadResult& r : runs) WriteResultJson(j, r);
    }
  }
  j.EndArray().Key("scaling").BeginArray();
  for (const ScalePoint& p : scale) {
    j.BeginObject().Key("nodes").Number(p.nodes).Key("pgs").Number(p.pgs)
        .Key("pg_errors").Number(p.pg_errors).Key("register_s").Number(p.register_s)
        .Key("rss_empty").Number(p.rss_empty).Key("rss_nodes").Number(p.rss_nodes)
        .Key("rss_pgs").Number(p.rss_pgs).Key("rss_restart").Number(p.rss_restart)
        .Key("restart_s").BeginArray();
    for (double s : p.restart_s) j.Number(s);
    j.EndArray().Key("create");
    WriteResultJson(j, p.create);
    j.EndObject();
  }
  j.EndArray().Key("churn").BeginArray();
  for (const ChurnPoint& p : churn) {
    j.BeginObject()
        .Key("nodes")
        .Number(p.nodes)
        .Key("register_s")
        .Number(p.register_s)
        .Key("load_register")
        .String(p.load_register)
        .Key("pairs")
        .BeginArray();
    for (const ChurnPair& c : p.pairs) {
      j.BeginObject().Key("load_quiet").String(c.load_quiet)
          .Key("load_churn").String(c.load_churn).Key("register_ms").BeginArray();
      for (double ms : c.register_ms) j.Number(ms);
      j.EndArray().Key("quiet");
      WriteResultJson(j, c.quiet);
      j.Key("churn");
      WriteResultJson(j, c.churn);
      j.EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray();
  if (alone) {
    // By round, the calls' latencies per size (in the order of "nodes").
    j.Key("alone").BeginObject().Key("nodes").BeginArray();
    for (int64_t n : alone->nodes) j.Number(n);
    j.EndArray().Key("rounds").BeginArray();
    for (const AloneRound& r : alone->rounds) {
      auto by_size = [&](const char* key,
                         const std::vector<std::vector<double>>& sizes) {
        j.Key(key).BeginArray();
        for (const std::vector<double>& ms : sizes) {
          j.BeginArray();
          for (double v : ms) j.Number(v);
          j.EndArray();
        }
        j.EndArray();
      };
      auto per_size = [&](const char* key, const std::vector<double>& v) {
        j.Key(key).BeginArray();
        for (double ms : v) j.Number(ms);
        j.EndArray();
      };
      j.BeginObject().Key("load").String(r.load);
      by_size("front_ms", r.front_ms);
      by_size("back_ms", r.back_ms);
      per_size("front_cpu_ms", r.front_cpu_ms);
      per_size("back_cpu_ms", r.back_cpu_ms);
      per_size("front_first_cpu_ms", r.front_first_cpu_ms);
      per_size("back_first_cpu_ms", r.back_first_cpu_ms);
      j.EndObject();
    }
    j.EndArray().EndObject();
  }
  // Heartbeats and watchers: each repetition's phases as measured, for
  // bench/run.sh's summary (which takes the medians of their ratios).
  j.Key("heartbeats").BeginArray();
  for (const BeatPoint& p : beats) {
    j.BeginObject().Key("nodes").Number(p.nodes).Key("reps").BeginArray();
    for (const BeatTriple& t : p.reps) {
      j.BeginObject().Key("quiet");
      WriteResultJson(j, t.quiet);
      j.Key("single");
      WriteResultJson(j, t.single);
      j.Key("batched");
      WriteResultJson(j, t.batched);
      j.EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray().Key("watch").BeginArray();
  for (size_t k = 0; k < watch.size(); ++k) {
    j.BeginObject().Key("watchers").String(watch_setups[k].name)
        .Key("reps").BeginArray();
    for (const WatchPhase& p : watch[k]) {
      j.BeginObject().Key("events").Number(p.events).Key("ended")
          .Number(p.ended).Key("creates");
      WriteResultJson(j, p.creates);
      j.EndObject();
    }
    j.EndArray().EndObject();
  }
  j.EndArray().EndObject();

  // Markdown: throughput.
  std::string md = absl::StrFormat(
      "sliced_load, closed loop on gRPC's callback API over %d HTTP/2 "
      "connection(s), against a Release daemon on a fresh RocksDB dir "
      "(durable: synced group commits; `--heartbeat_timeout=0`) holding a "
      "generated fleet of %d nodes. Each phase: %.1f s warm-up, %.1f s "
      "measured; %d repetition(s). Every workload phase runs right after its "
      "own health-check phase at the same client count, and its ratio is "
      "workload ÷ that health check (listed per repetition, median first). "
      "ops/s and latencies are medians over the repetitions (the health row: "
      "over all its phases). Storage: a 200-byte append + fdatasync in "
      "the work dir took %.2f ms p50, %.2f ms p99 just before.\n\n"
      "| clients | workload | ops/s | ratio to health | p50 / p99 / p99.9 ms | errors | creates placed at once | generator CPU (cores) | daemon CPU (cores) | group commits/s × ops each, ms each |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      absl::GetFlag(FLAGS_connections), absl::GetFlag(FLAGS_fleet_nodes),
      absl::GetFlag(FLAGS_warmup), duration, reps, fsync_probe.p50_ms,
      fsync_probe.p99_ms);
  std::vector<std::string> rows = {"health"};
  rows.insert(rows.end(), workloads.begin(), workloads.end());
  for (const auto& [c, by_w] : results) {
    for (const std::string& w : rows) {
      const std::vector<LoadResult>& runs = by_w.at(w);
      std::vector<double> ops, p50, p99, p999, ccpu, dcpu, ratio, cps, opc, cms;
      int64_t errors = 0, creates = 0, created = 0;
      for (size_t i = 0; i < runs.size(); ++i) {
        for (const auto& [state, n] : runs[i].create_states) {
          creates += n;
          if (state == "CREATED") created += n;
        }
        ops.push_back(runs[i].ops_per_s);
        p50.push_back(runs[i].p50_us / 1000);
        p99.push_back(runs[i].p99_us / 1000);
        p999.push_back(runs[i].p999_us / 1000);
        ccpu.push_back(runs[i].client_cpu_cores);
        dcpu.push_back(runs[i].daemon_cpu_cores);
        cps.push_back(runs[i].commits_per_s);
        opc.push_back(runs[i].ops_per_commit);
        cms.push_back(runs[i].commit_ms);
        errors += runs[i].errors;
        const double h = runs[i].paired_health_ops_per_s;
        ratio.push_back(h > 0 ? runs[i].ops_per_s / h : 0);
      }
      std::string ratio_cell = "—";
      if (w != "health") {
        std::vector<std::string> each;
        for (double r : ratio) each.push_back(absl::StrFormat("%.2f", r));
        ratio_cell = absl::StrFormat("**%.2f**", Median(ratio));
        if (ratio.size() > 1) ratio_cell += " (" + absl::StrJoin(each, ", ") + ")";
      }
      const std::string placed_cell =
          creates ? absl::StrFormat("%.0f %%", 100.0 * created / creates) : "—";
      const std::string commit_cell =
          Median(cps) > 0 ? absl::StrFormat("%.0f × %.1f, %.2f", Median(cps), Median(opc),
                                            Median(cms))
                          : "—";
      absl::StrAppendFormat(&md, "| %d | %s | %.0f | %s | %.2f / %.2f / %.2f | %d | %s | %.2f | %s | %s |\n",
                            c, w, Median(ops), ratio_cell, Median(p50), Median(p99),
                            Median(p999), errors, placed_cell, Median(ccpu),
                            daemon ? absl::StrFormat("%.2f", Median(dcpu)) : "–",
                            commit_cell);
    }
  }
  std::vector<double> per_health;
  for (const auto& [c, by_w] : results) {
    for (const LoadResult& r : by_w.at("health")) {
      if (r.ops_per_s > 0) per_health.push_back(1e6 * r.client_cpu_cores / r.ops_per_s);
    }
  }
  const double generator_us_per_health = Median(per_health);
  md += "\nOne op = one RPC; create_remove and scaling alternate a create "
        "(CreatePlacementGroup of one {CPU: 1} bundle / SubmitScalingConfig of "
        "v6e 4x4 × 4 workers or 2x4 × 1) with the RemovePlacementGroup of it, "
        "both durable commits; mix draws 80 % / 20 % of those pairs. \"Creates "
        "placed at once\" is the share of creates answered CREATED (the rest "
        "PENDING: more concurrent v6e requests than free slices). The last column "
        "is from the daemon's own /metrics over the window "
        "(sliced_group_commit_ops, sliced_commit_duration_seconds).\n\n"
        "The ceiling is measured with this C++ callback-API generator, which "
        "spent " + absl::StrFormat("%.1f", generator_us_per_health) +
        " µs of CPU per health check in this run. DESIGN §7's calibration "
        "(~9.7k/s at 16 and ~13k/s at 64 clients, same machine class) was "
        "driven by ghz, a Go client; a ceiling several times higher here most "
        "plausibly means this generator leaves more of the 2 cores to the "
        "server, so ratios against it are lower than ratios against ghz's "
        "ceiling would be. Compare ops/s too, not only the ratio.\n";

  // Markdown: scaling.
  std::string sc =
      "Per fleet size a fresh daemon: the generated fleet registered in "
      "RegisterNodes batches of 1,000, then placement groups of 1–2 {CPU: 1} "
      "bundles created by 64 closed-loop clients; RSS is VmRSS from "
      "/proc/PID/status (allocator high-water marks included). Restart: "
      "kill -9, then exec to the \"serving on\" line, same data dir; median "
      "of the restarts (each listed).\n\n"
      "| nodes | PGs | register | RSS empty | RSS + nodes | per node | RSS + PGs | per PG | create ops/s (p99 ms) | restart | RSS after restart |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const ScalePoint& p : scale) {
    std::vector<std::string> each;
    for (double s : p.restart_s) each.push_back(absl::StrFormat("%.2f", s));
    absl::StrAppendFormat(
        &sc, "| %d | %d | %.2f s | %.0f MB | %.0f MB | %.1f KB | %.0f MB | %.1f KB | %.0f (%.1f) | **%.2f s** (%s) | %.0f MB |\n",
        p.nodes, p.pgs, p.register_s, Mb(p.rss_empty), Mb(p.rss_nodes),
        (p.rss_nodes - p.rss_empty) / 1024.0 / std::max<int64_t>(1, p.nodes),
        Mb(p.rss_pgs), (p.rss_pgs - p.rss_nodes) / 1024.0 / std::max<int64_t>(1, p.pgs),
        p.create.ops_per_s, p.create.p99_us / 1000, Median(p.restart_s),
        absl::StrJoin(each, ", "), Mb(p.rss_restart));
  }

  const std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  std::vector<std::pair<std::string, std::string>> files = {
      {"load.json", j.str() + "\n"}, {"load.md", md}};
  if (!scale.empty()) files.emplace_back("scale.md", sc);
  const std::string ch =
      churn.empty() ? ""
                    : ChurnMarkdown(churn, duration) +
                          (alone ? AloneMarkdown(*alone) : std::string());
  if (!churn.empty()) files.emplace_back("churn.md", ch);
  if (!throughput) files.erase(files.begin(), files.begin() + 2);  // no load.*
  if (!throughput && !churn.empty()) files.emplace_back("churn.json", j.str() + "\n");
  const std::string hb =
      beats.empty() ? "" : HeartbeatMarkdown(beats, duration);
  if (!beats.empty()) files.emplace_back("heartbeats.md", hb);
  const std::string wm =
      watch.empty() ? "" : WatchMarkdown(watch_setups, watch, duration);
  if (!watch.empty()) files.emplace_back("watch.md", wm);
  if (!WriteOutputs(out_dir, files)) return 1;
  std::printf("%s\n%s%s%s%s", throughput ? md.c_str() : "",
              scale.empty() ? "" : sc.c_str(), ch.c_str(), hb.c_str(),
              wm.c_str());
  if (absl::GetFlag(FLAGS_check) && !sane) return 1;
  return 0;
}

}  // namespace
}  // namespace sliced::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return sliced::bench::Main();
}
