#include "server/core/node_manager.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "server/core/label_translation.h"
#include "server/core/log_store.h"
#include "server/core/placement_manager.h"
#include "server/core/telemetry_store.h"
#include "server/core/validation.h"

namespace sliced::server {
namespace {

using scheduler::NodeState;

// Whether `entry`, registered again as nodes[index] over `old`, still has
// the resources the placement groups on the node use. A node that shrank
// under its groups would show negative capacity, and its stored placements
// would hold capacity twice, which a restart refuses to serve.
// FailedPrecondition naming the field otherwise. (Labels may change: the
// groups keep what they were given, as Kubernetes' IgnoredDuringExecution.)
absl::Status CoversItsPlacements(Txn& txn, size_t index,
                                 const scheduler::Node& old,
                                 const scheduler::Node& entry) {
  const std::vector<std::string> held = txn.PgsOnNode(old.node_id);
  if (held.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const scheduler::InventorySnapshot* snapshot, txn.View());
  ASSIGN_OR_RETURN(scheduler::ResourceSet free,
                   snapshot->FreeResources(old.node_id));
  const std::string holding =
      absl::StrCat("node ", Quote(old.node_id), " holds placement group(s) ",
                   absl::StrJoin(held, ", "));
  const std::string remedy =
      "remove those groups (or the node, with force) first";
  for (const auto& [name, total] : old.resources) {
    auto left = free.find(name);
    const int64_t used = total - (left == free.end() ? 0 : left->second);
    auto given = entry.resources.find(name);
    const int64_t now = given == entry.resources.end() ? 0 : given->second;
    if (used > 0 && now < used) {
      return absl::FailedPreconditionError(absl::StrCat(
          "nodes[", index, "].resources[", name, "]: ", holding, " using ",
          scheduler::FromFixedPoint(used), " ", name, ", more than the ",
          scheduler::FromFixedPoint(now), " it registers with now; ", remedy));
    }
  }
  return absl::OkStatus();
}

// The node state changes of one op, logged once the op commits (a failed op
// changed nothing). Filled by the op's apply and flushed by its done, both on
// the writer thread, one after the other.
class NodeChanges {
 public:
  explicit NodeChanges(Logger* log) : log_(log) {}

  // Notes `next` when it is new (`old` null) or its state changed: `node
  // "x" DEAD (was ALIVE): lease expired`.
  void Note(const scheduler::Node* old, const scheduler::Node& next,
            absl::string_view why) {
    if (old != nullptr && old->state == next.state) return;
    Add(absl::StrCat(
        "node ", Quote(next.node_id), " ", scheduler::NodeStateName(next.state),
        old == nullptr
            ? ""
            : absl::StrCat(" (was ", scheduler::NodeStateName(old->state), ")"),
        ": ", why));
  }
  // Notes a quarantine that begins, ends or changes its reason.
  void NoteHealth(const scheduler::Node& old, const scheduler::Node& next) {
    if (old.quarantine_reason == next.quarantine_reason) return;
    Add(next.quarantine_reason.empty()
            ? absl::StrCat("node ", Quote(next.node_id),
                           " healthy again: quarantine lifted")
            : absl::StrCat("node ", Quote(next.node_id), " quarantined",
                           old.quarantine_reason.empty()
                               ? " (its groups are rescheduled)"
                               : "",
                           ": ", next.quarantine_reason));
  }
  void Add(std::string line) {
    if (log_ != nullptr) {
      lines_.emplace_back(Logger::Level::kInfo, std::move(line));
    }
  }
  // One write for the op's lines (a batch of 1,000 registrations is 1,000
  // lines), stamped alike.
  void Flush(const absl::Status& committed) {
    if (committed.ok() && log_ != nullptr) log_->LogAll(lines_);
    lines_.clear();
  }

