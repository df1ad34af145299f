#include "storage/records.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/parallel.h"
#include "base/status_macros.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "scheduler/labels.h"
#include "scheduler/tpu.h"

namespace sliced::storage {
namespace {

using server::PgState;
using server::PlacementGroup;

// ---------------------------------------------------------------- enums

NodeStateRecord ToRecord(scheduler::NodeState state) {
  switch (state) {
    case scheduler::NodeState::kAlive:
      return NODE_ALIVE;
    case scheduler::NodeState::kDraining:
      return NODE_DRAINING;
    case scheduler::NodeState::kDead:
      return NODE_DEAD;
  }
  return NODE_STATE_RECORD_UNSPECIFIED;
}

PgStateRecord ToRecord(PgState state) {
  switch (state) {
    case PgState::kPending:
      return PG_PENDING;
    case PgState::kCreated:
      return PG_CREATED;
    case PgState::kRescheduling:
      return PG_RESCHEDULING;
    case PgState::kInfeasible:
      return PG_INFEASIBLE;
    case PgState::kRemoved:
      return PG_REMOVED;
    case PgState::kPreempting:
      return PG_PREEMPTING;
  }
  return PG_STATE_RECORD_UNSPECIFIED;
}

absl::StatusOr<PgState> FromRecord(PgStateRecord state) {
  switch (state) {
    case PG_PENDING:
      return PgState::kPending;
    case PG_CREATED:
      return PgState::kCreated;
    case PG_RESCHEDULING:
      return PgState::kRescheduling;
    case PG_INFEASIBLE:
      return PgState::kInfeasible;
    case PG_PREEMPTING:
      return PgState::kPreempting;
    default:
      return absl::DataLossError(absl::StrCat("unknown state ", state));
  }
}

absl::StatusOr<scheduler::Subslicing> SubslicingFromRecord(int32_t value) {
  switch (value) {
    case 0:
      return scheduler::Subslicing::kNever;
    case 1:
      return scheduler::Subslicing::kIfNoExactShape;
    case 2:
      return scheduler::Subslicing::kAllowed;
  }
  return absl::DataLossError(absl::StrCat("unknown subslicing ", value));
}

StrategyRecord ToRecord(scheduler::Strategy strategy) {
  switch (strategy) {
    case scheduler::Strategy::kPack:
      return STRATEGY_PACK;
    case scheduler::Strategy::kSpread:
      return STRATEGY_SPREAD;
    case scheduler::Strategy::kStrictPack:
      return STRATEGY_STRICT_PACK;
    case scheduler::Strategy::kStrictSpread:
      return STRATEGY_STRICT_SPREAD;
  }
  return STRATEGY_PACK;
}

absl::StatusOr<scheduler::Strategy> FromRecord(StrategyRecord strategy) {
  switch (strategy) {
    case STRATEGY_RECORD_UNSPECIFIED:
    case STRATEGY_PACK:
      return scheduler::Strategy::kPack;
    case STRATEGY_SPREAD:
      return scheduler::Strategy::kSpread;
    case STRATEGY_STRICT_PACK:
      return scheduler::Strategy::kStrictPack;
    case STRATEGY_STRICT_SPREAD:
      return scheduler::Strategy::kStrictSpread;
    default:
      return absl::DataLossError(absl::StrCat("unknown strategy ", strategy));
  }
}

LogSeverityRecord ToRecord(server::LogSeverity severity) {
  switch (severity) {
    case server::LogSeverity::kUnspecified:
      return LOG_SEVERITY_RECORD_UNSPECIFIED;
    case server::LogSeverity::kInfo:
      return LOG_INFO;
    case server::LogSeverity::kWarning:
      return LOG_WARNING;
    case server::LogSeverity::kError:
      return LOG_ERROR;
    case server::LogSeverity::kFatal:
      return LOG_FATAL;
  }
  return LOG_SEVERITY_RECORD_UNSPECIFIED;
}

// ---------------------------------------------------------------- selectors

absl::StatusOr<scheduler::LabelSelector> FromRecord(const SelectorRecord& r) {
  scheduler::LabelSelector selector;
  for (const SelectorTermRecord& t : r.terms()) {
    scheduler::SelectorTerm term;
    term.key = t.key();
    switch (t.op()) {
      case SELECTOR_EQUALS:
        term.op = scheduler::SelectorOp::kEquals;
        break;
      case SELECTOR_NOT_EQUALS:
        term.op = scheduler::SelectorOp::kNotEquals;
        break;
      case SELECTOR_IN:
        term.op = scheduler::SelectorOp::kIn;
        break;
      case SELECTOR_NOT_IN:
        term.op = scheduler::SelectorOp::kNotIn;
        break;
      default:
        return absl::DataLossError(
            absl::StrCat("selector on ", t.key(), ": unknown op ", t.op()));
    }
    term.values.assign(t.values().begin(), t.values().end());
    selector.terms.push_back(std::move(term));
  }
  return selector;
}

// ---------------------------------------------------------------- bundles

void ToRecord(const scheduler::ResourceSet& resources,
              const scheduler::LabelSelector& selector,
              absl::string_view node_id, BundleRecord* out) {
  out->mutable_resources()->insert(resources.begin(), resources.end());
  SelectorToRecord(selector, out->mutable_selector());
  out->set_node_id(std::string(node_id));
}

absl::StatusOr<scheduler::Bundle> BundleFromRecord(const BundleRecord& r) {
  scheduler::Bundle b;
  b.resources.insert(r.resources().begin(), r.resources().end());
  ASSIGN_OR_RETURN(b.selector, FromRecord(r.selector()));
  return b;
}

absl::StatusOr<std::vector<scheduler::Bundle>> BundlesFromRecords(
    const google::protobuf::RepeatedPtrField<BundleRecord>& records) {
  std::vector<scheduler::Bundle> out;
  out.reserve(records.size());
  for (const BundleRecord& r : records) {
    ASSIGN_OR_RETURN(scheduler::Bundle b, BundleFromRecord(r));
    out.push_back(std::move(b));
  }
  return out;
}

// ---------------------------------------------------------------- requests

void RequestToRecord(const scheduler::PlacementRequest& request,
                     PlacementGroupRecord& r) {
  for (const scheduler::Bundle& b : request.bundles) {
    ToRecord(b.resources, b.selector, "", r.add_requested_bundles());
  }
  r.set_strategy(ToRecord(request.strategy));
  if (request.slice) {
    SliceRequirementRecord* s = r.mutable_slice();
    s->set_accelerator_type(
        std::string(scheduler::TpuAcceleratorType(request.slice->generation)));
    s->set_topology(request.slice->topology);
    s->set_num_slices(request.slice->num_slices);
    s->mutable_resources_per_host()->insert(
        request.slice->resources_per_host.begin(),
        request.slice->resources_per_host.end());
    SelectorToRecord(request.slice->selector, s->mutable_selector());
    s->set_subslicing(static_cast<int32_t>(request.slice->subslicing));
    if (request.slice->tpu_resource_per_chip != 1) {
      s->set_tpu_resource_per_chip(request.slice->tpu_resource_per_chip);
    }
  }
  for (const scheduler::TopologyLevel& level : request.topology) {
    TopologyLevelRecord* t = r.add_topology();
    t->set_label(level.label);
    t->set_strategy(ToRecord(level.strategy));
    t->set_bundles_per_domain(level.bundles_per_domain);
  }
  for (const auto& fallback : request.fallbacks) {
    FallbackRecord* f = r.add_fallbacks();
    for (const scheduler::Bundle& b : fallback) {
      ToRecord(b.resources, b.selector, "", f->add_bundles());
    }
  }
}

absl::StatusOr<scheduler::PlacementRequest> RequestFromRecord(
    const PlacementGroupRecord& r) {
  scheduler::PlacementRequest request;
  ASSIGN_OR_RETURN(request.bundles, BundlesFromRecords(r.requested_bundles()));
  ASSIGN_OR_RETURN(request.strategy, FromRecord(r.strategy()));
  if (r.has_slice()) {
    scheduler::SliceRequirement slice;
    ASSIGN_OR_RETURN(slice.generation, scheduler::ParseTpuGeneration(
                                           r.slice().accelerator_type()));
    slice.topology = r.slice().topology();
    slice.num_slices = r.slice().num_slices();
    slice.resources_per_host.insert(r.slice().resources_per_host().begin(),
                                    r.slice().resources_per_host().end());
    ASSIGN_OR_RETURN(slice.selector, FromRecord(r.slice().selector()));
    slice.tpu_resource_per_chip =
        std::max(1, r.slice().tpu_resource_per_chip());
    ASSIGN_OR_RETURN(slice.subslicing,
                     SubslicingFromRecord(r.slice().subslicing()));
    request.slice = std::move(slice);
  }
  for (const TopologyLevelRecord& t : r.topology()) {
    scheduler::TopologyLevel level;
    level.label = t.label();
    ASSIGN_OR_RETURN(level.strategy, FromRecord(t.strategy()));
    level.bundles_per_domain = t.bundles_per_domain();
    request.topology.push_back(std::move(level));
  }
  for (const FallbackRecord& f : r.fallbacks()) {
    ASSIGN_OR_RETURN(auto bundles, BundlesFromRecords(f.bundles()));
    request.fallbacks.push_back(std::move(bundles));
  }
  return request;
}

void ScalingConfigToRecord(const server::ScalingConfig& c,
                           ScalingConfigRecord* out) {
  out->set_num_workers(c.num_workers);
  out->set_use_tpu(c.use_tpu);
  out->set_use_gpu(c.use_gpu);
  out->set_topology(c.topology);
  out->set_accelerator_type(c.accelerator_type);
  out->set_placement_strategy(c.placement_strategy);
  out->mutable_resources_per_worker()->insert(c.resources_per_worker.begin(),
                                              c.resources_per_worker.end());
  out->mutable_label_selector()->insert(c.label_selector.begin(),
                                        c.label_selector.end());
  out->set_tpu_resource_per_chip(c.tpu_resource_per_chip);
  if (c.allow_subslice.has_value()) {
    out->set_allow_subslice(*c.allow_subslice);
  }
}

server::ScalingConfig ScalingConfigFromRecord(const ScalingConfigRecord& r) {
  return server::ScalingConfig{
      r.num_workers(),
      r.use_tpu(),
      r.use_gpu(),
      r.topology(),
      r.accelerator_type(),
      r.placement_strategy(),
      {r.resources_per_worker().begin(), r.resources_per_worker().end()},
      {r.label_selector().begin(), r.label_selector().end()},
      r.tpu_resource_per_chip(),
      r.has_allow_subslice() ? std::optional<bool>(r.allow_subslice())
                             : std::nullopt};
}

absl::Status PgFromRecord(const PlacementGroupRecord& r, PlacementGroup& g) {
  g.id = r.placement_group_id();
  ASSIGN_OR_RETURN(g.state, FromRecord(r.state()));
  ASSIGN_OR_RETURN(g.request, RequestFromRecord(r));
  for (const BundleRecord& b : r.bundles()) {
    ASSIGN_OR_RETURN(scheduler::Bundle bundle, BundleFromRecord(b));
    g.bundles.push_back(server::PlacedBundle{
        std::move(bundle.resources), std::move(bundle.selector), b.node_id()});
  }
  g.slice_names.assign(r.slice_names().begin(), r.slice_names().end());
  g.job_id = r.job_id();
  g.name = r.name();
  g.request_id = r.request_id();
  g.compute_class = r.compute_class();
  g.priority = r.priority();
  g.priority_class = r.priority_class();
  g.priority_index = r.priority_index();
  g.fallback_index = r.fallback_index();
  g.reason = r.pending_reason();
  g.placement_note = r.placement_note();
  g.create_time = absl::FromUnixMillis(r.create_time_ms());
  g.update_time = absl::FromUnixMillis(r.update_time_ms());
  g.queued_time = absl::FromUnixMillis(r.queued_time_ms());
  g.sequence = r.sequence();
  g.preemption_policy = r.never_preempt()
                            ? server::PreemptionPolicy::kNever
                            : server::PreemptionPolicy::kPreemptLowerPriority;
  g.on_preemption = r.remove_on_preemption() ? server::OnPreemption::kRemove
                                             : server::OnPreemption::kRequeue;
  g.preempted_by = r.preempted_by();
  g.preempting.assign(r.preempting().begin(), r.preempting().end());
  g.preemption_deadline =
      r.preemption_deadline_ms() == 0
          ? absl::InfinitePast()
          : absl::FromUnixMillis(r.preemption_deadline_ms());
  g.placed_time = absl::FromUnixMillis(r.placed_time_ms());
  g.removed = r.removed();
  if (r.has_scaling_config()) {
    g.scaling_config = ScalingConfigFromRecord(r.scaling_config());
  }
  return absl::OkStatus();
}

// Decodes `value` of `table` into `out`, naming the record on error. The
// record is parsed on an arena whose first block is this thread's (a node's
// record fits), so that parsing it allocates little and freeing it is one
// pass (a restart parses 100k nodes).
template <typename Record, typename T>
absl::Status Decode(Table table, const std::string& key,
                    const std::string& value, T& out) {
  alignas(8) thread_local char first_block[16 << 10];
  google::protobuf::ArenaOptions options;
  options.initial_block = first_block;
  options.initial_block_size = sizeof(first_block);
  google::protobuf::Arena arena(options);
  Record& record = *google::protobuf::Arena::CreateMessage<Record>(&arena);
  if (!record.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("stored record ", TableName(table),
                                            "/", key, " does not parse"));
  }
  absl::StatusOr<T> decoded = FromRecord(record);
  if (!decoded.ok()) {
    return absl::DataLossError(absl::StrCat("stored record ", TableName(table),
                                            "/", key, ": ",
                                            decoded.status().message()));
  }
  out = *std::move(decoded);
  return absl::OkStatus();
}

// Decodes a record of `table` (not kCounters) into `out`.
absl::Status DecodeInto(Table table, const std::string& key,
                        const std::string& value, scheduler::Node& out) {
  return Decode<NodeRecordLoad>(table, key, value, out);
}
absl::Status DecodeInto(Table table, const std::string& key,
                        const std::string& value, PlacementGroup& out) {
  return Decode<PlacementGroupRecord>(table, key, value, out);
}
absl::Status DecodeInto(Table table, const std::string& key,
                        const std::string& value, server::ComputeClass& out) {
  return Decode<ComputeClassRecord>(table, key, value, out);
}
absl::Status DecodeInto(Table table, const std::string& key,
                        const std::string& value,
                        std::pair<std::string, server::LogLine>& out) {
  out.first = key;
  return Decode<LogRecord>(table, key, value, out.second);
}

// Calls `f` with the vector of `state` that holds records of `table`
// (kCounters has none: false).
template <typename F>
bool WithRecords(Table table, StoredState& state, F&& f) {
  switch (table) {
    case Table::kNodes:
      f(state.nodes);
      return true;
    case Table::kPlacementGroups:
      f(state.placement_groups);
      return true;
    case Table::kComputeClasses:
      f(state.compute_classes);
      return true;
    case Table::kLogs:
      f(state.logs);
      return true;
    case Table::kCounters:
      return false;
  }
  return false;
}

}  // namespace

