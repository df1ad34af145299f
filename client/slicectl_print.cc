// slicectl's human output: tables and detail views of nodes, slices,
// placement groups and the cluster summary, and the helpers they share.
// Single-threaded, as slicectl is.
#include "client/slicectl_print.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace sliced::slicectl {

void PrintJson(const google::protobuf::Message& message, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  // Proto field names (placement_group_id), as grpcurl prints them against
  // sliced and as the Python client names its fields (docs/clients.md).
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  // add_whitespace ends with a newline; compact output does not.
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  std::fputs(out.c_str(), stdout);
}

void Print(const std::string& text) { std::fputs(text.c_str(), stdout); }

// Whole numbers in full (memory bytes), others as the shortest %g.
std::string Num(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 1e18 &&
      v > -1e18) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrCat(v);
}

std::string OrDash(absl::string_view s) {
  return s.empty() ? "-" : std::string(s);
}

std::string TimeText(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  absl::Time time =
      absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", time, absl::UTCTimeZone());
}

Table::Cell State(const Context& ctx, absl::string_view state) {
  return Table::Cell(std::string(state),
                     ctx.color ? StateColor(state) : nullptr);
}

// `state` in its colour when colour is on.
std::string Colored(const Context& ctx, absl::string_view state) {
  const char* color = StateColor(state);
  if (!ctx.color || color == nullptr) return std::string(state);
  return absl::StrCat("\033[", color, "m", state, "\033[0m");
}

// "avail/total" for one resource, "-" when the node has none of it.
std::string Capacity(const v1::Node& node, const std::string& resource) {
  auto total = node.resources().find(resource);
  if (total == node.resources().end()) return "-";
  auto avail = node.available().find(resource);
  double free = avail == node.available().end() ? 0 : avail->second;
  return absl::StrCat(Num(free), "/", Num(total->second));
}

std::string Label(const v1::Node& node, const std::string& key) {
  auto it = node.labels().find(key);
  return it == node.labels().end() ? "-" : OrDash(it->second);
}

// ------------------------------------------------------------ human output

void PrintNodes(const Context& ctx,
                const google::protobuf::RepeatedPtrField<v1::Node>& nodes) {
  Table table({"NODE", "STATE", "ADDRESS", "ACCELERATOR", "TOPOLOGY", "SLICE",
               "WORKER", "TIER", "CPU", "TPU", "PGS"});
  for (const v1::Node& n : nodes) {
    table.AddRow(
        {n.node_id(),
         // As kubectl's "Ready,SchedulingDisabled".
         State(ctx, absl::StrCat(
                        v1::NodeState_Name(n.state()),
                        n.drain_when_back() ? ",DRAIN-WHEN-BACK" : "",
                        n.quarantine_reason().empty() ? "" : ",QUARANTINED")),
         OrDash(n.address()), Label(n, "ray.io/accelerator-type"),
         Label(n, "ray.io/tpu-topology"), Label(n, "ray.io/tpu-slice-name"),
         Label(n, "ray.io/tpu-worker-id"), Label(n, "sliced.io/capacity-tier"),
         Capacity(n, "CPU"), Capacity(n, "TPU"),
         absl::StrCat(n.placement_group_ids_size())});
  }
  if (table.empty()) {
    Print("no nodes\n");
    return;
  }
  Print(table.Render(ctx.color));
}

void PrintNode(const Context& ctx, const v1::Node& n) {
  Table head({"node", n.node_id()});
  head.AddRow({"state", State(ctx, v1::NodeState_Name(n.state()))});
  if (n.drain_when_back()) head.AddRow({"when back", "DRAINING"});
  if (!n.quarantine_reason().empty()) {
    head.AddRow({"quarantined", n.quarantine_reason()});
  }
  head.AddRow({"address", OrDash(n.address())});
  head.AddRow({"last heartbeat", TimeText(n.last_heartbeat())});
  head.AddRow({"placement groups",
               OrDash(absl::StrJoin(n.placement_group_ids(), ", "))});
  Print(head.Render(ctx.color));
  std::map<std::string, std::string> labels(n.labels().begin(),
                                            n.labels().end());
  Print("labels:\n");
  for (const auto& [k, v] : labels) Print(absl::StrCat("  ", k, "=", v, "\n"));
  std::map<std::string, double> resources(n.resources().begin(),
                                          n.resources().end());
  Table res({"RESOURCE", "TOTAL", "AVAILABLE"});
  for (const auto& [k, v] : resources) {
    auto a = n.available().find(k);
    res.AddRow({k, Num(v), a == n.available().end() ? "0" : Num(a->second)});
  }
  Print("resources:\n");
  Print(res.Render(ctx.color, "  "));
}

