#include "server/api/web_api.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "server/api/convert_common.h"
#include "server/api/convert_nodes.h"
#include "server/api/convert_placement.h"
#include "server/api/convert_telemetry.h"
#include "server/core/fleet_view.h"
#include "sliced/v1/web.pb.h"

namespace sliced::server::api {
namespace {

using Params = std::map<std::string, std::string>;

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("JSON: ", std::string(status.message())));
  }
  return out;
}

std::string Param(const Params& params, const std::string& name) {
  auto it = params.find(name);
  return it == params.end() ? "" : it->second;
}

// An integer query parameter in [0, max]; `fallback` when absent or 0.
absl::StatusOr<int64_t> IntParam(const Params& params, const std::string& name,
                                 int64_t fallback, int64_t max) {
  const std::string text = Param(params, name);
  if (text.empty()) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0 || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": must be an integer in 0..", max, ", got ", Quote(text)));
  }
  return value == 0 ? fallback : value;
}

// The last `n` log lines of `nodes`, oldest first.
void RecentLogs(LogStore* logs, const std::vector<std::string>& nodes, int n,
                google::protobuf::RepeatedPtrField<v1::LogLine>* out) {
  logs->Read(
      nodes, [](const LogLine&) { return true; },
      [&](const LogLine& line) { LogLineToProto(line, out->Add()); }, nullptr,
      static_cast<size_t>(std::max(n, 0)));
}

}  // namespace

WebReply ErrorReply(const absl::Status& status) {
  int http = 500;
  switch (status.code()) {
    case absl::StatusCode::kOk:
      http = 200;
      break;
    case absl::StatusCode::kInvalidArgument:
      http = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      http = 401;
      break;
    case absl::StatusCode::kPermissionDenied:
      http = 403;
      break;
    case absl::StatusCode::kNotFound:
      http = 404;
      break;
    case absl::StatusCode::kUnavailable:
      http = 503;
      break;
    default:
      break;
  }
  // A JSON string by hand would need escaping: let protobuf do it.
  google::protobuf::Struct body;
  (*body.mutable_fields())["code"].set_string_value(
      absl::StatusCodeToString(status.code()));
  (*body.mutable_fields())["message"].set_string_value(
      std::string(status.message()));
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(body, &json);
  return {http, json};
}

WebApi::WebApi(const Cluster* cluster, const Coordinator* clock,
               const NodeManager* nodes, const PlacementManager* placement,
               const TelemetryManager* telemetry, Options options)
    : cluster_(cluster),
      clock_(clock),
      nodes_(nodes),
      placement_(placement),
      telemetry_(telemetry),
      options_(options) {}

WebReply WebApi::Get(absl::string_view path, const Params& params) const {
  absl::StatusOr<std::string> json;
  if (path == "summary") {
    json = Cached("summary", [this] { return Summary(); });
  } else if (path == "slice_groups") {
    json = Cached("slice_groups", [this] { return SliceGroups(); });
  } else if (path == "slices") {
    json = Slices(params);
  } else if (path == "queue") {
    json = Queue(params);
  } else if (absl::ConsumePrefix(&path, "placement_groups/") &&
             !path.empty()) {
    json = Group(std::string(path));
  } else if (absl::ConsumePrefix(&path, "nodes/") && !path.empty()) {
    json = Node(std::string(path));
  } else {
    json = absl::NotFoundError(
        absl::StrCat("no such API path: ", Quote(path),
                     " (summary, slice_groups, slices, queue, "
                     "placement_groups/<id>, nodes/<id>)"));
  }
  if (!json.ok()) return ErrorReply(json.status());
  return {200, *std::move(json)};
}

absl::StatusOr<std::string> WebApi::Cached(
    const std::string& path,
    const std::function<absl::StatusOr<std::string>()>& compute) const {
  // The clock of the cache is the wall clock: the coordinator's may be a
  // test's fake one that never moves.
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&cache_mu_);
    auto it = cache_.find(path);
    if (it != cache_.end() && now - it->second.time < options_.cache_for) {
      return it->second.json;
    }
  }
  absl::StatusOr<std::string> json = compute();
  if (json.ok() && options_.cache_for > absl::ZeroDuration()) {
    absl::MutexLock lock(&cache_mu_);
    cache_[path] = {now, *json};
  }
  return json;
}

absl::StatusOr<std::string> WebApi::Summary() const {
  v1::GetClusterSummaryResponse out;
  SummaryToProto(telemetry_->Summary(), &out);
  return ToJson(out);
}