void SelectorToRecord(const scheduler::LabelSelector& selector,
                      SelectorRecord* out) {
  for (const scheduler::SelectorTerm& t : selector.terms) {
    SelectorTermRecord* term = out->add_terms();
    term->set_key(t.key);
    switch (t.op) {
      case scheduler::SelectorOp::kEquals:
        term->set_op(SELECTOR_EQUALS);
        break;
      case scheduler::SelectorOp::kNotEquals:
        term->set_op(SELECTOR_NOT_EQUALS);
        break;
      case scheduler::SelectorOp::kIn:
        term->set_op(SELECTOR_IN);
        break;
      case scheduler::SelectorOp::kNotIn:
        term->set_op(SELECTOR_NOT_IN);
        break;
    }
    term->mutable_values()->Add(t.values.begin(), t.values.end());
  }
}

std::string SerializeRecord(const google::protobuf::MessageLite& record) {
  std::string bytes(record.ByteSizeLong(), '\0');
  {
    google::protobuf::io::ArrayOutputStream array(
        bytes.data(), static_cast<int>(bytes.size()));
    google::protobuf::io::CodedOutputStream out(&array);
    out.SetSerializationDeterministic(true);
    record.SerializeWithCachedSizes(&out);
  }  // the stream writes its last bytes as it goes out of scope
  return bytes;
}

