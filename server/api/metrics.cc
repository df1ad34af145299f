#include "server/api/metrics.h"

#include <cctype>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/core/cluster_summary.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server::api {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5};
  return *buckets;
}

// Builds one gauge family at scrape time.
class GaugeFamily {
 public:
  GaugeFamily(std::string name, std::string help) {
    family_.name = std::move(name);
    family_.help = std::move(help);
    family_.type = MetricType::Gauge;
  }
  void Add(std::vector<std::pair<std::string, std::string>> labels,
           double value) {
    ClientMetric m;
    for (auto& [k, v] : labels) m.label.push_back({std::move(k), std::move(v)});
    m.gauge.value = value;
    family_.metric.push_back(std::move(m));
  }
  MetricFamily Take() { return std::move(family_); }

 private:
  MetricFamily family_;
};

std::string Or(const std::string& value, const char* fallback) {
  return value.empty() ? fallback : value;
}

// Queue, nodes, chips, slices and fragmentation from the cluster summary.
void AddSummaryFamilies(const ClusterSummary& summary,
                        std::vector<MetricFamily>& out) {
  GaugeFamily queue("sliced_pending_placement_groups",
                    "Placement groups waiting (PENDING or RESCHEDULING)");
  queue.Add({}, summary.pending);
  out.push_back(queue.Take());
  GaugeFamily oldest("sliced_pending_oldest_age_seconds",
                     "How long the longest-waiting placement group has waited");
  oldest.Add({}, summary.oldest_pending_seconds);
  out.push_back(oldest.Take());
  GaugeFamily by_state("sliced_nodes", "Nodes by state");
  for (const auto& [state, count] : summary.nodes_by_state) {
    by_state.Add({{"state", state}}, count);
  }
  out.push_back(by_state.Take());
  GaugeFamily chips_total("sliced_tpu_chips",
                          "TPU chips by accelerator and zone");
  GaugeFamily chips_free("sliced_tpu_chips_free",
                         "TPU chips not held by placement groups");
  for (const auto& [key, counts] : summary.chips_total_free) {
    const auto& [accel, zone] = key;
    chips_total.Add(
        {{"accelerator_type", Or(accel, "none")}, {"zone", Or(zone, "none")}},
        counts.first);
    chips_free.Add(
        {{"accelerator_type", Or(accel, "none")}, {"zone", Or(zone, "none")}},
        counts.second);
  }
  out.push_back(chips_total.Take());
  out.push_back(chips_free.Take());
  GaugeFamily slices_free(
      "sliced_slices_free",
      "Whole free TPU slices (intact, no bundle on any host)");
  GaugeFamily slices_total("sliced_slices", "TPU slices");
  for (const auto& [key, group] : summary.slices) {
    const auto& [accel, topo, tier, zone] = key;
    std::vector<std::pair<std::string, std::string>> labels = {
        {"accelerator_type", Or(accel, "none")},
        {"topology", Or(topo, "none")},
        {"tier", Or(tier, "none")},
        {"zone", Or(zone, "none")}};
    slices_free.Add(labels, group.free_slices);
    slices_total.Add(labels, group.total_slices);
  }
  out.push_back(slices_free.Take());
  out.push_back(slices_total.Take());
  GaugeFamily frag(
      "sliced_fragmentation_ratio",
      "Share of free TPU chips of a shape not in a whole free slice");
  for (const auto& [shape, value] : summary.fragmentation_by_shape) {
    frag.Add({{"accelerator_type", Or(shape.first, "none")},
              {"topology", Or(shape.second, "none")}},
             value);
  }
  out.push_back(frag.Take());
  GaugeFamily subslices(
      "sliced_free_subslices",
      "Sub-slices of a shape that could be carved now (free aligned boxes "
      "of intact larger slices)");
  for (const auto& [shape, count] : summary.free_subslices) {
    subslices.Add({{"accelerator_type", Or(shape.first, "none")},
                   {"topology", Or(shape.second, "none")}},
                  count);
  }
  out.push_back(subslices.Take());
  GaugeFamily sub_frag(
      "sliced_subslice_fragmentation_ratio",
      "Share of free TPU chips of a shape outside each slice's largest free "
      "aligned box");
  for (const auto& [shape, value] : summary.subslice_fragmentation_by_shape) {
    sub_frag.Add({{"accelerator_type", Or(shape.first, "none")},
                  {"topology", Or(shape.second, "none")}},
                 value);
  }
  out.push_back(sub_frag.Take());
}

