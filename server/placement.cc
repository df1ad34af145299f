#include "server/placement.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "scheduler/labels.h"
#include "base/status_macros.h"
#include "scheduler/tpu.h"
#include "server/convert.h"
#include "server/scaling_config.h"

namespace sliced::server {
namespace {

using scheduler::Decision;
using scheduler::LabelSelector;
using scheduler::PlacementRequest;
using storage::PlacementGroupRecord;

absl::StatusOr<LabelSelector> SelectorFromMap(
    const google::protobuf::Map<std::string, std::string>& map,
    absl::string_view field) {
  auto parsed = scheduler::ParseLabelSelector(
      absl::btree_map<std::string, std::string>(map.begin(), map.end()));
  if (!parsed.ok()) return WithFieldPrefix(field, parsed.status());
  return parsed;
}

absl::Status ValidateName(absl::string_view value, absl::string_view field,
                          const Limits& limits) {
  if (static_cast<int>(value.size()) > limits.max_name_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be at most ", limits.max_name_length, " characters"));
  }
  for (char c : value) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must not hold control characters"));
    }
  }
  return absl::OkStatus();
}

scheduler::Strategy StrategyFromNumber(int number) {
  switch (number) {
    case v1::SPREAD:
      return scheduler::Strategy::kSpread;
    case v1::STRICT_PACK:
      return scheduler::Strategy::kStrictPack;
    case v1::STRICT_SPREAD:
      return scheduler::Strategy::kStrictSpread;
    default:
      return scheduler::Strategy::kPack;
  }
}

v1::PlacementStrategy StrategyToProto(scheduler::Strategy strategy) {
  switch (strategy) {
    case scheduler::Strategy::kPack:
      return v1::PACK;
    case scheduler::Strategy::kSpread:
      return v1::SPREAD;
    case scheduler::Strategy::kStrictPack:
      return v1::STRICT_PACK;
    case scheduler::Strategy::kStrictSpread:
      return v1::STRICT_SPREAD;
  }
  return v1::PACK;
}

// The wire expression of one selector term: "v", "!v", "in(a,b)", "!in(a,b)".
std::string TermExpression(const scheduler::SelectorTerm& t) {
  switch (t.op) {
    case scheduler::SelectorOp::kEquals:
      return t.values.empty() ? "" : t.values[0];
    case scheduler::SelectorOp::kNotEquals:
      return absl::StrCat("!", t.values.empty() ? "" : t.values[0]);
    case scheduler::SelectorOp::kIn:
      return absl::StrCat("in(", absl::StrJoin(t.values, ","), ")");
    case scheduler::SelectorOp::kNotIn:
      return absl::StrCat("!in(", absl::StrJoin(t.values, ","), ")");
  }
  return "";
}

void SelectorToRecord(const LabelSelector& selector,
                      storage::SelectorRecord* out) {
  for (const scheduler::SelectorTerm& t : selector.terms) {
    (*out->mutable_terms())[t.key] = TermExpression(t);
  }
}

// Engine bundles -> records (no placement yet).
void BundlesToRecords(
    const std::vector<scheduler::Bundle>& bundles,
    google::protobuf::RepeatedPtrField<storage::BundleRecord>* out) {
  out->Clear();
  for (const scheduler::Bundle& b : bundles) {
    storage::BundleRecord* r = out->Add();
    r->mutable_resources()->insert(b.resources.begin(), b.resources.end());
    SelectorToRecord(b.selector, r->mutable_selector());
  }
}

absl::StatusOr<std::vector<scheduler::Bundle>> BundlesFromRecords(
    const google::protobuf::RepeatedPtrField<storage::BundleRecord>& records) {
  std::vector<scheduler::Bundle> out;
  for (const storage::BundleRecord& r : records) {
    scheduler::Bundle b;
    b.resources.insert(r.resources().begin(), r.resources().end());
    ASSIGN_OR_RETURN(b.selector,
                     SelectorFromMap(r.selector().terms(), "selector"));
    out.push_back(std::move(b));
  }
  return out;
}