namespace {

using google::protobuf::io::CodedOutputStream;

// A NodeRecord's fields and its map entries' (key = 1, value = 2) all have
// one-byte tags.
constexpr uint32_t Tag(uint32_t field, uint32_t wire_type) {
  return field << 3 | wire_type;
}
constexpr uint32_t kVarint = 0;
constexpr uint32_t kLengthDelimited = 2;

size_t BytesFieldSize(size_t length) {
  return 1 + CodedOutputStream::VarintSize64(length) + length;
}
void WriteBytesField(uint32_t field, absl::string_view bytes,
                     CodedOutputStream& out) {
  out.WriteTag(Tag(field, kLengthDelimited));
  out.WriteVarint64(bytes.size());
  out.WriteRaw(bytes.data(), static_cast<int>(bytes.size()));
}
// A singular proto3 string is left out when empty.
size_t StringFieldSize(absl::string_view s) {
  return s.empty() ? 0 : BytesFieldSize(s.size());
}
void WriteStringField(uint32_t field, absl::string_view s,
                      CodedOutputStream& out) {
  if (!s.empty()) WriteBytesField(field, s, out);
}

}  // namespace

std::string SerializeNodeRecord(const scheduler::Node& node) {
  // A map entry is a message of its key and its value, both always written
  // (as protobuf writes map entries), in key order (deterministic).
  auto label_size = [](const auto& entry) {
    return BytesFieldSize(entry.first.size()) +
           BytesFieldSize(entry.second.size());
  };
  auto resource_size = [](const auto& entry) {
    return BytesFieldSize(entry.first.size()) + 1 +
           CodedOutputStream::VarintSize64(static_cast<uint64_t>(entry.second));
  };
  const uint64_t state = ToRecord(node.state);
  size_t size = StringFieldSize(node.node_id) + StringFieldSize(node.address) +
                StringFieldSize(node.quarantine_reason) +
                (state != 0 ? 1 + CodedOutputStream::VarintSize64(state) : 0) +
                (node.drain_kept ? 2 : 0);
  for (const auto& entry : node.labels) {
    size += BytesFieldSize(label_size(entry));
  }
  for (const auto& entry : node.resources) {
    size += BytesFieldSize(resource_size(entry));
  }
  std::string bytes(size, '\0');
  {
    google::protobuf::io::ArrayOutputStream array(bytes.data(),
                                                  static_cast<int>(size));
    CodedOutputStream out(&array);
    WriteStringField(1, node.node_id, out);
    WriteStringField(2, node.address, out);
    for (const auto& entry : node.labels) {
      out.WriteTag(Tag(3, kLengthDelimited));
      out.WriteVarint64(label_size(entry));
      WriteBytesField(1, entry.first, out);
      WriteBytesField(2, entry.second, out);
    }
    for (const auto& entry : node.resources) {
      out.WriteTag(Tag(4, kLengthDelimited));
      out.WriteVarint64(resource_size(entry));
      WriteBytesField(1, entry.first, out);
      out.WriteTag(Tag(2, kVarint));
      out.WriteVarint64(static_cast<uint64_t>(entry.second));
    }
    if (state != 0) {
      out.WriteTag(Tag(5, kVarint));
      out.WriteVarint64(state);
    }
    WriteStringField(6, node.quarantine_reason, out);
    if (node.drain_kept) {
      out.WriteTag(Tag(7, kVarint));
      out.WriteVarint64(1);
    }
  }  // the stream writes its last bytes as it goes out of scope
  return bytes;
}