 private:
  Logger* const log_;
  std::vector<std::pair<Logger::Level, std::string>> lines_;
};

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// `done`, after logging what `changes` noted if the op committed.
template <typename Result>
std::function<void(Result)> LogWhenCommitted(
    std::shared_ptr<NodeChanges> changes, std::function<void(Result)> done) {
  return [changes, done = std::move(done)](Result result) {
    changes->Flush(StatusOf(result));
    if (done) done(std::forward<Result>(result));
  };
}

absl::Status NodeNotFound(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("node_id: no node ", Quote(id)));
}

// Labels of one node: syntax of the raw ones, translation, limits, and the
// syntax of derived values.
absl::StatusOr<scheduler::Labels> NodeLabels(const NodeSpec& in,
                                             const std::string& where,
                                             const Limits& limits) {
  // A label's field, named only when its check fails.
  auto field = [&where](const std::string& key, absl::string_view what) {
    return [&where, &key, what] {
      return absl::StrCat(where, ": labels[", Quote(key), "]", what);
    };
  };
  for (const auto& entry : in.labels) {
    RETURN_IF_ERROR(WithFieldPrefix(field(entry.first, ""),
                                    scheduler::ValidateLabelKey(entry.first)));
    RETURN_IF_ERROR(
        WithFieldPrefix(field(entry.first, " value"),
                        scheduler::ValidateLabelValue(entry.second)));
  }
  absl::StatusOr<scheduler::Labels> labels =
      TranslateNodeLabels(in.node_id, in.labels);
  RETURN_IF_ERROR(WithFieldPrefix(where, labels.status()));
  if (static_cast<int>(labels->size()) > limits.max_labels_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": labels: at most ", limits.max_labels_per_node,
                     " labels per node (including derived Ray labels), got ",
                     labels->size()));
  }
  for (const auto& entry : *labels) {
    // Derived values (e.g. a raw TPU_WORKER_ID copied over) obey the syntax.
    RETURN_IF_ERROR(
        WithFieldPrefix(field(entry.first, " value"),
                        scheduler::ValidateLabelValue(entry.second)));
  }
  return labels;
}

// A position label must be x-y-z inside the host grid of the node's own
// slice shape (any non-negative x-y-z when the shape is unknown). Two hosts
// claiming one cell is not refused here: the second may be the fix of the
// first; the slice is not intact until they differ, and says why.
absl::Status CheckHostCoords(const scheduler::Labels& labels) {
  auto coords = labels.find(scheduler::kLabelTpuHostCoords);
  if (coords == labels.end()) return absl::OkStatus();
  std::vector<int> grid(3, std::numeric_limits<int>::max());
  auto label = [&](absl::string_view key) {
    auto it = labels.find(key);
    return it == labels.end() ? std::string() : it->second;
  };
  auto generation =
      scheduler::ParseTpuGeneration(label(scheduler::kLabelAcceleratorType));
  if (generation.ok()) {
    auto shape = scheduler::ResolveTpuShape(
        *generation, label(scheduler::kLabelTpuTopology));
    if (shape.ok()) grid = shape->host_grid;
  }
  return scheduler::ParseHostCoords(coords->second, grid).status();
}

absl::StatusOr<scheduler::Node> ValidateNode(const NodeSpec& in,
                                             const std::string& where,
                                             const Limits& limits) {
  RETURN_IF_ERROR(WithFieldPrefix(where, ValidateNodeId(in.node_id, limits)));
  RETURN_IF_ERROR(
      WithFieldPrefix([&] { return absl::StrCat(where, ": address"); },
                      ValidateAddress(in.address)));
  scheduler::Node node;
  node.node_id = in.node_id;
  node.address = in.address;
  ASSIGN_OR_RETURN(node.labels, NodeLabels(in, where, limits));
  RETURN_IF_ERROR(WithFieldPrefix(
      [&] {
        return absl::StrCat(where, ": labels[",
                            Quote(scheduler::kLabelTpuHostCoords), "]");
      },
      CheckHostCoords(node.labels)));
  ASSIGN_OR_RETURN(
      node.resources,
      ResourcesFromWire(in.resources, absl::StrCat(where, ": resources"),
                        limits));
  for (const auto& [name, amount] : node.resources) {
    if (IsWholeUnitResource(name) && amount % scheduler::kResourceScale != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": resources[", Quote(name), "]: node capacity of ", name,
          " must be a whole number"));
    }
  }
  return node;
}