// Fills the record from an engine request (bundles, strategy, slice,
// fallbacks). `accelerator_type` is the name the caller gave.
void RequestToRecord(const PlacementRequest& request, PlacementGroupRecord& r) {
  BundlesToRecords(request.bundles, r.mutable_bundles());
  r.set_strategy(StrategyToProto(request.strategy));
  if (request.slice) {
    storage::SliceRequirementRecord* s = r.mutable_slice();
    s->set_accelerator_type(
        std::string(scheduler::TpuAcceleratorType(request.slice->generation)));
    s->set_topology(request.slice->topology);
    s->set_num_slices(request.slice->num_slices);
    s->mutable_resources_per_host()->insert(
        request.slice->resources_per_host.begin(),
        request.slice->resources_per_host.end());
    SelectorToRecord(request.slice->selector, s->mutable_selector());
  }
  for (const auto& fallback : request.fallbacks) {
    BundlesToRecords(fallback, r.add_fallbacks()->mutable_bundles());
  }
}

absl::StatusOr<std::vector<scheduler::Bundle>> BundlesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Bundle>& bundles,
    absl::string_view field, const Limits& limits) {
  if (bundles.size() > limits.max_bundles_per_pg) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", limits.max_bundles_per_pg,
                     " bundles, got ", bundles.size()));
  }
  std::vector<scheduler::Bundle> out;
  for (int i = 0; i < bundles.size(); ++i) {
    const std::string where = absl::StrCat(field, "[", i, "]");
    scheduler::Bundle b;
    ASSIGN_OR_RETURN(
        b.resources,
        ResourcesFromProto(bundles[i].resources(),
                           absl::StrCat(where, ".resources"), limits));
    bool any = false;
    for (const auto& [name, amount] : b.resources) any |= amount > 0;
    if (!any) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".resources: a bundle needs at least one resource > 0"));
    }
    ASSIGN_OR_RETURN(b.selector,
                     SelectorFromMap(bundles[i].label_selector(),
                                     absl::StrCat(where, ".label_selector")));
    out.push_back(std::move(b));
  }
  return out;
}

absl::Status ValidateCommon(absl::string_view job_id, absl::string_view name,
                            absl::string_view request_id,
                            absl::string_view compute_class,
                            const Limits& limits) {
  RETURN_IF_ERROR(ValidateName(job_id, "job_id", limits));
  RETURN_IF_ERROR(ValidateName(name, "name", limits));
  RETURN_IF_ERROR(ValidateName(request_id, "request_id", limits));
  RETURN_IF_ERROR(ValidateName(compute_class, "compute_class", limits));
  return absl::OkStatus();
}

// Expanded per-host bundles of a slice request (primary list).
std::vector<scheduler::Bundle> ExpandSliceBundles(
    const PlacementRequest& request) {
  if (!request.bundles.empty() || !request.slice) return request.bundles;
  auto shape = scheduler::ResolveTpuShape(request.slice->generation,
                                          request.slice->topology);
  if (!shape.ok()) return {};
  scheduler::Bundle host;
  host.resources = request.slice->resources_per_host;
  if (host.resources.empty()) {
    host.resources["TPU"] = shape->chips_per_host * scheduler::kResourceScale;
  }
  host.selector = request.slice->selector;
  return std::vector<scheduler::Bundle>(
      static_cast<size_t>(shape->hosts) * request.slice->num_slices, host);
}

// The bundle list a decision used.
std::vector<scheduler::Bundle> UsedBundles(const PlacementRequest& request,
                                           const Decision& d) {
  if (d.fallback_index >= 0) return request.fallbacks[d.fallback_index];
  return ExpandSliceBundles(request);
}

absl::StatusOr<std::vector<LabelSelector>> Priorities(
    Txn& txn, const PlacementGroupRecord& r) {
  std::vector<LabelSelector> out;
  if (r.compute_class().empty()) return out;
  const storage::ComputeClassRecord* cls = txn.FindClass(r.compute_class());
  if (cls == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "compute_class: no compute class ", Quote(r.compute_class())));
  }
  for (const storage::SelectorRecord& p : cls->priorities()) {
    ASSIGN_OR_RETURN(LabelSelector s, SelectorFromMap(p.terms(), "priority"));
    out.push_back(std::move(s));
  }
  return out;
}