NodeRecord ToRecord(const scheduler::Node& node) {
  NodeRecord r;
  r.set_node_id(node.node_id);
  r.set_address(node.address);
  r.mutable_labels()->insert(node.labels.begin(), node.labels.end());
  r.mutable_resources()->insert(node.resources.begin(), node.resources.end());
  r.set_state(ToRecord(node.state));
  r.set_quarantine_reason(node.quarantine_reason);
  r.set_drain_kept(node.drain_kept);
  return r;
}

absl::StatusOr<scheduler::Node> FromRecord(NodeRecordLoad& r) {
  scheduler::Node node;
  node.node_id = std::move(*r.mutable_node_id());
  node.address = std::move(*r.mutable_address());
  std::vector<scheduler::Labels::value_type> labels;
  labels.reserve(r.labels_size());
  for (NodeRecordLoad::Label& l : *r.mutable_labels()) {
    labels.emplace_back(std::move(*l.mutable_key()),
                        std::move(*l.mutable_value()));
  }
  node.labels = scheduler::Labels::FromUnsorted(std::move(labels));
  std::vector<scheduler::ResourceSet::value_type> resources;
  resources.reserve(r.resources_size());
  for (NodeRecordLoad::Resource& res : *r.mutable_resources()) {
    resources.emplace_back(std::move(*res.mutable_key()), res.value());
  }
  node.resources = scheduler::ResourceSet::FromUnsorted(std::move(resources));
  node.quarantine_reason = std::move(*r.mutable_quarantine_reason());
  node.drain_kept = r.drain_kept();
  switch (r.state()) {
    case NODE_ALIVE:
      node.state = scheduler::NodeState::kAlive;
      break;
    case NODE_DRAINING:
      node.state = scheduler::NodeState::kDraining;
      break;
    case NODE_DEAD:
      node.state = scheduler::NodeState::kDead;
      break;
    default:
      return absl::DataLossError(absl::StrCat(
          "stored node ", node.node_id, " has unknown state ", r.state()));
  }
  return node;
}