absl::StatusOr<std::string> WebApi::SliceGroups() const {
  v1::ListSliceGroupsResponse out;
  // The pass runs on the immutable snapshot, outside the cluster's lock.
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot =
      cluster_->Snapshot();
  out.set_total_nodes(static_cast<int64_t>(snapshot->num_nodes()));
  std::vector<SliceGroupRow> rows = server::SliceGroups(*snapshot);
  for (const SliceGroupRow& row : rows) {
    v1::SliceGroup* g = out.add_groups();
    g->set_accelerator_type(row.accelerator_type);
    g->set_topology(row.topology);
    g->set_pod_type(row.pod_type);
    g->set_tier(row.tier);
    g->set_zone(row.zone);
    g->set_hosts_per_slice(row.hosts_per_slice);
    g->set_total_slices(row.total);
    g->set_free_slices(row.free);
    g->set_held_slices(row.held);
    g->set_partial_slices(row.partial);
    g->set_broken_slices(row.broken);
    g->set_total_chips(row.total_chips);
    g->set_free_chips(row.free_chips);
    g->set_fragmentation(row.fragmentation);
    out.set_total_slices(out.total_slices() + row.total);
  }
  return ToJson(out);
}

absl::StatusOr<std::string> WebApi::Slices(const Params& params) const {
  SliceFilter filter{Param(params, "accelerator_type"),
                     Param(params, "topology"), Param(params, "tier"),
                     Param(params, "zone"), Param(params, "status")};
  if (!filter.status.empty() && filter.status != "free" &&
      filter.status != "held" && filter.status != "partial" &&
      filter.status != "broken") {
    return absl::InvalidArgumentError(
        absl::StrCat("status: must be free, held, partial or broken, got ",
                     Quote(filter.status)));
  }
  ASSIGN_OR_RETURN(int64_t page_size,
                   IntParam(params, "page_size", options_.default_page_size,
                            options_.max_slice_page_size));
  const std::string after = Param(params, "page_token");
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot =
      cluster_->Snapshot();
  SliceMapPage page =
      SliceMap(*snapshot, filter, after, static_cast<int>(page_size));
  // The holders' jobs, for this page only (a group removed since: "").
  absl::flat_hash_map<std::string, std::string> jobs;
  for (const SliceRow& row : page.slices) {
    for (const std::string& id : row.pg_ids) jobs[id];
  }
  cluster_->Read([&](const ClusterState& s) {
    for (auto& [id, job] : jobs) {
      const PlacementGroup* g = s.pgs.Find(id);
      if (g != nullptr) job = g->job_id;
    }
    return 0;
  });
  v1::ListSliceMapResponse out;
  out.set_total(page.total);
  out.set_next_page_token(page.next);
  for (const SliceRow& row : page.slices) {
    v1::SliceMapEntry* e = out.add_slices();
    // The map draws hosts; sub-slice capacity is ListSlices' business.
    SliceToProto(SliceView{row.info, row.status == SliceStatus::kFree,
                           row.pg_ids, {}, {}},
                 e->mutable_slice());
    e->set_tier(row.tier);
    e->set_zone(row.zone);
    e->set_status(std::string(SliceStatusName(row.status)));
    e->set_host_grid(row.host_grid);
    for (const HostCell& cell : row.hosts) {
      v1::SliceHost* h = e->add_hosts();
      h->set_node_id(cell.node_id);
      h->set_position(cell.position);
      if (!cell.node_id.empty()) h->set_state(NodeStateToProto(cell.state));
      h->set_quarantine_reason(cell.quarantine_reason);
      for (const std::string& id : cell.pg_ids) {
        h->add_placement_group_ids(id);
        h->add_job_ids(jobs[id]);
      }
    }
  }
  return ToJson(out);
}