std::string PendingReason(const Decision& d) {
  return absl::StrCat(scheduler::OutcomeName(d.outcome), ": ",
                      d.diagnosis.summary);
}

// Solves `entry` on the txn's snapshot and, when placed, allocates. Updates
// the record's state, bundles, reason. Returns the decision.
absl::StatusOr<Decision> TryPlace(Txn& txn, PgEntry& entry,
                                  const PlacementPolicy& policy) {
  PlacementGroupRecord& r = entry.record;
  PlacementRequest request = entry.request;
  ASSIGN_OR_RETURN(request.priorities, Priorities(txn, r));
  ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
  const absl::Time start = absl::Now();
  Decision d = scheduler::Solve(*snapshot, request);
  if (policy.on_decision) policy.on_decision(d, absl::Now() - start);
  r.set_update_time_ms(absl::ToUnixMillis(txn.now()));
  if (d.outcome != Decision::kPlaced) {
    r.set_pending_reason(PendingReason(d));
    if (r.state() == v1::PENDING || r.state() == v1::INFEASIBLE) {
      r.set_state(d.outcome == Decision::kInfeasible ? v1::INFEASIBLE
                                                     : v1::PENDING);
    }
    return d;
  }
  std::vector<scheduler::Bundle> bundles = UsedBundles(request, d);
  scheduler::SnapshotDelta delta;
  if (!request.replacing_pg_id.empty())
    delta.release_pg_ids.push_back(r.placement_group_id());
  for (size_t i = 0; i < bundles.size(); ++i) {
    delta.add_allocations.push_back(
        scheduler::Allocation{r.placement_group_id(), static_cast<int>(i),
                              d.bundle_nodes[i], bundles[i].resources});
  }
  RETURN_IF_ERROR(txn.ApplyDelta(delta));
  BundlesToRecords(bundles, r.mutable_bundles());
  for (size_t i = 0; i < bundles.size(); ++i) {
    r.mutable_bundles(i)->set_node_id(d.bundle_nodes[i]);
  }
  r.mutable_slice_names()->Assign(d.slice_names.begin(), d.slice_names.end());
  r.set_state(v1::CREATED);
  r.set_pending_reason("");
  r.set_priority_index(d.priority_index);
  r.set_fallback_index(d.fallback_index);
  return d;
}

void TimestampFromMillis(int64_t ms, google::protobuf::Timestamp* out) {
  out->set_seconds(ms / 1000);
  out->set_nanos(static_cast<int>(ms % 1000) * 1000000);
}

v1::ScalingConfig ScalingConfigFromRecord(
    const storage::ScalingConfigRecord& r) {
  v1::ScalingConfig c;
  c.set_num_workers(r.num_workers());
  c.set_use_tpu(r.use_tpu());
  c.set_use_gpu(r.use_gpu());
  c.set_topology(r.topology());
  c.set_accelerator_type(r.accelerator_type());
  c.set_placement_strategy(r.placement_strategy());
  c.mutable_resources_per_worker()->insert(r.resources_per_worker().begin(),
                                           r.resources_per_worker().end());
  c.mutable_label_selector()->insert(r.label_selector().begin(),
                                     r.label_selector().end());
  return c;
}

}  // namespace

// A spec for `request` owned as `in` says (CreatePlacementGroupRequest or
// SubmitScalingConfigRequest).
template <typename Request>
PgSpec NewSpec(PlacementRequest request, const Request& in) {
  PgSpec spec;
  PlacementGroupRecord& r = spec.entry.record;
  RequestToRecord(request, r);
  r.set_job_id(in.job_id());
  r.set_name(in.name());
  r.set_request_id(in.request_id());
  r.set_compute_class(in.compute_class());
  r.set_priority(in.priority());
  spec.entry.request = std::move(request);
  return spec;
}