void ToRecord(const PlacementGroup& g, PlacementGroupRecord* out) {
  PlacementGroupRecord& r = *out;
  r.set_placement_group_id(g.id);
  r.set_state(ToRecord(g.state));
  RequestToRecord(g.request, r);
  for (const server::PlacedBundle& b : g.bundles) {
    ToRecord(b.resources, b.selector, b.node_id, r.add_bundles());
  }
  r.mutable_slice_names()->Add(g.slice_names.begin(), g.slice_names.end());
  r.set_job_id(g.job_id);
  r.set_name(g.name);
  r.set_request_id(g.request_id);
  r.set_compute_class(g.compute_class);
  r.set_priority(g.priority);
  r.set_priority_class(g.priority_class);
  r.set_priority_index(g.priority_index);
  r.set_fallback_index(g.fallback_index);
  r.set_pending_reason(g.reason);
  r.set_placement_note(g.placement_note);
  r.set_create_time_ms(absl::ToUnixMillis(g.create_time));
  r.set_update_time_ms(absl::ToUnixMillis(g.update_time));
  r.set_queued_time_ms(absl::ToUnixMillis(g.queued_time));
  r.set_sequence(g.sequence);
  r.set_never_preempt(g.preemption_policy == server::PreemptionPolicy::kNever);
  r.set_remove_on_preemption(g.on_preemption == server::OnPreemption::kRemove);
  r.set_preempted_by(g.preempted_by);
  r.mutable_preempting()->Add(g.preempting.begin(), g.preempting.end());
  r.set_preemption_deadline_ms(g.preemption_deadline == absl::InfinitePast()
                                   ? 0
                                   : absl::ToUnixMillis(g.preemption_deadline));
  r.set_placed_time_ms(absl::ToUnixMillis(g.placed_time));
  r.set_removed(g.removed);
  if (g.scaling_config) {
    ScalingConfigToRecord(*g.scaling_config, r.mutable_scaling_config());
  }
}