NodeView ViewOf(scheduler::Node node,
                const scheduler::InventorySnapshot& snapshot,
                absl::Time last_heartbeat) {
  NodeView view;
  view.node = std::move(node);
  const scheduler::Node& entry = view.node;
  view.last_heartbeat = last_heartbeat;
  absl::StatusOr<scheduler::ResourceSet> free =
      snapshot.FreeResources(entry.node_id);
  if (free.ok()) {
    view.available = *std::move(free);
  } else {
    view.available = entry.resources;
  }
  const int64_t index = snapshot.NodeIndex(entry.node_id);
  if (index >= 0) {
    absl::btree_set<std::string> ids;
    for (const scheduler::Allocation& a : snapshot.node(index).allocations) {
      ids.insert(a.pg_id);
    }
    view.placement_group_ids.assign(ids.begin(), ids.end());
  }
  return view;
}

}  // namespace

std::string QuarantineReason(const std::vector<std::string>& problems) {
  std::string reason = absl::StrJoin(problems, "; ");
  if (reason.size() > kMaxQuarantineReason) {
    // Cut on a UTF-8 character boundary: the reason is a proto string.
    size_t cut = kMaxQuarantineReason - 3;
    while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xC0) == 0x80)
      --cut;
    reason.resize(cut);
    reason += "...";
  }
  return reason;
}

absl::StatusOr<std::vector<scheduler::Node>> ValidateNodes(
    const std::vector<NodeSpec>& nodes, const Limits& limits) {
  if (nodes.empty()) {
    return absl::InvalidArgumentError("nodes: must not be empty");
  }
  if (static_cast<int>(nodes.size()) > limits.max_nodes_per_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: at most ", limits.max_nodes_per_batch,
                     " nodes per batch, got ", nodes.size()));
  }
  std::vector<scheduler::Node> out;
  out.reserve(nodes.size());
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string where =
        absl::StrCat("nodes[", i, "] (node_id ", Quote(nodes[i].node_id), ")");
    ASSIGN_OR_RETURN(scheduler::Node node,
                     ValidateNode(nodes[i], where, limits));
    if (!seen.insert(node.node_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": node_id appears twice in the batch"));
    }
    out.push_back(std::move(node));
  }
  return out;
}

NodeManager::NodeManager(Coordinator* coordinator, Cluster* cluster,
                         PlacementManager* placement, LogStore* logs,
                         TelemetryStore* telemetry, Options options)
    : coordinator_(coordinator),
      cluster_(cluster),
      placement_(placement),
      logs_(logs),
      telemetry_(telemetry),
      options_(options),
      leases_(coordinator->Now()) {
  // Every node loaded counts as renewed now (a fresh lease after a
  // restart), and is in the table CheckLeases scans.
  const absl::Time epoch = coordinator->Now();
  cluster_->Read([&](const ClusterState& s) {
    leases_.Reserve(s.snapshot->num_nodes());
    for (uint32_t i = 0; i < s.snapshot->index_end(); ++i) {
      if (!s.snapshot->has_node(i)) continue;
      leases_.Renew(s.snapshot->node(i).node.node_id, epoch);
    }
    return 0;
  });
  if (options_.heartbeat_timeout > absl::ZeroDuration()) {
    lease_checker_.Start(
        "sliced-leases",
        std::min(options_.lease_check_interval, options_.heartbeat_timeout / 4),
        [this] { CheckLeases(); });
  }
}

NodeManager::~NodeManager() { StopLeases(); }

void NodeManager::StopLeases() { lease_checker_.Stop(); }

// ---------------------------------------------------------------- writes