absl::StatusOr<PgSpec> PgSpecFromCreate(
    const v1::CreatePlacementGroupRequest& in, const Limits& limits) {
  RETURN_IF_ERROR(ValidateCommon(in.job_id(), in.name(), in.request_id(),
                                 in.compute_class(), limits));
  PlacementRequest request;
  ASSIGN_OR_RETURN(request.bundles,
                   BundlesFromProto(in.bundles(), "bundles", limits));
  if (!v1::PlacementStrategy_IsValid(in.strategy())) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy: unknown value ", in.strategy(),
                     "; use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"));
  }
  request.strategy = StrategyFromNumber(in.strategy());
  if (in.has_slice()) {
    const v1::SliceRequirement& s = in.slice();
    scheduler::SliceRequirement slice;
    auto generation = scheduler::ParseTpuGeneration(s.accelerator_type());
    if (!generation.ok())
      return WithFieldPrefix("slice.accelerator_type", generation.status());
    slice.generation = *generation;
    auto shape = scheduler::ResolveTpuShape(*generation, s.topology());
    if (!shape.ok()) return WithFieldPrefix("slice.topology", shape.status());
    slice.topology = shape->topology;
    slice.num_slices = s.num_slices() == 0 ? 1 : s.num_slices();
    if (slice.num_slices < 1 || slice.num_slices > limits.max_slices_per_pg) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice.num_slices: must be 1..",
                       limits.max_slices_per_pg, ", got ", s.num_slices()));
    }
    if (shape->hosts * slice.num_slices > limits.max_bundles_per_pg) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice: ", slice.num_slices, " x ", shape->pod_type, " is ",
          shape->hosts * slice.num_slices, " host bundles; at most ",
          limits.max_bundles_per_pg, " per placement group"));
    }
    ASSIGN_OR_RETURN(slice.resources_per_host,
                     ResourcesFromProto(s.resources_per_host(),
                                        "slice.resources_per_host", limits));
    request.slice = std::move(slice);
  } else if (request.bundles.empty()) {
    return absl::InvalidArgumentError(
        "bundles: a placement group needs at least one bundle or a slice "
        "requirement");
  }
  for (int i = 0; i < in.fallback_strategy_size(); ++i) {
    ASSIGN_OR_RETURN(
        auto bundles,
        BundlesFromProto(in.fallback_strategy(i).bundles(),
                         absl::StrCat("fallback_strategy[", i, "].bundles"),
                         limits));
    request.fallbacks.push_back(std::move(bundles));
  }
  RETURN_IF_ERROR(scheduler::ValidateRequest(request));

  return NewSpec(std::move(request), in);
}

absl::StatusOr<PgSpec> PgSpecFromScalingConfig(
    const v1::SubmitScalingConfigRequest& in, const Limits& limits) {
  RETURN_IF_ERROR(ValidateCommon(in.job_id(), in.name(), in.request_id(),
                                 in.compute_class(), limits));
  ASSIGN_OR_RETURN(ScalingConfigPlan plan,
                   PlanScalingConfig(in.scaling_config(), limits));
  RETURN_IF_ERROR(scheduler::ValidateRequest(plan.request));
  PgSpec spec = NewSpec(std::move(plan.request), in);
  const v1::ScalingConfig& c = in.scaling_config();
  storage::ScalingConfigRecord* sc = spec.entry.record.mutable_scaling_config();
  sc->set_num_workers(c.num_workers());
  sc->set_use_tpu(c.use_tpu());
  sc->set_use_gpu(c.use_gpu());
  sc->set_topology(c.topology());
  sc->set_accelerator_type(c.accelerator_type());
  sc->set_placement_strategy(c.placement_strategy());
  sc->mutable_resources_per_worker()->insert(c.resources_per_worker().begin(),
                                             c.resources_per_worker().end());
  sc->mutable_label_selector()->insert(c.label_selector().begin(),
                                       c.label_selector().end());
  return spec;
}