absl::StatusOr<PlacementGroup> FromRecord(const PlacementGroupRecord& r) {
  PlacementGroup g;
  absl::Status decoded = PgFromRecord(r, g);
  if (!decoded.ok()) {
    return absl::DataLossError(absl::StrCat(
        "placement group ", r.placement_group_id(), ": ", decoded.message()));
  }
  return g;
}

ComputeClassRecord ToRecord(const server::ComputeClass& cls) {
  ComputeClassRecord r;
  r.set_name(cls.name);
  for (const scheduler::LabelSelector& p : cls.priorities) {
    SelectorToRecord(p, r.add_priorities());
  }
  r.set_when_unsatisfiable(cls.when_unsatisfiable ==
                                   server::WhenUnsatisfiable::kFail
                               ? WHEN_UNSATISFIABLE_FAIL
                               : WHEN_UNSATISFIABLE_WAIT);
  return r;
}

absl::StatusOr<server::ComputeClass> FromRecord(const ComputeClassRecord& r) {
  server::ComputeClass cls;
  cls.name = r.name();
  for (const SelectorRecord& p : r.priorities()) {
    ASSIGN_OR_RETURN(scheduler::LabelSelector s, FromRecord(p));
    cls.priorities.push_back(std::move(s));
  }
  switch (r.when_unsatisfiable()) {
    case WHEN_UNSATISFIABLE_RECORD_UNSPECIFIED:
    case WHEN_UNSATISFIABLE_WAIT:
      cls.when_unsatisfiable = server::WhenUnsatisfiable::kWait;
      break;
    case WHEN_UNSATISFIABLE_FAIL:
      cls.when_unsatisfiable = server::WhenUnsatisfiable::kFail;
      break;
    default:
      return absl::DataLossError(absl::StrCat("compute class ", r.name(),
                                              ": unknown when_unsatisfiable ",
                                              r.when_unsatisfiable()));
  }
  return cls;
}