absl::StatusOr<std::string> WebApi::Queue(const Params& params) const {
  ASSIGN_OR_RETURN(int64_t offset,
                   IntParam(params, "offset", 0, int64_t{1} << 40));
  ASSIGN_OR_RETURN(int64_t page_size,
                   IntParam(params, "page_size", options_.default_page_size,
                            options_.max_queue_page_size));
  const std::string explain_param = Param(params, "explain");
  if (!explain_param.empty() && explain_param != "true" &&
      explain_param != "false") {
    return absl::InvalidArgumentError(absl::StrCat(
        "explain: must be true or false, got ", Quote(explain_param)));
  }
  const bool explain = explain_param == "true";
  QueuePage page = cluster_->Read([&](const ClusterState& s) {
    return server::Queue(s, offset, static_cast<int>(page_size));
  });
  std::map<std::string, ComputeClass> classes;
  for (ComputeClass& cls : placement_->ListClasses()) {
    std::string name = cls.name;
    classes.emplace(std::move(name), std::move(cls));
  }
  const absl::Time now = clock_->Now();
  v1::ListQueueResponse out;
  out.set_total(page.total);
  int64_t position = page.first_position;
  for (PlacementGroup& group : page.groups) {
    v1::QueueEntry* e = out.add_entries();
    e->set_position(position++);
    e->set_age_seconds(absl::ToDoubleSeconds(now - group.queued_time));
    if (explain) {
      // Explain may find the group gone (removed since): say so, go on.
      absl::StatusOr<PlacementManager::Explanation> why =
          placement_->Explain(group.id);
      if (why.ok()) {
        ExplanationToProto(*why, e->mutable_explain());
      } else {
        e->mutable_explain()->set_summary(
            std::string(why.status().message()));
      }
    }
    auto cls = classes.find(group.compute_class);
    if (!group.compute_class.empty() && cls != classes.end()) {
      for (const scheduler::LabelSelector& p : cls->second.priorities) {
        e->add_compute_class_tiers(scheduler::SelectorToString(p));
      }
    }
    PlacementGroupToProto(PlacementGroupView{std::move(group), {}},
                          e->mutable_placement_group());
  }
  return ToJson(out);
}

absl::StatusOr<std::string> WebApi::Group(const std::string& id) const {
  ASSIGN_OR_RETURN(PlacementGroupView view, placement_->Get(id));
  v1::PlacementGroupDetail out;
  PlacementGroupToProto(view, out.mutable_placement_group());
  absl::StatusOr<PlacementManager::Explanation> why = placement_->Explain(id);
  if (why.ok()) ExplanationToProto(*why, out.mutable_explain());
  absl::StatusOr<std::vector<std::string>> nodes =
      telemetry_->ResolveScope(LogScope{"", "", id});
  if (nodes.ok()) {
    RecentLogs(telemetry_->logs(), *nodes, options_.recent_log_lines,
               out.mutable_recent_logs());
  }
  return ToJson(out);
}

absl::StatusOr<std::string> WebApi::Node(const std::string& id) const {
  ASSIGN_OR_RETURN(NodeView view, nodes_->Get(id));
  v1::NodeDetail out;
  NodeToProto(view, out.mutable_node());
  TelemetryStore::Series series =
      telemetry_->telemetry()->SeriesOf(id, clock_->Now());
  if (series.latest) {
    for (const ChipMetrics& chip : series.latest->chips) {
      v1::ChipSeries* c = out.add_chips();
      c->set_chip_index(chip.chip_index);
      v1::ChipMetrics* latest = c->mutable_latest();
      latest->set_chip_index(chip.chip_index);
      if (chip.tensorcore_utilization)
        latest->set_tensorcore_utilization(*chip.tensorcore_utilization);
      if (chip.duty_cycle) latest->set_duty_cycle(*chip.duty_cycle);
      if (chip.hbm_used_bytes) latest->set_hbm_used_bytes(*chip.hbm_used_bytes);
      if (chip.hbm_total_bytes)
        latest->set_hbm_total_bytes(*chip.hbm_total_bytes);
      if (chip.memory_bandwidth_utilization) {
        latest->set_memory_bandwidth_utilization(
            *chip.memory_bandwidth_utilization);
      }
      for (const TelemetryStore::Sample& sample : series.samples) {
        auto it = sample.chips.find(chip.chip_index);
        if (it == sample.chips.end()) continue;
        v1::ChipSample* s = c->add_samples();
        s->set_time(absl::ToDoubleSeconds(sample.time - absl::UnixEpoch()));
        const TelemetryStore::ChipSample& v = it->second;
        if (v.tensorcore_utilization)
          s->set_tensorcore_utilization(*v.tensorcore_utilization);
        if (v.duty_cycle) s->set_duty_cycle(*v.duty_cycle);
        if (v.hbm_used_percent) s->set_hbm_used_percent(*v.hbm_used_percent);
        if (v.memory_bandwidth_utilization) {
          s->set_memory_bandwidth_utilization(*v.memory_bandwidth_utilization);
        }
      }
    }
  }
  RecentLogs(telemetry_->logs(), {id}, options_.recent_log_lines,
             out.mutable_recent_logs());
  return ToJson(out);
}

}  // namespace sliced::server::api