// Per-chip TPU telemetry of the nodes still in the inventory.
void AddChipFamilies(const TelemetryStore& telemetry, absl::Time now,
                     const scheduler::InventorySnapshot& nodes,
                     std::vector<MetricFamily>& out) {
  GaugeFamily util("sliced_tpu_tensorcore_utilization_percent",
                   "TensorCore utilization reported by the node agent");
  GaugeFamily duty("sliced_tpu_duty_cycle_percent", "TPU duty cycle");
  GaugeFamily hbm_used("sliced_tpu_hbm_used_bytes", "HBM in use");
  GaugeFamily hbm_total("sliced_tpu_hbm_total_bytes", "HBM capacity");
  GaugeFamily bw("sliced_tpu_memory_bandwidth_utilization_percent",
                 "HBM bandwidth utilization");
  for (const auto& [node_id, report] : telemetry.Fresh(now)) {
    const scheduler::Node* node = nodes.FindNode(node_id);
    if (node == nullptr) continue;  // removed nodes have no series
    auto label = [&](absl::string_view key) {
      auto it = node->labels.find(key);
      return it == node->labels.end() ? std::string() : it->second;
    };
    const std::string slice = label(scheduler::kLabelTpuSliceName);
    const std::string accelerator = label(scheduler::kLabelAcceleratorType);
    for (const ChipMetrics& c : report.chips) {
      std::vector<std::pair<std::string, std::string>> labels = {
          {"node", node_id},
          {"slice", slice},
          {"accelerator_type", accelerator},
          {"chip", absl::StrCat(c.chip_index)}};
      // A value the agent did not send has no series (not a 0).
      for (auto [family, value] :
           {std::pair{&util, c.tensorcore_utilization},
            std::pair{&duty, c.duty_cycle},
            std::pair{&hbm_used, c.hbm_used_bytes},
            std::pair{&hbm_total, c.hbm_total_bytes},
            std::pair{&bw, c.memory_bandwidth_utilization}}) {
        if (value) family->Add(labels, *value);
      }
    }
  }
  for (GaugeFamily* f : {&util, &duty, &hbm_used, &hbm_total, &bw}) {
    out.push_back(f->Take());
  }
}

class StateCollector : public prometheus::Collectable {
 public:
  StateCollector(const Cluster* cluster, const TelemetryStore* telemetry,
                 const Coordinator* clock)
      : cluster_(cluster), telemetry_(telemetry), clock_(clock) {}

  std::vector<MetricFamily> Collect() const override {
    const absl::Time now = clock_->Now();
    auto [summary, snapshot] = Summarize(*cluster_, now);
    std::vector<MetricFamily> out;
    AddSummaryFamilies(summary, out);
    if (telemetry_ != nullptr)
      AddChipFamilies(*telemetry_, now, *snapshot, out);
    return out;
  }

 private:
  const Cluster* cluster_;
  const TelemetryStore* telemetry_;
  const Coordinator* clock_;
};

class RpcInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(Metrics* metrics, const char* method)
      : metrics_(metrics),
        method_(RpcMethodLabel(method ? method : "")),
        start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      metrics_->ObserveRpc(
          method_,
          absl::StatusCodeToString(
              static_cast<absl::StatusCode>(status.error_code())),
          absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  Metrics* const metrics_;
  const absl::string_view method_;  // RpcMethodLabel's: lives for good
  const absl::Time start_;
};

class RpcInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(Metrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info->method());
  }

 private:
  Metrics* const metrics_;
};

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      rpcs_(prometheus::BuildCounter()
                .Name("sliced_rpcs_total")
                .Help("RPCs answered, by method and status code")
                .Register(*registry_)),
      rpc_seconds_(prometheus::BuildHistogram()
                       .Name("sliced_rpc_duration_seconds")
                       .Help("RPC latency from arrival to status, by method")
                       .Register(*registry_)),
      decisions_(
          prometheus::BuildCounter()
              .Name("sliced_placement_decisions_total")
              .Help("Solver decisions by outcome and compute-class priority")
              .Register(*registry_)),
      preemptions_(prometheus::BuildCounter()
                       .Name("sliced_preemptions_total")
                       .Help("Preemption victims by their priority class and "
                             "what became of them: requeued, removed, "
                             "cancelled (the preemptor went without them) or "
                             "rescheduled (lost a node first)")
                       .Register(*registry_)),
      solve_seconds_(prometheus::BuildHistogram()
                         .Name("sliced_solve_duration_seconds")
                         .Help("Time the solver took per decision")
                         .Register(*registry_)
                         .Add({}, LatencyBuckets())),
      commit_seconds_(prometheus::BuildHistogram()
                          .Name("sliced_commit_duration_seconds")
                          .Help("Synced RocksDB group commit latency")
                          .Register(*registry_)
                          .Add({}, LatencyBuckets())),
      commit_ops_(prometheus::BuildHistogram()
                      .Name("sliced_group_commit_ops")
                      .Help("Operations per group commit")
                      .Register(*registry_)
                      .Add({},
                           prometheus::Histogram::BucketBoundaries{
                               1, 2, 4, 8, 16, 32, 64, 128, 256, 512})),
      commit_failures_(
          prometheus::BuildCounter()
              .Name("sliced_commit_failures_total")
              .Help("Group commits the store refused (answered UNAVAILABLE)")
              .Register(*registry_)
              .Add({})) {}

