// slicectl: the sliced command line. Every command is one SlicedClient call
// (or a watch) plus its human output; --json prints the API's JSON instead.
// Flags are parsed here (client/slicectl_cli.h); see `slicectl --help` and
// docs/clients.md. Single-threaded.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/quote.h"
#include "client/slicectl_cli.h"
#include "client/slicectl_interrupt.h"
#include "client/slicectl_outcome.h"
#include "client/slicectl_print.h"
#include "client/sliced_client.h"
#include "google/protobuf/util/json_util.h"

namespace sliced::slicectl {
namespace {

using client::SlicedClient;
namespace v1 = ::sliced::v1;

// --------------------------------------------------------------- commands

using Handler = std::function<int(Context&, const ParsedFlags&)>;

// Result of a call: prints JSON or the human form, or maps the error.
template <typename T, typename Human>
int Output(Context& ctx, const absl::StatusOr<T>& result, Human human) {
  if (!result.ok()) return ServerError(ctx, result.status());
  if (ctx.json) {
    PrintJson(*result);
  } else {
    human(*result);
  }
  return kExitOk;
}

int Done(Context& ctx, const absl::Status& status, const std::string& human) {
  if (!status.ok()) return ServerError(ctx, status);
  Print(ctx.json ? "{}\n" : human + "\n");
  return kExitOk;
}

int CmdNodes(Context& ctx, const ParsedFlags& flags) {
  auto selector = ParseKeyValues("selector", flags.GetAll("selector"));
  if (!selector.ok()) return Usage(selector.status().message());
  v1::ListNodesRequest request;
  request.mutable_label_selector()->insert(selector->begin(), selector->end());
  return Output(
      ctx, ctx.client->ListAllNodes(request),
      [&](const v1::ListNodesResponse& r) { PrintNodes(ctx, r.nodes()); });
}

int CmdNodeGet(Context& ctx, const ParsedFlags& flags) {
  return Output(ctx, ctx.client->GetNode(flags.args[0]),
                [&](const v1::Node& n) { PrintNode(ctx, n); });
}

int CmdNodeDrain(Context& ctx, const ParsedFlags& flags) {
  return Output(
      ctx, ctx.client->DrainNode(flags.args[0]), [&](const v1::Node& n) {
        Print(absl::StrCat(
            "node ", n.node_id(), " is ", v1::NodeState_Name(n.state()),
            n.state() == v1::DEAD
                ? "; it comes back DRAINING\n"
                : ": it keeps its placements and takes no new ones\n"));
      });
}

int CmdNodeUndrain(Context& ctx, const ParsedFlags& flags) {
  return Output(
      ctx, ctx.client->UndrainNode(flags.args[0]), [&](const v1::Node& n) {
        Print(absl::StrCat(
            "node ", n.node_id(), " is ", v1::NodeState_Name(n.state()),
            n.state() == v1::DEAD ? "; it comes back ALIVE\n"
                                  : ": it takes new placements again\n"));
      });
}

int CmdNodeRemove(Context& ctx, const ParsedFlags& flags) {
  return Done(ctx, ctx.client->RemoveNode(flags.args[0], flags.Has("force")),
              absl::StrCat("removed node ", flags.args[0]));
}

int CmdRegister(Context& ctx, const ParsedFlags& flags) {
  v1::RegisterNodesRequest request;
  if (absl::Status s = ReadJsonFile(flags.Get("file"), &request); !s.ok()) {
    return Usage(s.message());
  }
  return Output(
      ctx, ctx.client->RegisterNodes(request),
      [&](const v1::RegisterNodesResponse& r) {
        Print(absl::StrCat("registered ", r.nodes_size(), " nodes\n"));
        PrintNodes(ctx, r.nodes());
      });
}

int CmdSlices(Context& ctx, const ParsedFlags&) {
  return Output(ctx, ctx.client->ListSlices(),
                [&](const v1::ListSlicesResponse& r) { PrintSlices(ctx, r); });
}

int CmdSubmit(Context& ctx, const ParsedFlags& flags) {
  v1::SubmitScalingConfigRequest request;
  v1::ScalingConfig* config = request.mutable_scaling_config();
  if (!flags.Has("num-workers")) {
    return Usage(
        "submit: --num-workers N is required (see: slicectl submit --help)");
  }
  auto workers = ParseIntFlag("num-workers", flags.Get("num-workers"));
  if (!workers.ok()) return Usage(workers.status().message());
  auto resources = ParseResources("resources-per-worker",
                                  flags.GetAll("resources-per-worker"));
  if (!resources.ok()) return Usage(resources.status().message());
  auto selector =
      ParseKeyValues("label-selector", flags.GetAll("label-selector"));
  if (!selector.ok()) return Usage(selector.status().message());
  if (absl::Status s = CheckWaitFlags(flags); !s.ok())
    return Usage(s.message());
  int priority = 0;
  if (flags.Has("priority")) {
    auto p = ParseIntFlag("priority", flags.Get("priority"));
    if (!p.ok()) return Usage(p.status().message());
    priority = *p;
  }
  if (flags.Has("tpu-resource-per-chip")) {
    auto per_chip = ParseIntFlag("tpu-resource-per-chip",
                                 flags.Get("tpu-resource-per-chip"));
    if (!per_chip.ok()) return Usage(per_chip.status().message());
    config->set_tpu_resource_per_chip(*per_chip);
  }
  if (flags.Has("allow-subslice") && flags.Has("no-subslice")) {
    return Usage("submit: --allow-subslice and --no-subslice contradict");
  }
  if (flags.Has("allow-subslice")) config->set_allow_subslice(true);
  if (flags.Has("no-subslice")) config->set_allow_subslice(false);
  config->set_num_workers(*workers);
  config->set_use_tpu(flags.Has("use-tpu"));
  config->set_use_gpu(flags.Has("use-gpu"));
  config->set_topology(flags.Get("topology"));
  config->set_accelerator_type(flags.Get("accelerator-type"));
  config->set_placement_strategy(flags.Get("placement-strategy"));
  config->mutable_resources_per_worker()->insert(resources->begin(),
                                                 resources->end());
  config->mutable_label_selector()->insert(selector->begin(), selector->end());
  request.set_job_id(flags.Get("job-id"));
  request.set_name(flags.Get("name"));
  // Generated here, not by the client library, so that an unknown outcome
  // can name it.
  request.set_request_id(flags.Get("request-id").empty()
                             ? client::NewRequestId()
                             : flags.Get("request-id"));
  request.set_compute_class(flags.Get("compute-class"));
  request.set_priority(priority);
  request.set_priority_class(flags.Get("priority-class"));
  if (flags.Has("preemption-policy")) {
    v1::PreemptionPolicy policy;
    if (!v1::PreemptionPolicy_Parse(flags.Get("preemption-policy"), &policy) ||
        policy == v1::PREEMPTION_POLICY_UNSPECIFIED) {
      return Usage(absl::StrCat(
          "--preemption-policy: PREEMPT_LOWER_PRIORITY or NEVER, got \"",
          flags.Get("preemption-policy"), "\""));
    }
    request.set_preemption_policy(policy);
  }
  if (flags.Has("on-preemption")) {
    v1::OnPreemption on;
    if (!v1::OnPreemption_Parse(flags.Get("on-preemption"), &on) ||
        on == v1::ON_PREEMPTION_UNSPECIFIED) {
      return Usage(absl::StrCat("--on-preemption: REQUEUE or REMOVE, got \"",
                                flags.Get("on-preemption"), "\""));
    }
    request.set_on_preemption(on);
  }
  return PlacementResult(ctx, flags, request.request_id(), [&] {
    return ctx.client->SubmitScalingConfig(request);
  });
}

int CmdPgCreate(Context& ctx, const ParsedFlags& flags) {
  v1::CreatePlacementGroupRequest request;
  if (absl::Status s = ReadJsonFile(flags.Get("file"), &request); !s.ok()) {
    return Usage(s.message());
  }
  if (absl::Status s = CheckWaitFlags(flags); !s.ok())
    return Usage(s.message());
  if (request.request_id().empty()) {
    request.set_request_id(client::NewRequestId());
  }
  return PlacementResult(ctx, flags, request.request_id(), [&] {
    return ctx.client->CreatePlacementGroup(request);
  });
}

int CmdPgList(Context& ctx, const ParsedFlags& flags) {
  v1::ListPlacementGroupsRequest request;
  request.set_job_id(flags.Get("job"));
  if (flags.Has("state")) {
    v1::PlacementGroupState state;
    if (!v1::PlacementGroupState_Parse(
            absl::AsciiStrToUpper(flags.Get("state")), &state) ||
        state == v1::PLACEMENT_GROUP_STATE_UNSPECIFIED) {
      return Usage(absl::StrCat(
          "--state: want PENDING, CREATED, RESCHEDULING, PREEMPTING or "
          "INFEASIBLE, got ",
          Quote(flags.Get("state"))));
    }
    if (state == v1::REMOVED) {
      return Usage(
          "--state: REMOVED groups are not kept (slicectl watch shows "
          "removals as they happen)");
    }
    request.set_state(state);
  }
  return Output(ctx, ctx.client->ListAllPlacementGroups(request),
                [&](const v1::ListPlacementGroupsResponse& r) {
                  PrintPlacementGroups(ctx, r);
                });
}

int CmdPgGet(Context& ctx, const ParsedFlags& flags) {
  return Output(
      ctx, ctx.client->GetPlacementGroup(flags.args[0]),
      [&](const v1::PlacementGroup& pg) { PrintPlacementGroup(ctx, pg); });
}

int CmdPgExplain(Context& ctx, const ParsedFlags& flags) {
  v1::ExplainPlacementGroupRequest request;
  request.set_placement_group_id(flags.args[0]);
  return Output(ctx, ctx.client->ExplainPlacementGroup(request),
                [&](const v1::ExplainPlacementGroupResponse& r) {
                  PrintExplain(ctx, r);
                });
}

int CmdPgRemove(Context& ctx, const ParsedFlags& flags) {
  return Done(ctx, ctx.client->RemovePlacementGroup(flags.args[0]),
              absl::StrCat("removed placement group ", flags.args[0]));
}

int CmdWatch(Context& ctx, const ParsedFlags& flags) {
  v1::WatchPlacementGroupsRequest request;
  request.set_job_id(flags.Get("job"));
  request.set_placement_group_id(flags.Get("pg"));
  int count = 0;
  if (flags.Has("count")) {
    auto n = ParseIntFlag("count", flags.Get("count"));
    if (!n.ok() || *n < 1) return Usage("--count: want an integer >= 1");
    count = *n;
  }
  absl::Duration duration = absl::InfiniteDuration();
  if (flags.Has("duration")) {
    auto d = ParseDurationFlag("duration", flags.Get("duration"));
    if (!d.ok()) return Usage(d.status().message());
    duration = *d;
  }
  int seen = 0;
  bool delivered = false;
  absl::Status status = ctx.client->WatchPlacementGroups(
      request, duration, [&](const v1::PlacementGroupEvent& event) {
        delivered = true;
        const v1::PlacementGroup& pg = event.placement_group();
        if (ctx.json) {
          PrintJson(event, /*pretty=*/false);
        } else {
          std::string state = v1::PlacementGroupState_Name(pg.state());
          Print(absl::StrCat(
              absl::FormatTime("%H:%M:%S", absl::Now(), absl::UTCTimeZone()),
              "  ", pg.placement_group_id(), "  ", Colored(ctx, state),
              "  job=", OrDash(pg.job_id()),
              pg.slice_names_size()
                  ? absl::StrCat("  slices=",
                                 absl::StrJoin(pg.slice_names(), ","))
                  : "",
              pg.pending_reason().empty() ? "" : "  " + pg.pending_reason(),
              "\n"));
        }
        std::fflush(stdout);
        // A removed group has no more events: --pg ends there.
        if (flags.Has("pg") && pg.state() == v1::REMOVED) return false;
        return count == 0 || ++seen < count;
      });
  // --duration ending the watch is the normal way out, once the daemon is
  // known to answer: a silent watch is also what a daemon that never
  // answered (or a --pg that does not exist) looks like, so one read with
  // the watch's filter tells them apart.
  if (status.code() == absl::StatusCode::kDeadlineExceeded &&
      flags.Has("duration")) {
    if (delivered) return kExitOk;
    absl::Status answered;
    if (flags.Has("pg")) {
      answered = ctx.client->GetPlacementGroup(flags.Get("pg")).status();
    } else {
      v1::ListPlacementGroupsRequest list;
      list.set_job_id(request.job_id());
      list.set_page_size(1);
      answered = ctx.client->ListPlacementGroups(list).status();
    }
    if (!answered.ok()) return ServerError(ctx, answered);
    return kExitOk;
  }
  if (!status.ok()) return ServerError(ctx, status);
  return kExitOk;
}

int CmdComputeClassPut(Context& ctx, const ParsedFlags& flags) {
  // Either a PutComputeClassRequest ({"compute_class": {...}}, the examples/
  // format) or a bare ComputeClass.
  // Read once: stdin ("-") can't be read again for the second form.
  const std::string path = flags.Get("file");
  absl::StatusOr<std::string> text = ReadInput(path);
  if (!text.ok()) return Usage(std::string(text.status().message()));
  v1::PutComputeClassRequest request;
  absl::Status as_request = ParseJson(*text, path, &request);
  if (!as_request.ok() || !request.has_compute_class()) {
    v1::ComputeClass bare;
    if (ParseJson(*text, path, &bare).ok() && !bare.name().empty()) {
      *request.mutable_compute_class() = bare;
    } else {
      return Usage(as_request.ok()
                       ? absl::StrCat(flags.Get("file"),
                                      ": no \"compute_class\" in it (want "
                                      "{\"compute_class\": {\"name\": ...}})")
                       : std::string(as_request.message()));
    }
  }
  return Output(
      ctx, ctx.client->PutComputeClass(request),
      [&](const v1::ComputeClass& c) {
        Print(absl::StrCat("compute class ", c.name(), ": ",
                           c.priorities_size(), " priorities, ",
                           c.when_unsatisfiable() == v1::FAIL ? "FAIL" : "WAIT",
                           " when unsatisfiable\n"));
      });
}

int CmdComputeClassList(Context& ctx, const ParsedFlags&) {
  return Output(ctx, ctx.client->ListComputeClasses(),
                [&](const v1::ListComputeClassesResponse& r) {
                  PrintComputeClasses(ctx, r);
                });
}

int CmdComputeClassDelete(Context& ctx, const ParsedFlags& flags) {
  return Done(ctx, ctx.client->DeleteComputeClass(flags.args[0]),
              absl::StrCat("deleted compute class ", flags.args[0]));
}

int CmdSummary(Context& ctx, const ParsedFlags&) {
  return Output(
      ctx, ctx.client->GetClusterSummary(),
      [&](const v1::GetClusterSummaryResponse& r) { PrintSummary(ctx, r); });
}

// ------------------------------------------------------------ the table

struct Command {
  CommandSpec spec;
  Handler handler;
};

const FlagSpec kFileFlag{"file", "FILE", "JSON file to read (- for stdin)",
                         false, 'f'};
const FlagSpec kWaitFlag{"wait", "",
                         "watch until CREATED (exit 0) or INFEASIBLE (exit 3)"};
const FlagSpec kWaitTimeoutFlag{
    "wait-timeout", "D",
    "give up waiting after D (e.g. 5m; exit 5; default: never); the group is "
    "removed unless --keep"};
const FlagSpec kKeepFlag{
    "keep", "", "keep the group when --wait gives up (--wait-timeout, Ctrl-C)"};

std::vector<FlagSpec> GlobalFlags() {
  return {
      {"server", "HOST:PORT",
       "the daemon (default $SLICED_SERVER, else 127.0.0.1:50051)"},
      {"json", "", "print the API's JSON instead of tables"},
      {"timeout", "D", "deadline of each call, retries included (default 10s)"},
      {"tls-ca", "FILE", "PEM root CA: use TLS"},
      {"tls-cert", "FILE",
       "PEM client certificate (mutual TLS; with --tls-key)"},
      {"tls-key", "FILE", "PEM client key (mutual TLS; with --tls-cert)"},
      {"token-file", "FILE",
       "file holding a bearer token (default: $SLICED_TOKEN, else none)"},
  };
}

// A command spec; `args` names at most one positional argument.
CommandSpec Cmd(std::string name, std::string args, std::string summary,
                std::string details = "", std::vector<FlagSpec> flags = {}) {
  CommandSpec spec;
  spec.num_args = args.empty() ? 0 : 1;
  spec.name = std::move(name);
  spec.args = std::move(args);
  spec.summary = std::move(summary);
  spec.details = std::move(details);
  spec.flags = std::move(flags);
  return spec;
}

// Inventory commands: nodes, slices, registration.
std::vector<Command> InventoryCommands() {
  return {
      {Cmd("nodes", "",
           "List nodes, optionally filtered by a Ray label selector.",
           "Selector values: v, !v, in(a,b), !in(a,b); entries are ANDed, "
           "e.g.\n"
           "  slicectl nodes --selector ray.io/accelerator-type=TPU-V6E "
           "--selector 'sliced.io/capacity-tier=!spot'",
           {{"selector", "K=V", "label selector entry", true}}),
       CmdNodes},
      {Cmd("node get", "ID",
           "Show one node: state, labels, resources, placements."),
       CmdNodeGet},
      {Cmd("node drain", "ID",
           "Drain a node: it keeps its placements and takes no new ones.",
           "A DEAD node stays DEAD and comes back DRAINING."),
       CmdNodeDrain},
      {Cmd("node undrain", "ID",
           "Undrain a node: it takes new placements again.",
           "A no-op on an ALIVE node. A DEAD node stays DEAD and comes back "
           "ALIVE (it no longer drains when back)."),
       CmdNodeUndrain},
      {Cmd("node remove", "ID", "Remove a node from the inventory.",
           "Refused (exit 3) while it holds placement groups, unless --force.",
           {{"force", "",
             "remove even if it holds placements (they are lost)"}}),
       CmdNodeRemove},
      {Cmd("register", "",
           "Register (upsert) nodes from a JSON file (examples/fleet.json).",
           "The format of examples/fleet.json: {\"nodes\": [{\"node_id\": ..., "
           "\"address\": ..., \"labels\": {...}, \"resources\": {...}}]}",
           {kFileFlag}),
       CmdRegister},
      {Cmd("slices", "",
           "List TPU slices by type and topology: free, held or broken (why)."),
       CmdSlices},
  };
}

// Placement commands, compute classes and the summary.
std::vector<Command> PlacementCommands() {
  return {
      {Cmd("submit", "",
           "Submit a JaxTrainer-style ScalingConfig (Ray Train's names).",
           "Example (the JaxTrainer snippet: one v6e 4x4 slice, 4 workers):\n"
           "  slicectl submit --num-workers 4 --use-tpu --topology 4x4 "
           "--accelerator-type TPU-V6E --placement-strategy SPREAD --wait\n"
           "The server validates with Ray's rules; a rejected config exits 3 "
           "with Ray's message.",
           {{"num-workers", "N",
             "number of workers (TPU: one per host unless "
             "--resources-per-worker TPU=k asks fewer chips)"},
            {"use-tpu", "", "workers use TPUs"},
            {"use-gpu", "", "workers use GPUs"},
            {"topology", "T", "TPU topology, e.g. 4x4 or 2x2x2"},
            {"accelerator-type", "A", "e.g. TPU-V6E, v6e, TPU-V4"},
            {"placement-strategy", "S",
             "PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"},
            {"resources-per-worker", "K=V", "resources per worker, e.g. CPU=8",
             true},
            {"label-selector", "K=V", "Ray label selector entry", true},
            {"compute-class", "C", "compute class to place by"},
            {"job-id", "J", "Ray job id"},
            {"name", "NAME", "placement group name"},
            {"request-id", "R", "idempotency key (default: generated)"},
            {"priority", "P", "higher is scheduled first"},
            {"priority-class", "C",
             "a priority class of the daemon (e.g. production, batch, "
             "best-effort); sets the priority"},
            {"preemption-policy", "P",
             "PREEMPT_LOWER_PRIORITY (default: may preempt groups of lower "
             "priority) or NEVER (waits)"},
            {"on-preemption", "O",
             "when preempted itself: REQUEUE (default) or REMOVE"},
            {"allow-subslice", "",
             "may carve each slice out of a larger intact slice (default: "
             "only when no slice of the exact shape exists)"},
            {"no-subslice", "", "whole slices of the exact shape only"},
            {"tpu-resource-per-chip", "K",
             "TPU devices per chip (default 1; 2 on v7x)"},
            kWaitFlag,
            kWaitTimeoutFlag,
            kKeepFlag}),
       CmdSubmit},
      {Cmd("pg create", "",
           "Create a placement group from a CreatePlacementGroupRequest JSON "
           "file.",
           "e.g. {\"bundles\": [{\"resources\": {\"CPU\": 4}}], \"strategy\": "
           "\"SPREAD\", \"job_id\": \"job-1\"}",
           {kFileFlag, kWaitFlag, kWaitTimeoutFlag, kKeepFlag}),
       CmdPgCreate},
      {Cmd("pg list", "", "List placement groups.", "",
           {{"job", "J", "only this job's"},
            {"state", "S", "only in this state (PENDING, CREATED, ...)"}}),
       CmdPgList},
      {Cmd("pg get", "ID",
           "Show a placement group, its workers and their env."),
       CmdPgGet},
      {Cmd("pg explain", "ID",
           "Explain why a placement group is pending (or placed)."),
       CmdPgExplain},
      {Cmd("pg remove", "ID",
           "Remove a placement group, releasing its capacity."),
       CmdPgRemove},
      {Cmd("watch", "",
           "Stream placement-group changes (current state first) until Ctrl-C.",
           "With --json, one PlacementGroupEvent JSON object per line.",
           {{"job", "J", "only this job's groups"},
            {"pg", "ID", "only this group"},
            {"count", "N", "stop after N events"},
            {"duration", "D", "stop after D (e.g. 30s)"}}),
       CmdWatch},
      {Cmd("compute-class put", "",
           "Create or replace a compute class from a JSON file.",
           "A PutComputeClassRequest (examples/cost-optimized.json) or a bare "
           "ComputeClass.",
           {kFileFlag}),
       CmdComputeClassPut},
      {Cmd("compute-class list", "",
           "List compute classes and their priorities."),
       CmdComputeClassList},
      {Cmd("compute-class delete", "NAME", "Delete a compute class.",
           "Refused (exit 3) while a placement group uses it."),
       CmdComputeClassDelete},
      {Cmd("summary", "",
           "Free chips and slices per type/topology/tier/zone, pending demand.",
           "Uses Telemetry.GetClusterSummary."),
       CmdSummary},
  };
}

// Every command, in help order.
std::vector<Command> Commands() {
  std::vector<Command> commands = InventoryCommands();
  for (Command& c : PlacementCommands()) commands.push_back(std::move(c));
  return commands;
}

// "  name ARGS  summary" lines, aligned, for the commands whose name starts
// with `prefix`.
std::string CommandList(const std::vector<Command>& commands,
                        absl::string_view prefix) {
  Table table({"", ""});
  for (const Command& c : commands) {
    if (!absl::StartsWith(c.spec.name, prefix)) continue;
    table.AddRow(
        {absl::StrCat(c.spec.name, c.spec.args.empty() ? "" : " ", c.spec.args),
         c.spec.summary});
  }
  std::string out = table.Render(/*color=*/false, "  ");
  return out.substr(out.find('\n') + 1);  // without the empty header
}

std::string MainHelp(const std::vector<Command>& commands,
                     const std::vector<FlagSpec>& globals) {
  CommandSpec none;
  std::string globals_help = CommandHelp(none, globals);
  return absl::StrCat(
      "slicectl: the sliced command line (TPU placement for Ray clusters).\n\n"
      "Usage: slicectl [global flags] COMMAND [flags] [args]\n\nCommands:\n",
      CommandList(commands, ""),
      globals_help.substr(globals_help.find("\nGlobal flags:")),
      "\nRun `slicectl COMMAND --help` for a command's flags.\n"
      "Exit codes: 0 ok, 2 usage, 3 rejected by the server, 4 server "
      "unreachable, 5 --wait timed out.\n");
}

// `slicectl help [COMMAND...]` == `slicectl [COMMAND...] --help`.
std::vector<std::string> RewriteHelp(std::vector<std::string> args,
                                     const std::vector<FlagSpec>& globals) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].empty() || args[i][0] != '-') {
      if (args[i] == "help") {
        args.erase(args.begin() + i);
        args.push_back("--help");
      }
      break;
    }
    for (const FlagSpec& g : globals) {
      if (args[i] == "--" + g.name && !g.value_name.empty()) ++i;  // its value
    }
  }
  return args;
}