absl::StatusOr<PlacementRequest> RequestFromRecord(
    const PlacementGroupRecord& r) {
  PlacementRequest request;
  ASSIGN_OR_RETURN(request.bundles, BundlesFromRecords(r.bundles()));
  request.strategy = StrategyFromNumber(r.strategy());
  if (r.has_slice()) {
    scheduler::SliceRequirement slice;
    ASSIGN_OR_RETURN(slice.generation, scheduler::ParseTpuGeneration(
                                           r.slice().accelerator_type()));
    slice.topology = r.slice().topology();
    slice.num_slices = r.slice().num_slices();
    slice.resources_per_host.insert(r.slice().resources_per_host().begin(),
                                    r.slice().resources_per_host().end());
    ASSIGN_OR_RETURN(
        slice.selector,
        SelectorFromMap(r.slice().selector().terms(), "slice.selector"));
    request.slice = std::move(slice);
  }
  for (const storage::FallbackRecord& f : r.fallbacks()) {
    ASSIGN_OR_RETURN(auto bundles, BundlesFromRecords(f.bundles()));
    request.fallbacks.push_back(std::move(bundles));
  }
  return request;
}

namespace {

bool Waits(const PlacementGroupRecord& r) {
  return r.state() == v1::PENDING || r.state() == v1::RESCHEDULING;
}

// Whether `r` has waited past the policy's bound.
bool Starving(const PlacementGroupRecord& r, const PlacementPolicy& policy,
              absl::Time now) {
  return Waits(r) && policy.starvation_bound > absl::ZeroDuration() &&
         now - absl::FromUnixMillis(r.queued_time_ms()) >=
             policy.starvation_bound;
}

std::string BlockedBy(const PlacementGroupRecord& starving,
                      const PlacementPolicy& policy) {
  return absl::StrCat("PENDING: waiting behind ", starving.placement_group_id(),
                      ", which has waited over ",
                      absl::FormatDuration(policy.starvation_bound),
                      " and claims capacity first");
}

}  // namespace

absl::Status CreatePg(Txn& txn, PgSpec spec, const PlacementPolicy& policy,
                      v1::PlacementGroup* reply) {
  PgEntry& entry = spec.entry;
  PlacementGroupRecord& r = entry.record;
  if (!r.request_id().empty()) {
    if (const PgEntry* existing = txn.FindPgByRequestId(r.request_id())) {
      ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
      PgToProto(*existing, *snapshot, reply);
      return absl::OkStatus();
    }
  }
  const uint64_t sequence = txn.NextSequence();
  r.set_sequence(sequence);
  r.set_placement_group_id(absl::StrFormat("pg-%012x", sequence));
  r.set_state(v1::PENDING);
  r.set_create_time_ms(absl::ToUnixMillis(txn.now()));
  r.set_queued_time_ms(r.create_time_ms());
  // Queued groups go first: if an earlier op of this group freed capacity,
  // re-try the queue before this newcomer can take it. A new group then
  // backfills beside the queued ones, unless one of at least its priority
  // starves.
  if (txn.PendingRetryRequested()) RetryPending(txn, policy);
  const std::vector<std::string> queue = txn.PendingQueue();
  const PgEntry* starving = nullptr;
  if (policy.starvation_bound > absl::ZeroDuration()) {
    for (const std::string& id : queue) {
      const PgEntry* pg = txn.FindPg(id);
      if (pg->record.priority() < r.priority()) break;
      if (Starving(pg->record, policy, txn.now())) {
        starving = pg;
        break;
      }
    }
  }
  auto check_room = [&]() -> absl::Status {
    if (static_cast<int>(queue.size()) >= policy.max_pending) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the pending queue is full (", policy.max_pending,
                       " groups); nothing was created. Retry later or remove "
                       "waiting groups"));
    }
    return absl::OkStatus();
  };
  if (starving != nullptr) {
    RETURN_IF_ERROR(check_room());
    r.set_pending_reason(BlockedBy(starving->record, policy));
    r.set_update_time_ms(r.create_time_ms());
    txn.PutPg(entry);
    ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
    PgToProto(entry, *snapshot, reply);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Decision d, TryPlace(txn, entry, policy));
  if (d.outcome != Decision::kPlaced && !r.compute_class().empty()) {
    const storage::ComputeClassRecord* cls = txn.FindClass(r.compute_class());
    if (cls != nullptr && cls->when_unsatisfiable() == v1::FAIL) {
      return absl::FailedPreconditionError(absl::StrCat(
          "compute class \"", r.compute_class(),
          "\" says FAIL and no priority holds the whole gang now: ",
          d.diagnosis.summary));
    }
  }
  if (d.outcome != Decision::kPlaced) RETURN_IF_ERROR(check_room());
  txn.PutPg(entry);
  ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
  PgToProto(entry, *snapshot, reply);
  return absl::OkStatus();
}

