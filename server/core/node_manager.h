// The node manager: the inventory on top of the coordinator.
//
//  - Register: upserts a validated batch (GKE/KubeRay metadata translated
//    into Ray labels); re-registration keeps a drain, a dead node that
//    registers is back.
//  - Heartbeats renew leases (in memory only) and may change a node's state
//    or health; a node reported DEAD or unhealthy (quarantined) loses its
//    placements in the same commit, and a healthy report lifts the
//    quarantine (re-registration and drains keep it).
//  - Leases: a thread checks every lease_check_interval; nodes whose last
//    heartbeat is older than heartbeat_timeout turn DEAD in one op, and the
//    placement manager reschedules their groups in that op.
//  - Drain keeps placements and takes no new ones (Undrain ends that);
//    Remove refuses a node that holds bundles unless forced (then its
//    groups are rescheduled first) and forgets its logs and telemetry.
//
// Thread-safety: public methods from any thread; `done` callbacks run on the
// coordinator's writer thread after the commit and must not block.
#ifndef SLICED_SERVER_CORE_NODE_MANAGER_H_
#define SLICED_SERVER_CORE_NODE_MANAGER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/labels.h"
#include "scheduler/slices.h"
#include "scheduler/subslices.h"
#include "server/core/cluster.h"
#include "server/core/coordinator.h"
#include "server/core/leases.h"
#include "server/core/limits.h"
#include "server/core/logger.h"
#include "server/core/ticker.h"

namespace sliced::server {

class LogStore;
class PlacementManager;
class TelemetryStore;

// A node as given to Register, before validation and label translation.
struct NodeSpec {
  std::string node_id;
  std::string address;
  scheduler::Labels labels;  // raw: Ray labels and/or GKE metadata
  absl::btree_map<std::string, double> resources;
};

// Validates a RegisterNodes batch: 1..max_nodes_per_batch nodes, ids and
// addresses, no duplicate ids, label syntax before and after GKE
// translation, label and resource limits, whole units for memory/TPU/GPU.
// InvalidArgument names the node ("nodes[2] (node_id \"h1\"): ...") and the
// rule.
absl::StatusOr<std::vector<scheduler::Node>> ValidateNodes(
    const std::vector<NodeSpec>& nodes, const Limits& limits);

// A node as callers see it.
struct NodeView {
  scheduler::Node node;
  scheduler::ResourceSet available;
  std::vector<std::string> placement_group_ids;  // sorted
  absl::Time last_heartbeat = absl::InfinitePast();
};

struct SliceView {
  scheduler::SliceInfo info;
  bool free = false;  // intact and no bundle on any host
  std::vector<std::string> placement_group_ids;  // sorted
  std::vector<std::string> subslices;  // carved out of it and held, sorted
  scheduler::SubsliceCapacity capacity;  // what could be carved now
};

// One node's heartbeat; `state` nullopt keeps the state (a dead node that
// beats is back). `health` nullopt keeps the quarantine as it is; problems
// quarantine the node (its groups are rescheduled), none lift it.
struct NodeBeat {
  std::string node_id;
  std::optional<scheduler::NodeState> state;
  std::optional<std::vector<std::string>> health;
};

// The quarantine reason `problems` make: "" for none, else joined with "; "
// and cut to at most kMaxQuarantineReason bytes (on a UTF-8 boundary, then
// "...").
inline constexpr size_t kMaxQuarantineReason = 1024;
std::string QuarantineReason(const std::vector<std::string>& problems);

class NodeManager {
 public:
  struct Options {
    // A node that sends no heartbeat for this long turns DEAD. Zero disables
    // leases. Default 10 s.
    absl::Duration heartbeat_timeout = absl::Seconds(10);
    // How often leases are checked. Default 1 s (or timeout/4 if smaller).
    absl::Duration lease_check_interval = absl::Seconds(1);
    // Where node state changes (and why) are logged after each commit (not
    // owned); null: nowhere. Default null.
    Logger* log = nullptr;
  };

  // REQUIRES: every pointer outlives the manager; `logs` and `telemetry`
  // may be null. Starts the lease thread when leases are on.
  NodeManager(Coordinator* coordinator, Cluster* cluster,
              PlacementManager* placement, LogStore* logs,
              TelemetryStore* telemetry, Options options);
  // Stops the lease thread (StopLeases).
  ~NodeManager();

  // Stops and joins the lease thread; no op is submitted after it returns.
  // Call it before the coordinator stops: the coordinator's drain may still
  // run this manager's queued ops, so the manager must outlive it.
  void StopLeases();

  using Done = std::function<void(const absl::Status&)>;
  using NodesDone = std::function<void(absl::StatusOr<std::vector<NodeView>>)>;

  // REQUIRES: `nodes` passed ValidateNodes.
  void Register(std::vector<scheduler::Node> nodes, NodesDone done);
  // NotFound names the first unknown node (nothing is applied). Beats that
  // change nothing but the lease (the usual case) are answered at once,
  // without a write op: leases live in memory only (Leases).
  void Heartbeat(std::vector<NodeBeat> beats, Done done);
  using ViewDone = std::function<void(absl::StatusOr<NodeView>)>;
  // ALIVE -> DRAINING; a no-op on a draining node. FailedPrecondition for a
  // DEAD node.
  void Drain(const std::string& node_id, ViewDone done);
  // DRAINING -> ALIVE (the pending queue is re-tried in the same commit); a
  // no-op on an ALIVE node. FailedPrecondition for a DEAD node: it comes
  // back by heartbeat or re-registration.
  void Undrain(const std::string& node_id, ViewDone done);
  // FailedPrecondition when it holds bundles and `force` is false.
  void Remove(const std::string& node_id, bool force, Done done);

  absl::StatusOr<NodeView> Get(absl::string_view node_id) const;
  // Nodes matching `selector` with ids after `after`, at most `limit`, in id
  // order; `next` is set to the last id when more may follow.
  std::vector<NodeView> List(const scheduler::LabelSelector& selector,
                             absl::string_view after, int limit,
                             std::string* next) const;
  std::vector<SliceView> ListSlices() const;

  absl::Duration heartbeat_timeout() const {
    return options_.heartbeat_timeout;
  }

  // Checks every lease now (the lease thread does this each interval):
  // nodes whose lease expired turn DEAD in one op and lose their
  // placements; an op too large for the store (etcd's Txn limits) is split
  // in halves. `done` (optional) gets OK, or the first failure once every
  // op is answered; OK at once when no lease expired. What failed changed
  // nothing and the next check retries it.
  void CheckLeases(Done done = nullptr);

 private:
  // One lease check's ops, answered together.
  struct ExpiryOutcome {
    size_t nodes = 0;  // expired when the check began
    Done done;
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;    // ops not answered yet
    size_t failed ABSL_GUARDED_BY(mu) = 0;  // nodes in failed ops
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  // Marks `expired` DEAD in one op (see CheckLeases).
  void MarkExpired(std::vector<std::string> expired,
                   std::shared_ptr<ExpiryOutcome> outcome);

  // Drain (`draining`) or Undrain.
  void SetDraining(const std::string& node_id, bool draining, ViewDone done);

  Coordinator* const coordinator_;
  Cluster* const cluster_;
  PlacementManager* const placement_;
  LogStore* const logs_;
  TelemetryStore* const telemetry_;
  const Options options_;
  Leases leases_;

  Ticker lease_checker_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_NODE_MANAGER_H_