void NodeManager::Register(std::vector<scheduler::Node> nodes, NodesDone done) {
  auto changes = std::make_shared<NodeChanges>(options_.log);
  SubmitForValue<std::vector<NodeView>>(
      *coordinator_,
      [this, nodes = std::move(nodes), changes](
          Txn& txn, std::vector<NodeView>& views) mutable {
        for (size_t i = 0; i < nodes.size(); ++i) {
          // Edited in place: the op runs once, and owns its batch.
          scheduler::Node& entry = nodes[i];
          const scheduler::Node* old = txn.FindNode(entry.node_id);
          // Re-registration keeps a drain (also one kept while DEAD); a
          // dead node that registers is back.
          if (old != nullptr &&
              (old->state == NodeState::kDraining || old->drain_kept)) {
            entry.state = NodeState::kDraining;
          }
          // ... and a quarantine: only the agent's health report lifts it.
          if (old != nullptr) {
            entry.quarantine_reason = old->quarantine_reason;
          }
          // The same node again (an agent retrying, or coming back after a
          // daemon restart) only renews its lease: nothing to store.
          if (old != nullptr && *old == entry) continue;
          if (old != nullptr) {
            RETURN_IF_ERROR(CoversItsPlacements(txn, i, *old, entry));
          }
          changes->Note(old, entry,
                        old == nullptr ? "registered" : "registered again");
          txn.PutNode(entry);
        }
        ASSIGN_OR_RETURN(const scheduler::InventorySnapshot* snapshot,
                         txn.View());
        // Once nothing can refuse the batch (before the install, so that
        // no lease check finds a node without its lease).
        for (scheduler::Node& node : nodes) {
          leases_.Renew(node.node_id, txn.now());
          // What is stored is the batch's node (unless the batch named it
          // twice), which the view then takes instead of a copy.
          const scheduler::Node& stored = *txn.FindNode(node.node_id);
          views.push_back(
              ViewOf(stored == node ? std::move(node) : scheduler::Node(stored),
                     *snapshot, txn.now()));
        }
        return absl::OkStatus();
      },
      LogWhenCommitted(changes, std::move(done)));
}

namespace {

// True when `beat` would change nothing of `node` but its lease: it is not
// DEAD, the state it reports (if any) is its state, the health it reports
// (if any) leaves its quarantine as it is.
bool OnlyRenews(const scheduler::Node& node, const NodeBeat& beat) {
  return node.state != NodeState::kDead &&
         beat.state.value_or(node.state) == node.state &&
         (!beat.health ||
          QuarantineReason(*beat.health) == node.quarantine_reason);
}

}  // namespace

void NodeManager::Heartbeat(std::vector<NodeBeat> beats, Done done) {
  // A beat that says ALIVE says what any beat says: the node is up (its
  // lease renewed, a DEAD node back). It never lifts a drain: only
  // UndrainNode does, which an agent's token may not call.
  for (NodeBeat& beat : beats) {
    if (beat.state == NodeState::kAlive) beat.state.reset();
  }
  // The usual beat only renews a lease: no write op, only a read of the
  // cluster state, so 10k beats/s do not queue behind (or ahead of)
  // placements on the writer. Renewed under that read, so that no commit
  // lands between the check and the renewal. A beat that races the expiry
  // of its own lease (already a whole timeout late) may still see its node
  // turn DEAD after it; its next beat revives it through the writer.
  const absl::Time now = coordinator_->Now();
  const bool renewed = cluster_->Read([&](const ClusterState& s) {
    for (const NodeBeat& beat : beats) {
      const scheduler::Node* node = s.snapshot->FindNode(beat.node_id);
      if (node == nullptr || !OnlyRenews(*node, beat)) {
        return false;
      }
    }
    for (const NodeBeat& beat : beats) leases_.Renew(beat.node_id, now);
    return true;
  });
  if (renewed) {
    done(absl::OkStatus());
    return;
  }
  auto changes = std::make_shared<NodeChanges>(options_.log);
  coordinator_->Submit(WriteOp{
      [this, beats = std::move(beats), changes](Txn& txn) {
        std::vector<std::string> lost;
        for (size_t i = 0; i < beats.size(); ++i) {
          const scheduler::Node* entry = txn.FindNode(beats[i].node_id);
          if (entry == nullptr) {
            return absl::NotFoundError(
                absl::StrCat("heartbeats[", i, "].node_id: no node ",
                             Quote(beats[i].node_id), "; register it first"));
          }
          scheduler::Node next = *entry;
          // A beat from a node marked dead brings it back (DRAINING if it
          // was when it died).
          scheduler::MoveToState(
              next, beats[i].state.value_or(entry->state == NodeState::kDead
                                                ? NodeState::kAlive
                                                : entry->state));
          if (beats[i].health) {
            next.quarantine_reason = QuarantineReason(*beats[i].health);
          }
          if (next == *entry) continue;
          changes->Note(entry, next,
                        beats[i].state ? "reported by its heartbeat"
                                       : "heartbeat after DEAD");
          changes->NoteHealth(*entry, next);
          // Decided before PutNode: when the batch names this node twice,
          // `entry` is the op's own copy, which PutNode overwrites.
          const bool died = next.state == NodeState::kDead &&
                            entry->state != NodeState::kDead;
          const bool sickened = entry->quarantine_reason.empty() &&
                                !next.quarantine_reason.empty();
          txn.PutNode(next);
          if (died || sickened) lost.push_back(next.node_id);
        }
        if (!lost.empty()) {
          RETURN_IF_ERROR(placement_->HandleNodesLost(txn, lost));
        }
        // Once nothing can refuse the batch.
        for (const NodeBeat& beat : beats) {
          leases_.Renew(beat.node_id, txn.now());
        }
        return absl::OkStatus();
      },
      LogWhenCommitted(changes, std::move(done))});
}