// No command matched: help, a group's commands, or a usage error.
int NoCommand(const std::vector<Command>& commands,
              const std::vector<FlagSpec>& globals,
              const std::vector<std::string>& args, const CommandMatch& match) {
  bool help = false;
  for (const std::string& a : args) help |= a == "--help" || a == "-h";
  // A group word alone ("pg"): list its commands.
  std::string group_help;
  if (!match.unknown.empty()) {
    group_help = CommandList(commands, match.unknown + " ");
  }
  if (!group_help.empty()) {
    if (help) {
      Print(absl::StrCat("Commands:\n", group_help));
      return kExitOk;
    }
    return Usage(absl::StrCat("'", match.unknown, "' needs a subcommand:\n",
                              group_help));
  }
  if (help && match.unknown.empty()) {
    Print(MainHelp(commands, globals));
    return kExitOk;
  }
  if (match.unknown.empty()) {
    std::fputs(MainHelp(commands, globals).c_str(), stderr);
    return kExitUsage;
  }
  return Usage(absl::StrCat("unknown command '", match.unknown,
                            "' (see: slicectl --help)"));
}

// The bearer token: --token-file, else $SLICED_TOKEN, else none.
absl::StatusOr<std::string> BearerToken(const ParsedFlags& flags) {
  if (!flags.Has("token-file")) {
    const char* token = std::getenv("SLICED_TOKEN");
    return token ? std::string(absl::StripAsciiWhitespace(token)) : "";
  }
  std::ifstream in(flags.Get("token-file"));
  std::stringstream token;
  if (!in || !(token << in.rdbuf())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token-file: cannot read \"", flags.Get("token-file"), "\""));
  }
  std::string out(absl::StripAsciiWhitespace(token.str()));
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token-file: \"", flags.Get("token-file"), "\" is empty"));
  }
  return out;
}