absl::Status RemovePg(Txn& txn, const std::string& pg_id) {
  const PgEntry* entry = txn.FindPg(pg_id);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("placement_group_id: no placement group ", Quote(pg_id)));
  }
  scheduler::SnapshotDelta delta;
  delta.release_pg_ids.push_back(pg_id);
  RETURN_IF_ERROR(txn.ApplyDelta(delta));
  txn.DeletePg(pg_id);
  return absl::OkStatus();
}

void RetryPending(Txn& txn, const PlacementPolicy& policy) {
  txn.MarkQueueRetried();
  std::optional<PlacementGroupRecord> blocker;  // a starving group not placed
  for (const std::string& id : txn.PendingQueue()) {
    const PgEntry* current = txn.FindPg(id);
    if (current == nullptr) continue;
    PgEntry entry = *current;
    if (blocker && Waits(entry.record)) {
      std::string reason = BlockedBy(*blocker, policy);
      if (entry.record.pending_reason() != reason) {
        entry.record.set_pending_reason(reason);
        txn.PutPg(entry);
      }
      continue;
    }
    auto d = TryPlace(txn, entry, policy);
    if (!d.ok()) continue;
    if (d->outcome != Decision::kPlaced &&
        Starving(entry.record, policy, txn.now())) {
      blocker = entry.record;
    }
    if (d->outcome == Decision::kPlaced ||
        entry.record.state() != current->record.state() ||
        entry.record.pending_reason() != current->record.pending_reason()) {
      txn.PutPg(entry);
    }
  }
}

absl::Status HandleNodesLost(Txn& txn, const std::vector<std::string>& node_ids,
                             const PlacementPolicy& policy) {
  absl::btree_set<std::string> lost(node_ids.begin(), node_ids.end());
  absl::btree_set<std::string> affected;
  for (const std::string& node : node_ids) {
    for (std::string& pg : txn.PgsOnNode(node)) affected.insert(std::move(pg));
  }
  for (const std::string& id : affected) {
    const PgEntry* current = txn.FindPg(id);
    if (current == nullptr) continue;
    PgEntry entry = *current;
    PlacementGroupRecord& r = entry.record;
    ASSIGN_OR_RETURN(entry.request, RequestFromRecord(r));
    // Release everything; a plain group keeps its surviving bundles by
    // pinning them, a slice group is re-placed whole elsewhere.
    scheduler::SnapshotDelta release;
    release.release_pg_ids.push_back(id);
    if (!entry.request.slice) {
      for (int i = 0; i < r.bundles_size(); ++i) {
        const std::string& node = r.bundles(i).node_id();
        if (!lost.contains(node)) {
          entry.request.bundles[i].pinned_node_id = node;
          release.add_allocations.push_back(scheduler::Allocation{
              id, i, node, entry.request.bundles[i].resources});
        }
      }
    }
    RETURN_IF_ERROR(txn.ApplyDelta(release));
    r.set_state(v1::RESCHEDULING);
    r.set_queued_time_ms(absl::ToUnixMillis(txn.now()));
    for (auto& b : *r.mutable_bundles()) {
      if (entry.request.slice || lost.contains(b.node_id())) b.clear_node_id();
    }
    r.clear_slice_names();
    r.set_update_time_ms(absl::ToUnixMillis(txn.now()));
    r.set_pending_reason(
        absl::StrCat("RESCHEDULING: lost node(s) ", absl::StrJoin(lost, ", ")));
    txn.NotifyIntermediate(entry);
    entry.request.replacing_pg_id = id;
    ASSIGN_OR_RETURN(Decision d, TryPlace(txn, entry, policy));
    (void)d;
    // Keep pins only for this attempt: a later retry re-solves from the record.
    ASSIGN_OR_RETURN(entry.request, RequestFromRecord(r));
    txn.PutPg(entry);
  }
  return absl::OkStatus();
}