void NodeManager::Drain(const std::string& node_id, ViewDone done) {
  SetDraining(node_id, true, std::move(done));
}

void NodeManager::Undrain(const std::string& node_id, ViewDone done) {
  SetDraining(node_id, false, std::move(done));
}

void NodeManager::SetDraining(const std::string& node_id, bool draining,
                              ViewDone done) {
  auto changes = std::make_shared<NodeChanges>(options_.log);
  SubmitForValue<NodeView>(
      *coordinator_,
      [this, node_id, draining, changes](Txn& txn, NodeView& view) {
        const scheduler::Node* entry = txn.FindNode(node_id);
        if (entry == nullptr) return NodeNotFound(node_id);
        scheduler::Node next = *entry;
        if (entry->state == NodeState::kDead) {
          // It stays DEAD; the drain applies when it comes back (as
          // kubectl cordon on a NotReady node).
          next.drain_kept = draining;
        } else {
          next.state = draining ? NodeState::kDraining : NodeState::kAlive;
        }
        // Back ALIVE, PutNode has the queue re-tried in this commit.
        if (next != *entry) txn.PutNode(next);
        const char* why = draining ? "DrainNode" : "UndrainNode";
        changes->Note(entry, next, why);
        if (next.drain_kept != entry->drain_kept) {
          changes->Add(absl::StrCat("node ", Quote(node_id), " DEAD, ",
                                    draining ? "DRAINING" : "ALIVE",
                                    " when back: ", why));
        }
        ASSIGN_OR_RETURN(const scheduler::InventorySnapshot* snapshot,
                         txn.View());
        view = ViewOf(next, *snapshot, leases_.Last(node_id));
        return absl::OkStatus();
      },
      LogWhenCommitted(changes, std::move(done)));
}

void NodeManager::Remove(const std::string& node_id, bool force, Done done) {
  auto changes = std::make_shared<NodeChanges>(options_.log);
  coordinator_->Submit(WriteOp{
      [this, node_id, force, changes](Txn& txn) {
        const scheduler::Node* entry = txn.FindNode(node_id);
        if (entry == nullptr) return NodeNotFound(node_id);
        std::vector<std::string> holders = txn.PgsOnNode(node_id);
        if (!holders.empty()) {
          if (!force) {
            return absl::FailedPreconditionError(absl::StrCat(
                "node_id: node ", Quote(node_id), " holds bundles of ",
                holders.size(), " placement group(s) (", holders.front(),
                holders.size() > 1 ? ", ..." : "",
                "); drain it and remove them first, or force it "
                "(slicectl node remove --force; the API's "
                "force: true)"));
          }
          // Forced: the node is lost; its groups are rescheduled first.
          scheduler::Node dead = *entry;
          scheduler::MoveToState(dead, NodeState::kDead);
          txn.PutNode(dead);
          RETURN_IF_ERROR(placement_->HandleNodesLost(txn, {node_id}));
        }
        changes->Add(absl::StrCat("node ", Quote(node_id), " removed",
                                  holders.empty()
                                      ? ""
                                      : " with force (its groups are "
                                        "rescheduled)"));
        txn.RemoveNode(node_id);
        if (logs_ != nullptr) logs_->StageForget(txn, node_id);
        return absl::OkStatus();
      },
      [this, node_id, changes, done = std::move(done)](const absl::Status& s) {
        if (s.ok()) {
          // Unless registered again later in the same commit group (this
          // runs on the writer, after the group's install): that renewed
          // its lease, which CheckLeases needs to find it, and its ring
          // (emptied by the remove) may hold what it logged since.
          const bool back = cluster_->Read([&](const ClusterState& now) {
            return now.snapshot->FindNode(node_id) != nullptr;
          });
          if (!back) {
            leases_.Forget(node_id);
            if (logs_ != nullptr) logs_->Forget(node_id);
          }
          if (telemetry_ != nullptr) telemetry_->Forget(node_id);
        }
        changes->Flush(s);
        done(s);
      }});
}

