// Prometheus metrics of the daemon (prometheus-cpp, text exposition on
// --metrics-listen). Event metrics (RPCs, decisions, commits) are counted as
// they happen; state metrics (queue, nodes, chips, slices, fragmentation, TPU
// telemetry) are computed from the committed state at scrape time, so they
// can never drift from it. Series and their labels: docs/observability.md.
//
// Thread-safe.
#ifndef SLICED_SERVER_API_METRICS_H_
#define SLICED_SERVER_API_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/core/cluster.h"
#include "server/core/coordinator.h"
#include "server/core/placement_manager.h"
#include "server/core/telemetry_store.h"

namespace sliced::server::api {

// The `method` label of an RPC's series: its path when it is one of the
// daemon's methods (sliced.v1, health, reflection), else "unknown". A client
// may call any path; each would otherwise make series of its own, without
// bound, before anything refuses the call.
absl::string_view RpcMethodLabel(absl::string_view path);

class Metrics : public Coordinator::CommitObserver,
                public PlacementManager::DecisionObserver {
 public:
  Metrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Adds the scrape-time collector over committed state and TPU telemetry.
  // REQUIRES: all three outlive every scrape (the exposer is stopped first).
  void AttachState(const Cluster* cluster, const TelemetryStore* telemetry,
                   const Coordinator* clock);
  std::shared_ptr<prometheus::Collectable> state_collector() const {
    return state_collector_;
  }

  void ObserveRpc(absl::string_view method, absl::string_view code,
                  double seconds);
  // outcome: "placed" / "unschedulable" / "infeasible"; priority: the
  // compute-class priority used, -1 without one.
  void ObserveDecision(absl::string_view outcome, int priority, double seconds);
  void ObserveCommit(double seconds, int64_t ops, int64_t writes, bool ok);

  // Coordinator::CommitObserver
  void OnCommit(absl::Duration took, int64_t ops, int64_t writes,
                bool ok) override {
    ObserveCommit(absl::ToDoubleSeconds(took), ops, writes, ok);
  }
  // PlacementManager::DecisionObserver
  void OnDecision(const scheduler::Decision& decision,
                  absl::Duration took) override;
  void OnPreemption(const PlacementGroup& victim,
                    absl::string_view outcome) override;

  // Counts every RPC by method (RpcMethodLabel) and code and times it.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& rpc_seconds_;
  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Counter>& preemptions_;
  prometheus::Histogram& solve_seconds_;
  prometheus::Histogram& commit_seconds_;
  prometheus::Histogram& commit_ops_;
  prometheus::Counter& commit_failures_;
  std::shared_ptr<prometheus::Collectable> state_collector_;

  // Cells of labelled families by their label values joined with '\0',
  // so that counting an RPC or a decision finds its cell without building
  // prometheus-cpp's label map and taking its family's lock.
  template <typename Cell>
  class CellCache {
   public:
    template <typename Make>
    Cell Get(absl::string_view key, Make make);

   private:
    absl::Mutex mu_;
    absl::flat_hash_map<std::string, Cell> cells_ ABSL_GUARDED_BY(mu_);
  };
  struct RpcCell {
    prometheus::Counter* calls;
    prometheus::Histogram* seconds;
  };
  CellCache<RpcCell> rpc_cells_;
  CellCache<prometheus::Counter*> decision_cells_;
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_METRICS_H_