void Metrics::AttachState(const Cluster* cluster,
                          const TelemetryStore* telemetry,
                          const Coordinator* clock) {
  state_collector_ =
      std::make_shared<StateCollector>(cluster, telemetry, clock);
}

void Metrics::OnDecision(const scheduler::Decision& d, absl::Duration took) {
  std::string outcome(scheduler::OutcomeName(d.outcome));
  for (char& c : outcome) c = static_cast<char>(std::tolower(c));
  ObserveDecision(outcome, d.priority_index, absl::ToDoubleSeconds(took));
}

void Metrics::OnPreemption(const PlacementGroup& victim,
                           absl::string_view outcome) {
  preemptions_
      .Add({{"priority_class", Or(victim.priority_class, "none")},
            {"outcome", std::string(outcome)}})
      .Increment();
}

template <typename Cell>
template <typename Make>
Cell Metrics::CellCache<Cell>::Get(absl::string_view key, Make make) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = cells_.find(key); it != cells_.end()) return it->second;
  }
  // prometheus-cpp gives the same cell for the same labels, so two threads
  // making one at once agree.
  const Cell cell = make();
  absl::MutexLock lock(&mu_);
  cells_.emplace(key, cell);
  return cell;
}

namespace {

// Every method path of the daemon's services.
absl::flat_hash_set<std::string> KnownMethods() {
  absl::flat_hash_set<std::string> paths = {
      "/grpc.health.v1.Health/Check",
      "/grpc.health.v1.Health/Watch",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
  };
  const google::protobuf::FileDescriptor* file =
      ::sliced::v1::Node::descriptor()->file();
  for (int s = 0; s < file->service_count(); ++s) {
    const google::protobuf::ServiceDescriptor* service = file->service(s);
    for (int m = 0; m < service->method_count(); ++m) {
      paths.insert(absl::StrCat("/", service->full_name(), "/",
                                service->method(m)->name()));
    }
  }
  return paths;
}

// `a` and `b` joined with '\0', in a buffer of the calling thread's.
absl::string_view CellKey(absl::string_view a, absl::string_view b) {
  thread_local std::string key;
  key.assign(a.data(), a.size());
  key.push_back('\0');
  key.append(b.data(), b.size());
  return key;
}

}  // namespace

absl::string_view RpcMethodLabel(absl::string_view path) {
  static const auto* const known =
      new absl::flat_hash_set<std::string>(KnownMethods());
  auto it = known->find(path);
  return it == known->end() ? absl::string_view("unknown")
                            : absl::string_view(*it);
}

void Metrics::ObserveRpc(absl::string_view method, absl::string_view code,
                         double seconds) {
  const RpcCell cell = rpc_cells_.Get(CellKey(method, code), [&] {
    return RpcCell{
        &rpcs_.Add({{"method", std::string(method)},
                    {"code", std::string(code)}}),
        &rpc_seconds_.Add({{"method", std::string(method)}},
                          LatencyBuckets())};
  });
  cell.calls->Increment();
  cell.seconds->Observe(seconds);
}

void Metrics::ObserveDecision(absl::string_view outcome, int priority,
                              double seconds) {
  const std::string priority_label =
      priority < 0 ? "none" : absl::StrCat(priority);
  decision_cells_
      .Get(CellKey(outcome, priority_label),
           [&] {
             return &decisions_.Add({{"outcome", std::string(outcome)},
                                     {"priority", priority_label}});
           })
      ->Increment();
  solve_seconds_.Observe(seconds);
}

void Metrics::ObserveCommit(double seconds, int64_t ops, int64_t /*writes*/,
                            bool ok) {
  if (!ok) {
    commit_failures_.Increment();
    return;
  }
  commit_seconds_.Observe(seconds);
  commit_ops_.Observe(static_cast<double>(ops));
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
Metrics::InterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(this);
}

}  // namespace sliced::server::api