// ---------------------------------------------------------------- reads

absl::StatusOr<NodeView> NodeManager::Get(absl::string_view node_id) const {
  return cluster_->Read([&](const ClusterState& s) -> absl::StatusOr<NodeView> {
    const scheduler::Node* node = s.snapshot->FindNode(node_id);
    if (node == nullptr) return NodeNotFound(node_id);
    return ViewOf(*node, *s.snapshot, leases_.Last(node_id));
  });
}

std::vector<NodeView> NodeManager::List(
    const scheduler::LabelSelector& selector, absl::string_view after,
    int limit, std::string* next) const {
  // Candidates come from the snapshot's label index, in node-id order. The
  // snapshot is immutable: matching (every node, for an empty selector)
  // runs outside the cluster's lock, so that it never holds up the writer.
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot =
      cluster_->Snapshot();
  const scheduler::InventorySnapshot& snap = *snapshot;
  std::vector<uint32_t> matches = snap.MatchingNodes(selector);
  auto it = matches.begin();
  if (!after.empty()) {
    it = std::upper_bound(matches.begin(), matches.end(), after,
                          [&](absl::string_view token, uint32_t i) {
                            return token < snap.node(i).node.node_id;
                          });
  }
  std::vector<NodeView> out;
  next->clear();
  for (; it != matches.end(); ++it) {
    if (static_cast<int>(out.size()) == limit) {
      *next = out.back().node.node_id;
      break;
    }
    const scheduler::Node& node = snap.node(*it).node;
    out.push_back(ViewOf(node, snap, leases_.Last(node.node_id)));
  }
  return out;
}

std::vector<SliceView> NodeManager::ListSlices() const {
  // Every slice, its holders and its free boxes come from the immutable
  // snapshot, outside the cluster's lock (a pass over every slice must not
  // hold up the writer); only the holders' sub-slice names are read under
  // it, after.
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot =
      cluster_->Snapshot();
  const scheduler::InventorySnapshot& snap = *snapshot;
  std::vector<SliceView> out;
  for (const scheduler::SliceState& slice : snap.ListSlices()) {
    SliceView& view = out.emplace_back();
    view.info = slice.info;
    view.free = slice.info.intact && slice.free;
    absl::btree_set<std::string> holders;
    for (const std::string& id : slice.info.node_ids) {
      const int64_t index = snap.NodeIndex(id);
      if (index < 0) continue;
      for (const auto& a : snap.node(index).allocations) {
        holders.insert(a.pg_id);
      }
    }
    view.placement_group_ids.assign(holders.begin(), holders.end());
    view.capacity = scheduler::FreeSubslices(snap, slice.info.name);
  }
  cluster_->Read([&](const ClusterState& s) {
    for (SliceView& view : out) {
      absl::btree_set<std::string> subslices;
      for (const std::string& pg_id : view.placement_group_ids) {
        const PlacementGroup* pg = s.pgs.Find(pg_id);
        if (pg == nullptr) continue;
        for (const std::string& name : pg->slice_names) {
          if (name != view.info.name &&
              scheduler::ParentSliceName(name) == view.info.name) {
            subslices.insert(name);
          }
        }
      }
      view.subslices.assign(subslices.begin(), subslices.end());
    }
  });
  return out;
}

// ---------------------------------------------------------------- leases