std::string SliceState(const v1::Slice& s) {
  if (!s.intact()) return "broken";
  if (s.subslices_size() > 0) return "carved";
  return s.free() ? "free" : "held";
}

void PrintSlices(const Context& ctx, const v1::ListSlicesResponse& response) {
  // Grouped by (accelerator type, topology), groups and slices by name.
  std::map<std::pair<std::string, std::string>, std::vector<const v1::Slice*>>
      groups;
  for (const v1::Slice& s : response.slices()) {
    groups[{s.accelerator_type(), s.topology()}].push_back(&s);
  }
  if (groups.empty()) {
    Print("no TPU slices\n");
    return;
  }
  bool first = true;
  for (auto& [key, slices] : groups) {
    std::sort(slices.begin(), slices.end(),
              [](auto* a, auto* b) { return a->name() < b->name(); });
    int free = 0;
    for (const v1::Slice* s : slices) free += s->intact() && s->free();
    const v1::Slice& any = *slices.front();
    Print(absl::StrCat(
        first ? "" : "\n", OrDash(key.first), " ", OrDash(key.second), " (",
        OrDash(any.pod_type()), ", ", any.expected_hosts(),
        " hosts per slice): ", slices.size(),
        slices.size() == 1 ? " slice, " : " slices, ", free, " free\n"));
    first = false;
    Table table({"SLICE", "STATE", "HOSTS", "PGS", "REASON"});
    for (const v1::Slice* s : slices) {
      int present = 0;
      for (const std::string& id : s->node_ids()) present += !id.empty();
      table.AddRow({s->name(), State(ctx, SliceState(*s)),
                    absl::StrCat(present, "/", s->expected_hosts()),
                    OrDash(absl::StrJoin(s->placement_group_ids(), ",")),
                    OrDash(s->reason())});
    }
    Print(table.Render(ctx.color, "  "));
    for (const v1::Slice* s : slices) {
      if (s->subslices_size() == 0) continue;
      Print(absl::StrCat("  ", s->name(), " carved: ",
                         absl::StrJoin(s->subslices(), ", "),
                         "; largest free box: ",
                         OrDash(s->largest_free_subslice()), "\n"));
    }
  }
}