void PgToProto(const PgEntry& entry,
               const scheduler::InventorySnapshot& snapshot,
               v1::PlacementGroup* out) {
  const PlacementGroupRecord& r = entry.record;
  out->set_placement_group_id(r.placement_group_id());
  out->set_state(static_cast<v1::PlacementGroupState>(r.state()));
  for (const storage::BundleRecord& b : r.bundles()) {
    v1::Bundle* bundle = out->add_bundles();
    scheduler::ResourceSet resources(b.resources().begin(),
                                     b.resources().end());
    ResourcesToProto(resources, bundle->mutable_resources());
    bundle->mutable_label_selector()->insert(b.selector().terms().begin(),
                                             b.selector().terms().end());
    bundle->set_node_id(b.node_id());
  }
  out->set_strategy(static_cast<v1::PlacementStrategy>(r.strategy()));
  if (r.has_slice()) {
    out->mutable_slice()->set_accelerator_type(r.slice().accelerator_type());
    out->mutable_slice()->set_topology(r.slice().topology());
    out->mutable_slice()->set_num_slices(r.slice().num_slices());
  }
  out->set_job_id(r.job_id());
  out->set_name(r.name());
  out->set_request_id(r.request_id());
  out->set_compute_class(r.compute_class());
  out->set_priority(r.priority());
  out->set_pending_reason(r.pending_reason());
  out->mutable_slice_names()->Assign(r.slice_names().begin(),
                                     r.slice_names().end());
  out->set_priority_index(r.priority_index());
  out->set_fallback_index(r.fallback_index());
  TimestampFromMillis(r.create_time_ms(), out->mutable_create_time());
  TimestampFromMillis(r.update_time_ms(), out->mutable_update_time());
  if (r.state() != v1::CREATED) return;

  // Workers: for ScalingConfigs and slice groups.
  ScalingConfigPlan plan;
  if (r.has_scaling_config()) {
    *out->mutable_scaling_config() =
        ScalingConfigFromRecord(r.scaling_config());
    auto planned = PlanScalingConfig(out->scaling_config(), Limits());
    if (!planned.ok()) return;
    plan = *std::move(planned);
  } else if (entry.request.slice) {
    auto shape = scheduler::ResolveTpuShape(entry.request.slice->generation,
                                            entry.request.slice->topology);
    if (!shape.ok()) return;
    plan.use_tpu = true;
    plan.shape = *shape;
    plan.hosts_per_slice = static_cast<int>(shape->hosts);
    plan.num_slices = entry.request.slice->num_slices;
    plan.num_workers = r.bundles_size();
  } else {
    return;
  }
  std::vector<PlacedNode> placed;
  for (const storage::BundleRecord& b : r.bundles()) {
    const scheduler::Node* node = snapshot.FindNode(b.node_id());
    placed.push_back(PlacedNode{b.node_id(), node ? node->address : ""});
  }
  std::vector<std::string> slices(r.slice_names().begin(),
                                  r.slice_names().end());
  for (v1::Worker& w : BuildWorkers(plan, placed, slices)) {
    *out->add_workers() = std::move(w);
  }
}

Decision Explain(const scheduler::InventorySnapshot& snapshot,
                 const PgEntry& entry,
                 const std::vector<storage::ComputeClassRecord>& classes) {
  PlacementRequest request = entry.request;
  for (const storage::ComputeClassRecord& cls : classes) {
    if (cls.name() != entry.record.compute_class()) continue;
    for (const storage::SelectorRecord& p : cls.priorities()) {
      auto s = SelectorFromMap(p.terms(), "priority");
      if (s.ok()) request.priorities.push_back(*std::move(s));
    }
  }
  return scheduler::Solve(snapshot, request);
}

}  // namespace sliced::server