void NodeManager::CheckLeases(Done done) {
  const absl::Time deadline = coordinator_->Now() - options_.heartbeat_timeout;
  // The late ones from the lease table first (no cluster lock held for a
  // pass over every node), then which of them are live nodes not DEAD yet.
  std::vector<std::string> late = leases_.Stale(deadline);
  std::sort(late.begin(), late.end());  // marked DEAD in id order
  std::vector<std::string> gone;        // renewed once, no node now
  std::vector<std::string> expired = cluster_->Read([&](const ClusterState& s) {
    std::vector<std::string> ids;
    for (std::string& id : late) {
      const scheduler::Node* node = s.snapshot->FindNode(id);
      if (node == nullptr) {
        gone.push_back(std::move(id));
      } else if (node->state != NodeState::kDead) {
        ids.push_back(std::move(id));
      }
    }
    return ids;
  });
  // E.g. registered by a commit that failed: not a node, not a lease. (A
  // registration renewed since is not forgotten: its commit may install
  // after the read above.)
  for (const std::string& id : gone) leases_.ForgetIfStale(id, deadline);
  if (expired.empty()) {
    if (done) done(absl::OkStatus());
    return;
  }
  auto outcome = std::make_shared<ExpiryOutcome>();
  outcome->nodes = expired.size();
  outcome->done = std::move(done);
  {
    absl::MutexLock lock(&outcome->mu);
    outcome->left = 1;
  }
  MarkExpired(std::move(expired), std::move(outcome));
}

void NodeManager::MarkExpired(std::vector<std::string> expired,
                              std::shared_ptr<ExpiryOutcome> outcome) {
  auto changes = std::make_shared<NodeChanges>(options_.log);
  // The op's, and its answer's, which splits it when it is too large.
  auto ids =
      std::make_shared<const std::vector<std::string>>(std::move(expired));
  coordinator_->Submit(WriteOp{
      .apply =
          [this, ids, changes](Txn& txn) {
            const absl::Time cutoff = txn.now() - options_.heartbeat_timeout;
            std::vector<std::string> lost;
            for (const std::string& id : *ids) {
              const scheduler::Node* entry = txn.FindNode(id);
              // Re-check: a heartbeat may have come in meanwhile.
              const absl::Time last = leases_.Last(id);
              if (entry == nullptr || last >= cutoff ||
                  entry->state == NodeState::kDead) {
                continue;
              }
              scheduler::Node dead = *entry;
              scheduler::MoveToState(dead, NodeState::kDead);
              changes->Note(
                  entry, dead,
                  absl::StrCat("lease expired (no heartbeat for ",
                               absl::FormatDuration(absl::Trunc(
                                   txn.now() - last, absl::Milliseconds(100))),
                               ")"));
              txn.PutNode(dead);
              lost.push_back(id);
            }
            return lost.empty() ? absl::OkStatus()
                                : placement_->HandleNodesLost(txn, lost);
          },
      .done =
          [this, ids, changes, outcome](const absl::Status& s) {
            changes->Flush(s);
            // Too large for the store to take as one op (etcd: one Txn, for
            // a mass expiry: a rack, a partition): the two halves are
            // tried at once, down to single nodes. Only a node that alone
            // is too large stays ALIVE.
            if (s.code() == absl::StatusCode::kFailedPrecondition &&
                ids->size() > 1) {
              const auto middle = ids->begin() + ids->size() / 2;
              {
                absl::MutexLock lock(&outcome->mu);
                ++outcome->left;
              }
              MarkExpired({ids->begin(), middle}, outcome);
              MarkExpired({middle, ids->end()}, outcome);
              return;
            }
            size_t failed = 0;
            absl::Status result;
            {
              absl::MutexLock lock(&outcome->mu);
              if (!s.ok()) {
                outcome->failed += ids->size();
                if (outcome->first_error.ok()) outcome->first_error = s;
              }
              if (--outcome->left > 0) return;
              failed = outcome->failed;
              result = outcome->first_error;
            }
            // A failure (storage trouble) changes nothing; the next check,
            // a lease interval later, tries again. Said once per check.
            if (failed > 0 && options_.log != nullptr) {
              options_.log->Log(
                  Logger::Level::kError,
                  absl::StrCat("marking ", failed, " of ", outcome->nodes,
                               " node(s) with expired leases DEAD failed, "
                               "will retry: ",
                               result.ToString()));
            }
            if (outcome->done) outcome->done(result);
          },
  });
}

}  // namespace sliced::server