std::string SelectorText(
    const google::protobuf::Map<std::string, std::string>& m) {
  std::map<std::string, std::string> sorted(m.begin(), m.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

std::string ResourcesText(const google::protobuf::Map<std::string, double>& m) {
  std::map<std::string, double> sorted(m.begin(), m.end());
  std::vector<std::string> parts;
  for (const auto& [k, v] : sorted)
    parts.push_back(absl::StrCat(k, "=", Num(v)));
  return absl::StrJoin(parts, ",");
}

void PrintPlacementGroup(const Context& ctx, const v1::PlacementGroup& pg) {
  Table head({"placement group", pg.placement_group_id()});
  head.AddRow({"state", State(ctx, v1::PlacementGroupState_Name(pg.state()))});
  if (!pg.pending_reason().empty())
    head.AddRow({"reason", pg.pending_reason()});
  if (!pg.placement_note().empty()) head.AddRow({"note", pg.placement_note()});
  head.AddRow({"job", OrDash(pg.job_id())});
  if (!pg.name().empty()) head.AddRow({"name", pg.name()});
  head.AddRow({"request id", OrDash(pg.request_id())});
  head.AddRow({"strategy", v1::PlacementStrategy_Name(pg.strategy())});
  if (pg.topology_strategy_size() > 0) {
    std::vector<std::string> levels;
    for (const v1::TopologyLevel& t : pg.topology_strategy()) {
      levels.push_back(absl::StrCat(
          t.label(), " ", v1::PlacementStrategy_Name(t.strategy()),
          t.bundles_per_domain() > 0
              ? absl::StrCat(" per ", t.bundles_per_domain(), " bundles")
              : ""));
    }
    head.AddRow({"topology", absl::StrJoin(levels, " > ")});
  }
  if (!pg.priority_class().empty() || pg.priority() != 0) {
    head.AddRow({"priority", pg.priority_class().empty()
                                 ? absl::StrCat(pg.priority())
                                 : absl::StrCat(pg.priority_class(), " (",
                                                pg.priority(), ")")});
  }
  if (pg.preemption_policy() == v1::NEVER || pg.on_preemption() == v1::REMOVE) {
    head.AddRow({"preemption",
                 absl::StrCat(v1::PreemptionPolicy_Name(pg.preemption_policy()),
                              ", when preempted ",
                              v1::OnPreemption_Name(pg.on_preemption()))});
  }
  if (pg.state() == v1::PREEMPTING) {
    head.AddRow(
        {"preempted by", absl::StrCat(pg.preempted_by(), ", leaves at ",
                                      TimeText(pg.preemption_deadline()))});
  }
  if (pg.preempting_size() > 0) {
    head.AddRow(
        {"preempting",
         absl::StrCat(absl::StrJoin(pg.preempting(), ", "), ", placed at ",
                      TimeText(pg.preemption_deadline()))});
  }
  if (!pg.compute_class().empty()) {
    // priority_index is 0-based and set only while it holds capacity; the
    // class's priorities are listed from 1 (compute-class list).
    const bool placed =
        pg.state() == v1::CREATED || pg.state() == v1::PREEMPTING;
    head.AddRow({"compute class",
                 placed
                     ? absl::StrCat(pg.compute_class(), " (placed on priority ",
                                    pg.priority_index() + 1, ")")
                     : pg.compute_class()});
  }
  if (pg.has_slice()) {
    head.AddRow(
        {"slice shape",
         absl::StrCat(pg.slice().accelerator_type(), " ", pg.slice().topology(),
                      " x", std::max(1, pg.slice().num_slices()))});
  }
  head.AddRow({"slices", OrDash(absl::StrJoin(pg.slice_names(), ", "))});
  head.AddRow({"created", TimeText(pg.create_time())});
  Print(head.Render(ctx.color));

  if (pg.workers_size() > 0) {
    Table workers({"RANK", "NODE", "ADDRESS", "SLICE", "TPU_WORKER_ID"});
    for (const v1::Worker& w : pg.workers()) {
      workers.AddRow(
          {absl::StrCat(w.rank()), w.node_id(), OrDash(w.address()),
           OrDash(w.slice_name()),
           w.slice_name().empty() ? "-" : absl::StrCat(w.tpu_worker_id())});
    }
    Print("\nworkers:\n");
    Print(workers.Render(ctx.color, "  "));
    for (const v1::Worker& w : pg.workers()) {
      Print(absl::StrCat("\nworker ", w.rank(), " env (", w.node_id(), "):\n"));
      std::map<std::string, std::string> env(w.env().begin(), w.env().end());
      for (const auto& [k, v] : env) Print(absl::StrCat("  ", k, "=", v, "\n"));
    }
  } else if (pg.bundles_size() > 0) {
    Table bundles({"BUNDLE", "NODE", "RESOURCES", "SELECTOR"});
    for (int i = 0; i < pg.bundles_size(); ++i) {
      const v1::Bundle& b = pg.bundles(i);
      bundles.AddRow({absl::StrCat(i), OrDash(b.node_id()),
                      OrDash(ResourcesText(b.resources())),
                      OrDash(SelectorText(b.label_selector()))});
    }
    Print("\nbundles:\n");
    Print(bundles.Render(ctx.color, "  "));
  }
}

void PrintPlacementGroups(const Context& ctx,
                          const v1::ListPlacementGroupsResponse& response) {
  Table table({"ID", "STATE", "JOB", "NAME", "STRATEGY", "BUNDLES", "SLICES",
               "REASON"});
  for (const v1::PlacementGroup& pg : response.placement_groups()) {
    table.AddRow({pg.placement_group_id(),
                  State(ctx, v1::PlacementGroupState_Name(pg.state())),
                  OrDash(pg.job_id()), OrDash(pg.name()),
                  v1::PlacementStrategy_Name(pg.strategy()),
                  absl::StrCat(pg.bundles_size()),
                  OrDash(absl::StrJoin(pg.slice_names(), ",")),
                  OrDash(pg.pending_reason())});
  }
  if (table.empty()) {
    Print("no placement groups\n");
    return;
  }
  Print(table.Render(ctx.color));
}

void PrintExplain(const Context& ctx,
                  const v1::ExplainPlacementGroupResponse& r) {
  Table head({"outcome", r.outcome()});
  head.AddRow({"summary", OrDash(r.summary())});
  Print(head.Render(ctx.color));
  for (const std::string& d : r.details()) Print(absl::StrCat("  - ", d, "\n"));
  if (r.bundles_size() > 0) {
    Table bundles({"BUNDLE", "NODE"});
    for (int i = 0; i < r.bundles_size(); ++i) {
      bundles.AddRow({absl::StrCat(i), OrDash(r.bundles(i).node_id())});
    }
    Print("placement:\n");
    Print(bundles.Render(ctx.color, "  "));
  }
}

void PrintComputeClasses(const Context& ctx,
                         const v1::ListComputeClassesResponse& response) {
  Table table({"NAME", "WHEN_UNSATISFIABLE", "PRIORITIES"});
  for (const v1::ComputeClass& c : response.compute_classes()) {
    std::vector<std::string> priorities;
    for (int i = 0; i < c.priorities_size(); ++i) {
      priorities.push_back(absl::StrCat(
          i + 1, ". ", OrDash(SelectorText(c.priorities(i).label_selector()))));
    }
    table.AddRow({c.name(),
                  c.when_unsatisfiable() == v1::FAIL ? "FAIL" : "WAIT",
                  absl::StrJoin(priorities, "  ")});
  }
  if (table.empty()) {
    Print("no compute classes\n");
    return;
  }
  Print(table.Render(ctx.color));
}

void PrintSummary(const Context& ctx, const v1::GetClusterSummaryResponse& r) {
  std::map<std::string, int64_t> by_state(r.nodes_by_state().begin(),
                                          r.nodes_by_state().end());
  std::vector<std::string> states;
  for (const auto& [k, v] : by_state) states.push_back(absl::StrCat(k, " ", v));
  Table head({"nodes", OrDash(absl::StrJoin(states, ", "))});
  head.AddRow(
      {"pending placement groups", absl::StrCat(r.pending_placement_groups())});
  if (r.pending_shapes_size() > 0) {
    head.AddRow({"pending shapes", absl::StrJoin(r.pending_shapes(), ", ")});
  }
  head.AddRow({"fragmentation", Num(r.fragmentation())});
  std::vector<std::string> carvable;
  for (const v1::FreeSubslices& f : r.free_subslices()) {
    if (f.free() == 0) continue;
    carvable.push_back(
        absl::StrCat(f.accelerator_type(), " ", f.topology(), " x", f.free()));
  }
  if (!carvable.empty()) {
    head.AddRow({"free sub-slices", absl::StrJoin(carvable, ", ")});
    head.AddRow(
        {"sub-slice fragmentation", Num(r.subslice_fragmentation())});
  }
  Print(head.Render(ctx.color));
  Table table(
      {"ACCELERATOR", "TOPOLOGY", "TIER", "ZONE", "FREE_SLICES", "FREE_CHIPS"});
  for (const v1::FreeCapacity& f : r.free()) {
    table.AddRow({OrDash(f.accelerator_type()), OrDash(f.topology()),
                  OrDash(f.tier()), OrDash(f.zone()),
                  absl::StrCat(f.free_slices(), "/", f.total_slices()),
                  absl::StrCat(f.free_chips())});
  }
  if (!table.empty()) Print(absl::StrCat("\n", table.Render(ctx.color)));
}

}  // namespace sliced::slicectl