LogRecord ToRecord(const server::LogLine& line) {
  LogRecord r;
  r.set_time_ms(absl::ToUnixMillis(line.time));
  r.set_severity(ToRecord(line.severity));
  r.set_text(line.text);
  r.set_node_id(line.node_id);
  return r;
}

absl::StatusOr<server::LogLine> FromRecord(const LogRecord& r) {
  server::LogLine line;
  line.time = absl::FromUnixMillis(r.time_ms());
  switch (r.severity()) {
    case LOG_SEVERITY_RECORD_UNSPECIFIED:
      line.severity = server::LogSeverity::kUnspecified;
      break;
    case LOG_INFO:
      line.severity = server::LogSeverity::kInfo;
      break;
    case LOG_WARNING:
      line.severity = server::LogSeverity::kWarning;
      break;
    case LOG_ERROR:
      line.severity = server::LogSeverity::kError;
      break;
    case LOG_FATAL:
      line.severity = server::LogSeverity::kFatal;
      break;
    default:
      return absl::DataLossError(
          absl::StrCat("log line: unknown severity ", r.severity()));
  }
  line.text = r.text();
  line.node_id = r.node_id();
  return line;
}

absl::Status AddRecord(Table table, const std::string& key,
                       const std::string& value, StoredState& state) {
  absl::Status status;
  const bool has_records = WithRecords(table, state, [&](auto& records) {
    typename std::decay_t<decltype(records)>::value_type decoded;
    status = DecodeInto(table, key, value, decoded);
    if (status.ok()) records.push_back(std::move(decoded));
  });
  if (has_records) return status;
  // kCounters. Unknown keys are a newer binary's counters: not ours to read.
  if (key == kCounterNextPgSequence &&
      !absl::SimpleAtoi(value, &state.next_pg_sequence)) {
    return absl::DataLossError(
        absl::StrCat("stored record counters/", key, ": not a number"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredState> DecodeRecords(
    std::vector<std::pair<Table, std::vector<RawRecord>>> tables, int threads) {
  // Each table's vector in `state` is sized first, then every record is
  // decoded into its own place, in chunks of consecutive records taken by
  // whichever thread is free; nothing is moved afterwards (a group is big).
  constexpr size_t kChunk = 1024;
  struct Chunk {
    std::function<absl::Status(const RawRecord&, size_t)> decode;
    const std::vector<RawRecord>* records;
    size_t begin, end;
    absl::Status status;
  };
  StoredState state;
  std::vector<Chunk> chunks;
  for (const auto& entry : tables) {
    // Not a structured binding: lambdas capture these (clang 14).
    const Table table = entry.first;
    const std::vector<RawRecord>& records = entry.second;
    std::function<absl::Status(const RawRecord&, size_t)> decode;
    const bool has_records = WithRecords(table, state, [&](auto& out) {
      out.resize(records.size());
      decode = [table, &out](const RawRecord& r, size_t i) {
        return DecodeInto(table, r.key, r.value, out[i]);
      };
    });
    // kCounters writes one field of `state`: one chunk, on one thread.
    const size_t chunk = has_records ? kChunk : records.size();
    if (!has_records) {
      decode = [table, &state](const RawRecord& r, size_t) {
        return AddRecord(table, r.key, r.value, state);
      };
    }
    for (size_t b = 0; b < records.size(); b += chunk) {
      chunks.push_back(
          {decode, &records, b, std::min(records.size(), b + chunk), {}});
    }
  }
  ParallelChunks(chunks.size(), 1, threads, [&chunks](size_t i, size_t) {
    Chunk& c = chunks[i];
    for (size_t r = c.begin; r < c.end && c.status.ok(); ++r) {
      c.status = c.decode((*c.records)[r], r);
    }
  });
  for (const Chunk& c : chunks) {
    if (!c.status.ok()) return c.status;
  }
  return state;
}

}  // namespace sliced::storage