// The context of a command from the global flags and the environment.
absl::StatusOr<Context> MakeContext(const ParsedFlags& flags) {
  Context ctx;
  const char* env_server = std::getenv("SLICED_SERVER");
  ctx.server = flags.Get(
      "server", env_server && *env_server ? env_server : "127.0.0.1:50051");
  ctx.json = flags.Has("json");
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  ctx.color = isatty(STDOUT_FILENO) && !(no_color && *no_color) &&
              !(term && absl::string_view(term) == "dumb");
  client::ClientOptions options;
  options.server = ctx.server;
  if (flags.Has("timeout")) {
    auto timeout = ParseDurationFlag("timeout", flags.Get("timeout"));
    if (!timeout.ok()) return timeout.status();
    if (*timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--timeout: must be > 0");
    }
    options.timeout = *timeout;
  }
  options.root_ca_pem = flags.Get("tls-ca");
  options.client_cert_pem = flags.Get("tls-cert");
  options.client_key_pem = flags.Get("tls-key");
  auto token = BearerToken(flags);
  if (!token.ok()) return token.status();
  options.bearer_token = *std::move(token);
  auto client = SlicedClient::Create(options);
  if (!client.ok()) return client.status();
  ctx.client = *std::move(client);
  return ctx;
}

int Run(const std::vector<std::string>& argv) {
  const std::vector<Command> commands = Commands();
  const std::vector<FlagSpec> globals = GlobalFlags();
  std::vector<CommandSpec> specs;
  for (const Command& c : commands) specs.push_back(c.spec);
  const std::vector<std::string> args = RewriteHelp(argv, globals);
  CommandMatch match = MatchCommand(specs, globals, args);
  if (match.index < 0) return NoCommand(commands, globals, args, match);
  const Command& command = commands[match.index];
  absl::StatusOr<ParsedFlags> flags =
      ParseFlags(command.spec, globals, match.rest);
  if (!flags.ok()) return Usage(flags.status().message());
  if (flags->Has("help")) {
    Print(CommandHelp(command.spec, globals));
    return kExitOk;
  }
  absl::StatusOr<Context> ctx = MakeContext(*flags);
  if (!ctx.ok()) return Usage(ctx.status().message());
  return command.handler(*ctx, *flags);
}

}  // namespace
}  // namespace sliced::slicectl

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return sliced::slicectl::Run(args);
}
