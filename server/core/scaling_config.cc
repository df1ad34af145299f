#include "server/core/scaling_config.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "scheduler/labels.h"
#include "scheduler/slices.h"
#include "scheduler/types.h"
#include "server/core/validation.h"

namespace sliced::server {
namespace {

using scheduler::ResourceSet;
using scheduler::Strategy;

constexpr absl::string_view kStrategies =
    "PACK, SPREAD, STRICT_PACK, STRICT_SPREAD";

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("scaling_config.", field, ": ", message));
}

// Puts "scaling_config.<field>: " in front of an error from a helper that
// does not know which field it checked.
absl::Status Prefixed(absl::string_view field, const absl::Status& status) {
  if (status.ok()) return status;
  return Invalid(field, status.message());
}

int64_t Amount(const ResourceSet& resources, absl::string_view name) {
  auto it = resources.find(name);
  return it == resources.end() ? 0 : it->second;
}

// Ray's placement-group strategy names, exactly as Ray spells them.
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name, bool use_tpu) {
  if (name.empty()) return use_tpu ? Strategy::kSpread : Strategy::kPack;
  if (name == "PACK") return Strategy::kPack;
  if (name == "SPREAD") return Strategy::kSpread;
  if (name == "STRICT_PACK") return Strategy::kStrictPack;
  if (name == "STRICT_SPREAD") return Strategy::kStrictSpread;
  return Invalid("placement_strategy",
                 absl::StrCat("invalid placement group strategy ", Quote(name),
                              "; supported strategies are ", kStrategies));
}

// resources_per_worker as given, without zero amounts (Ray drops them too);
// `given` is false when the map is empty (the defaults apply).
struct GivenResources {
  bool given = false;
  ResourceSet resources;
};

absl::StatusOr<GivenResources> ConvertResources(const ScalingConfig& config,
                                                const Limits& limits) {
  GivenResources out;
  if (config.resources_per_worker.empty()) return out;
  out.given = true;
  ASSIGN_OR_RETURN(
      out.resources,
      ResourcesFromWire(config.resources_per_worker,
                        "scaling_config.resources_per_worker", limits));
  erase_if(out.resources, [](const auto& entry) { return entry.second == 0; });
  if (out.resources.empty()) {
    return Invalid("resources_per_worker",
                   "every amount is 0; ask for at least one resource or leave "
                   "`resources_per_worker` unset for the default");
  }
  return out;
}

absl::StatusOr<scheduler::LabelSelector> ConvertSelector(
    const ScalingConfig& config, const Limits& limits,
    absl::btree_map<std::string, std::string> extra) {
  if (static_cast<int>(config.label_selector.size()) >
      limits.max_labels_per_node) {
    return Invalid(
        "label_selector",
        absl::StrCat("at most ", limits.max_labels_per_node, " entries, got ",
                     static_cast<int>(config.label_selector.size())));
  }
  absl::btree_map<std::string, std::string> selector(
      config.label_selector.begin(), config.label_selector.end());
  auto parsed = scheduler::ParseLabelSelector(selector);  // as given
  if (parsed.ok() && !extra.empty()) {
    // A derived term is one value, which the caller's term on its key must
    // admit (CheckAcceleratorTerm): it is the two's intersection, so it
    // replaces the caller's.
    for (auto& [key, value] : extra) selector[key] = std::move(value);
    parsed = scheduler::ParseLabelSelector(selector);
  }
  if (!parsed.ok()) return Prefixed("label_selector", parsed.status());
  return *std::move(parsed);
}

// The checks every config goes through, in Ray's order.
absl::Status CheckCommon(const ScalingConfig& config,
                         const GivenResources& given) {
  // Checked whatever use_tpu says: it is stored and echoed back.
  if (config.tpu_resource_per_chip < 0) {
    return Invalid("tpu_resource_per_chip",
                   "`tpu_resource_per_chip` must be a positive integer.");
  }
  if (config.num_workers < 1) {
    return Invalid(
        "num_workers",
        absl::StrCat("must be at least 1, got ", config.num_workers,
                     config.num_workers == 0
                         ? " (Ray's local mode, num_workers=0, runs in the "
                           "driver and has nothing to place)"
                         : ""));
  }
  if (config.num_workers > kMaxScalingConfigWorkers) {
    return Invalid("num_workers",
                   absl::StrCat("at most ", kMaxScalingConfigWorkers,
                                " workers, got ", config.num_workers));
  }
  if (config.use_gpu && config.use_tpu) {
    return Invalid("use_tpu",
                   "Cannot specify both `use_gpu=True` and `use_tpu=True`.");
  }
  if (!config.use_gpu && Amount(given.resources, "GPU") > 0) {
    return Invalid("resources_per_worker",
                   "`use_gpu` is False but `GPU` was found in "
                   "`resources_per_worker`. Either set `use_gpu` to True or "
                   "remove `GPU` from `resources_per_worker`.");
  }
  if (!config.use_tpu) {
    if (Amount(given.resources, scheduler::kResourceTpu) > 0) {
      return Invalid("resources_per_worker",
                     "`use_tpu` is False but `TPU` was found in "
                     "`resources_per_worker`. Either set `use_tpu` to True or "
                     "remove `TPU` from `resources_per_worker`.");
    }
    if (!config.topology.empty()) {
      return Invalid("topology",
                     absl::StrCat(Quote(config.topology),
                                  " is given but `use_tpu` is False; a TPU "
                                  "topology needs `use_tpu=True`"));
    }
    if (!config.accelerator_type.empty()) {
      return Invalid("accelerator_type",
                     absl::StrCat(Quote(config.accelerator_type),
                                  " is given but `use_tpu` is False; sliced "
                                  "places accelerators by type only for TPUs "
                                  "(set `use_tpu=True`, or select nodes with "
                                  "`label_selector`)"));
    }
  } else if (given.given &&
             Amount(given.resources, scheduler::kResourceTpu) == 0) {
    return Invalid("resources_per_worker",
                   "`use_tpu` is True but `TPU` is set to 0 in "
                   "`resources_per_worker`. Either set `use_tpu` to False or "
                   "request a positive number of `TPU` in "
                   "`resources_per_worker`.");
  }
  return absl::OkStatus();
}

absl::StatusOr<ScalingConfigPlan> PlanGeneric(const ScalingConfig& config,
                                              const Limits& limits,
                                              GivenResources given) {
  ScalingConfigPlan plan;
  plan.num_workers = config.num_workers;
  ASSIGN_OR_RETURN(plan.request.strategy,
                   ParseStrategy(config.placement_strategy, false));
  ResourceSet resources = std::move(given.resources);
  if (!given.given) {
    resources[config.use_gpu ? "GPU" : std::string(scheduler::kResourceCpu)] =
        scheduler::kResourceScale;
  } else if (config.use_gpu) {
    resources.emplace("GPU", scheduler::kResourceScale);
  }
  ASSIGN_OR_RETURN(scheduler::LabelSelector selector,
                   ConvertSelector(config, limits, {}));
  scheduler::Bundle bundle;
  bundle.resources = std::move(resources);
  bundle.selector = std::move(selector);
  plan.request.bundles.assign(plan.num_workers, bundle);
  return plan;
}

// The generation of a TPU config, after Ray's checks that the topology and
// accelerator type are given.
absl::StatusOr<scheduler::TpuGeneration> TpuGenerationOf(
    const ScalingConfig& config) {
  const int num_workers = config.num_workers;
  if (num_workers > 1 && config.topology.empty()) {
    return Invalid("topology",
                   "`topology` must be specified in ScalingConfig when "
                   "`use_tpu=True` and `num_workers` > 1.");
  }
  if (config.accelerator_type.empty()) {
    return Invalid(
        "accelerator_type",
        num_workers > 1
            ? "`accelerator_type` must be specified in ScalingConfig when "
              "`use_tpu=True` and `num_workers` > 1."
            : "`accelerator_type` must be specified in ScalingConfig when "
              "`use_tpu=True` (sliced picks TPU hosts by generation), e.g. "
              "\"TPU-V6E\"");
  }
  auto generation = scheduler::ParseTpuGeneration(config.accelerator_type);
  if (!generation.ok()) {
    return Prefixed("accelerator_type", generation.status());
  }
  return *generation;
}

// A label_selector term on ray.io/accelerator-type must admit the hosts of
// accelerator_type: otherwise the two ask for different TPUs.
absl::Status CheckAcceleratorTerm(const ScalingConfig& config,
                                  scheduler::TpuGeneration generation) {
  const std::string key(scheduler::kLabelAcceleratorType);
  auto it = config.label_selector.find(key);
  if (it == config.label_selector.end()) return absl::OkStatus();
  auto term = scheduler::ParseLabelSelector({{key, it->second}});
  if (!term.ok()) return absl::OkStatus();  // ConvertSelector says why
  const std::string label(scheduler::TpuAcceleratorType(generation));
  if (scheduler::Matches(*term, {{key, label}})) return absl::OkStatus();
  return Invalid(absl::StrCat("label_selector[", key, "]"),
                 absl::StrCat("\"", it->second,
                              "\" excludes the hosts of "
                              "accelerator_type ",
                              config.accelerator_type, " (labelled ", label,
                              "); drop the entry or make them agree"));
}

// One TPU worker without a topology: an ordinary bundle on a node of that
// generation.
absl::Status PlanOneTpuWorker(const ScalingConfig& config, const Limits& limits,
                              scheduler::TpuGeneration generation,
                              GivenResources given, ScalingConfigPlan& plan) {
  ResourceSet resources = std::move(given.resources);
  if (!given.given) {
    resources[std::string(scheduler::kResourceTpu)] = scheduler::kResourceScale;
  }
  // Ray's TPU accelerator takes these chip counts per task or actor
  // (validate_resource_request_quantity); anything else would never start.
  const int64_t tpu = Amount(resources, scheduler::kResourceTpu);
  if (tpu > 0 &&
      (tpu % scheduler::kResourceScale != 0 ||
       !absl::c_linear_search(std::initializer_list<int64_t>{1, 2, 4, 8},
                              tpu / scheduler::kResourceScale))) {
    return Invalid(
        absl::StrCat("resources_per_worker[\"", scheduler::kResourceTpu, "\"]"),
        absl::StrCat("must be 1, 2, 4 or 8 (whole chips, as Ray's TPU "
                     "accelerator takes), got ",
                     scheduler::FromFixedPoint(tpu)));
  }
  absl::btree_map<std::string, std::string> extra;
  extra.emplace(std::string(scheduler::kLabelAcceleratorType),
                std::string(scheduler::TpuAcceleratorType(generation)));
  ASSIGN_OR_RETURN(scheduler::LabelSelector selector,
                   ConvertSelector(config, limits, std::move(extra)));
  plan.request.bundles.push_back(
      scheduler::Bundle{std::move(resources), std::move(selector), ""});
  return absl::OkStatus();
}

// TPU per worker (fixed point) and workers per host, with Ray's checks
// (ray.util.tpu.get_tpu_worker_resources) and sliced's: a worker fits in one
// host and the host's chips divide evenly among its workers.
absl::StatusOr<int64_t> TpuPerWorker(const ScalingConfigPlan& plan,
                                     const GivenResources& given) {
  const int64_t per_host = plan.shape.chips_per_host *
                           plan.tpu_resource_per_chip *
                           scheduler::kResourceScale;
  const int64_t per_slice =
      plan.shape.chips * plan.tpu_resource_per_chip * scheduler::kResourceScale;
  if (!given.given || !given.resources.contains(scheduler::kResourceTpu)) {
    return per_host;
  }
  const int64_t tpw = Amount(given.resources, scheduler::kResourceTpu);
  auto devices = [](int64_t fixed) { return scheduler::FromFixedPoint(fixed); };
  if (tpw <= 0) {
    return Invalid("resources_per_worker", "TPU resources must be positive.");
  }
  if (per_slice % tpw != 0) {
    return Invalid(
        "resources_per_worker",
        absl::StrCat("The requested resources per worker (", devices(tpw),
                     " TPU devices) do not divide evenly into the TPU devices "
                     "available per slice (",
                     plan.shape.chips * plan.tpu_resource_per_chip,
                     "). This configuration results in an uneven distribution "
                     "of workers across slices, which is not supported."));
  }
  if (tpw > per_host || per_host % tpw != 0 ||
      tpw % scheduler::kResourceScale != 0) {
    return Invalid(
        "resources_per_worker",
        absl::StrCat("asks for ", devices(tpw), " TPU per worker, but a ",
                     plan.shape.pod_type, " host has ", devices(per_host),
                     ": a worker's TPU must be whole devices that divide one "
                     "host's evenly (a worker never spans hosts)"));
  }
  return tpw;
}

// Whole slices of the topology, workers_per_host workers on each host.
absl::Status PlanTpuSlices(const ScalingConfig& config, const Limits& limits,
                           scheduler::TpuGeneration generation,
                           GivenResources given, ScalingConfigPlan& plan) {
  const int num_workers = config.num_workers;
  auto shape = scheduler::ResolveTpuShape(generation, config.topology);
  if (!shape.ok()) return Prefixed("topology", shape.status());
  plan.shape = *std::move(shape);
  plan.hosts_per_slice = static_cast<int>(plan.shape.hosts);
  plan.tpu_resource_per_chip = std::max(1, config.tpu_resource_per_chip);
  ASSIGN_OR_RETURN(const int64_t tpw, TpuPerWorker(plan, given));
  const int workers_per_host =
      static_cast<int>(plan.shape.chips_per_host * plan.tpu_resource_per_chip *
                       scheduler::kResourceScale / tpw);
  const int workers_per_slice = plan.hosts_per_slice * workers_per_host;
  if (num_workers % workers_per_slice != 0) {
    return Invalid(
        "num_workers",
        absl::StrCat("`num_workers` (", num_workers,
                     ") must be a multiple of the workers per slice of "
                     "topology ",
                     plan.shape.topology, " (", plan.shape.pod_type, ": ",
                     plan.hosts_per_slice, " hosts x ", workers_per_host,
                     workers_per_host == 1 ? " worker of " : " workers of ",
                     scheduler::FromFixedPoint(tpw),
                     " TPU = ", workers_per_slice,
                     "); every host of a slice runs its workers"));
  }
  plan.num_slices = num_workers / workers_per_slice;
  if (num_workers > workers_per_host &&
      plan.request.strategy == Strategy::kStrictPack) {
    return Invalid(
        "placement_strategy",
        absl::StrCat("STRICT_PACK puts every worker on one node, but ",
                     num_workers, " TPU workers need ",
                     num_workers / workers_per_host,
                     " TPU hosts; use SPREAD (the default for TPUs)"));
  }
  if (workers_per_host > 1 &&
      plan.request.strategy == Strategy::kStrictSpread) {
    return Invalid(
        "placement_strategy",
        absl::StrCat("STRICT_SPREAD puts every worker on a node of its own, "
                     "but every host of topology ",
                     plan.shape.topology, " runs ", workers_per_host,
                     " workers of ", scheduler::FromFixedPoint(tpw),
                     " TPU; use SPREAD (the default for TPUs)"));
  }
  ResourceSet per_host = std::move(given.resources);
  per_host[std::string(scheduler::kResourceTpu)] = tpw;
  for (auto& [name, amount] : per_host) amount *= workers_per_host;
  ASSIGN_OR_RETURN(scheduler::LabelSelector selector,
                   ConvertSelector(config, limits, {}));
  plan.request.slice = scheduler::SliceRequirement{
      plan.shape.generation,
      plan.shape.topology,
      plan.num_slices,
      std::move(per_host),
      std::move(selector),
      plan.tpu_resource_per_chip,
      !config.allow_subslice.has_value()
          ? scheduler::Subslicing::kIfNoExactShape
          : *config.allow_subslice ? scheduler::Subslicing::kAllowed
                                   : scheduler::Subslicing::kNever};
  LayoutTpuWorkers(plan);
  return absl::OkStatus();
}

absl::StatusOr<ScalingConfigPlan> PlanTpu(const ScalingConfig& config,
                                          const Limits& limits,
                                          GivenResources given) {
  if (config.tpu_resource_per_chip < 0) {
    return Invalid("tpu_resource_per_chip",
                   "`tpu_resource_per_chip` must be a positive integer.");
  }
  ASSIGN_OR_RETURN(scheduler::TpuGeneration generation,
                   TpuGenerationOf(config));
  const int max_per_chip = scheduler::MaxTpuResourcePerChip(generation);
  if (config.tpu_resource_per_chip > max_per_chip) {
    return Invalid(
        "tpu_resource_per_chip",
        absl::StrCat("must be 1", max_per_chip > 1 ? " or 2" : "", " on ",
                     scheduler::TpuGenerationName(generation), ", got ",
                     config.tpu_resource_per_chip,
                     " (2 TPU devices per chip exist on v7x only)"));
  }
  RETURN_IF_ERROR(CheckAcceleratorTerm(config, generation));
  ScalingConfigPlan plan;
  plan.use_tpu = true;
  plan.num_workers = config.num_workers;
  ASSIGN_OR_RETURN(plan.request.strategy,
                   ParseStrategy(config.placement_strategy, true));
  if (config.topology.empty()) {
    RETURN_IF_ERROR(
        PlanOneTpuWorker(config, limits, generation, std::move(given), plan));
  } else {
    RETURN_IF_ERROR(
        PlanTpuSlices(config, limits, generation, std::move(given), plan));
  }
  return plan;
}

// "host:port"; an IPv6 literal goes in brackets.
std::string HostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace

namespace {

// The limits CreatePlacementGroup applies to its request apply to the one a
// config makes: slices per group, and bundles (one per host of a slice).
absl::Status CheckSize(const ScalingConfig& config, const Limits& limits,
                       const ScalingConfigPlan& plan) {
  const scheduler::PlacementRequest& r = plan.request;
  if (r.slice && r.slice->num_slices > limits.max_slices_per_pg) {
    return Invalid(
        "num_workers",
        absl::StrCat(config.num_workers, " workers need ", r.slice->num_slices,
                     " slices of ", plan.shape.pod_type, "; at most ",
                     limits.max_slices_per_pg, " per placement group"));
  }
  const int64_t bundles = r.slice ? plan.shape.hosts * r.slice->num_slices
                                  : static_cast<int64_t>(r.bundles.size());
  if (bundles > limits.max_bundles_per_pg) {
    return Invalid(
        "num_workers",
        absl::StrCat(config.num_workers, " workers need ", bundles,
                     r.slice ? " hosts" : " bundles", "; at most ",
                     limits.max_bundles_per_pg,
                     " bundles per placement group (--max_bundles_per_pg)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScalingConfigPlan> PlanScalingConfig(const ScalingConfig& config,
                                                    const Limits& limits) {
  ASSIGN_OR_RETURN(GivenResources given, ConvertResources(config, limits));
  RETURN_IF_ERROR(CheckCommon(config, given));
  absl::StatusOr<ScalingConfigPlan> plan =
      config.use_tpu ? PlanTpu(config, limits, std::move(given))
                     : PlanGeneric(config, limits, std::move(given));
  if (plan.ok()) RETURN_IF_ERROR(CheckSize(config, limits, *plan));
  return plan;
}

namespace {

std::string Box(const std::vector<int>& box) { return absl::StrJoin(box, ","); }

// A box of `chips` chips inside `host` (both {x, y, z}), filling y, then x,
// then z: 2 of {2,2,1} -> {1,2,1}; 4 of {2,4,1} -> {1,4,1}. A process's
// consecutive chip ids lie along y: libtpu's two-process example on a v4
// host (JAX issue 14977: chips 0,1 and 2,3, bounds 1,2,1, processes 2,1,1),
// Ray's 2-chip bounds (1,2,1) and vLLM's 1,n,1 all agree.
std::vector<int> ChipBox(int chips, const std::vector<int>& host) {
  std::vector<int> box(3, 1);
  for (int d : {1, 0, 2}) {
    if (chips <= 1) break;
    const int take = std::gcd(chips, host[d]);
    box[d] = take;
    chips /= take;
  }
  return box;
}

// libtpu's multi-process env of local rank `local` on worker `worker_id`
// of a slice whose hosts have `addresses` (worker-id order).
void AddProcessEnv(const ScalingConfigPlan& plan, int worker_id, int local,
                   const std::vector<std::string>& addresses,
                   absl::btree_map<std::string, std::string>& env) {
  const int k = plan.workers_per_host;
  const int cpw = plan.chips_per_worker;
  std::vector<int> chips;
  for (int c = local * cpw; c < (local + 1) * cpw; ++c) chips.push_back(c);
  const std::vector<int> chip_box = ChipBox(cpw, plan.host_box);
  std::vector<int> bounds(3);
  for (int d = 0; d < 3; ++d) {
    bounds[d] = plan.host_grid[d] * (plan.host_box[d] / chip_box[d]);
  }
  std::vector<std::string> processes;
  for (const std::string& address : addresses) {
    for (int l = 0; l < k; ++l) {
      processes.push_back(HostPort(address, kTpuProcessPort + l));
    }
  }
  env["TPU_VISIBLE_CHIPS"] = absl::StrJoin(chips, ",");
  // A Ray actor holding fewer TPU than its host would otherwise have Ray set
  // TPU_VISIBLE_CHIPS (and its own bounds) from Ray's chip choice, which
  // need not be these chips.
  // (emplace: GCC 12 at -O3 warns, wrongly, of overlapping copies in an
  // assignment of this literal; the key is set nowhere else.)
  env.emplace("RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS", "1");
  env["TPU_CHIPS_PER_PROCESS_BOUNDS"] = Box(chip_box);
  env["TPU_PROCESS_BOUNDS"] = Box(bounds);
  env["TPU_PROCESS_PORT"] = absl::StrCat(kTpuProcessPort + local);
  env["TPU_PROCESS_ADDRESSES"] = absl::StrJoin(processes, ",");
  env["CLOUD_TPU_TASK_ID"] = absl::StrCat(worker_id * k + local);
}

}  // namespace

void LayoutTpuWorkers(ScalingConfigPlan& plan) {
  if (!plan.use_tpu || plan.hosts_per_slice <= 0 || plan.num_slices <= 0) {
    return;
  }
  const int hosts = plan.hosts_per_slice * plan.num_slices;
  plan.workers_per_host = std::max(1, plan.num_workers / hosts);
  // Whole chips per worker; 0 when workers share chips (v7x TensorCores).
  const int chips = static_cast<int>(plan.shape.chips_per_host);
  plan.chips_per_worker =
      chips % plan.workers_per_host == 0 ? chips / plan.workers_per_host : 0;
  plan.host_box = plan.shape.host_box;
  plan.host_grid = plan.shape.host_grid;
}

std::vector<Worker> BuildWorkers(
    const ScalingConfigPlan& plan, const std::vector<PlacedNode>& bundle_nodes,
    const std::vector<std::string>& slice_names,
    const std::vector<const scheduler::TpuShape*>& parents) {
  const PlacedNode missing;
  auto node_at = [&](int i) -> const PlacedNode& {
    return i < static_cast<int>(bundle_nodes.size()) ? bundle_nodes[i]
                                                     : missing;
  };
  const int num_workers = plan.num_workers;
  const std::string coordinator =
      HostPort(node_at(0).address, kJaxCoordinatorPort);
  const bool slices = plan.use_tpu && plan.hosts_per_slice > 0;
  const int hosts = plan.hosts_per_slice;
  const int k = slices ? std::max(1, plan.workers_per_host) : 1;

  // Per slice: its hosts' addresses in worker-id order.
  std::vector<std::vector<std::string>> addresses;
  if (slices) {
    for (int s = 0; s < plan.num_slices; ++s) {
      std::vector<std::string>& slice = addresses.emplace_back();
      for (int i = 0; i < hosts; ++i) {
        slice.push_back(node_at(s * hosts + i).address);
      }
    }
  }

  std::vector<Worker> workers;
  workers.reserve(num_workers);
  for (int rank = 0; rank < num_workers; ++rank) {
    const int host = rank / k;
    const PlacedNode& node = node_at(host);
    Worker& w = workers.emplace_back();
    w.rank = rank;
    w.node_id = node.node_id;
    w.address = node.address;
    auto& env = w.env;
    env["JAX_COORDINATOR_ADDRESS"] = coordinator;
    env["JAX_COORDINATOR_PORT"] = absl::StrCat(kJaxCoordinatorPort);
    env["JAX_NUM_PROCESSES"] = absl::StrCat(num_workers);
    env["JAX_PROCESS_ID"] = absl::StrCat(rank);
    if (!slices) continue;

    const int slice = host / hosts;
    const int worker_id = host % hosts;
    const std::string slice_name =
        slice < static_cast<int>(slice_names.size()) ? slice_names[slice] : "";
    const std::vector<std::string> no_hosts;
    const std::vector<std::string>& slice_hosts =
        slice < static_cast<int>(addresses.size()) ? addresses[slice]
                                                   : no_hosts;
    w.slice_name = slice_name;
    w.slice_index = slice;
    w.tpu_worker_id = worker_id;
    env["TPU_WORKER_ID"] = absl::StrCat(worker_id);
    env["TPU_WORKER_HOSTNAMES"] = absl::StrJoin(slice_hosts, ",");
    env["TPU_NAME"] = slice_name;
    if (scheduler::ParentSliceName(slice_name) != slice_name) {
      // A sub-slice: libtpu takes its shape from here, not from the
      // metadata server, which describes the parent.
      env["TPU_SKIP_MDS_QUERY"] = "true";
      // As the platform spells it: Ironwood's is tpu7x-<cores>, where Ray's
      // pod type (and ray.io/tpu-pod-type) says v7x-<cores>.
      env["TPU_ACCELERATOR_TYPE"] =
          plan.shape.generation == scheduler::TpuGeneration::kV7x &&
                  absl::StartsWith(plan.shape.pod_type, "v7x-")
              ? absl::StrCat("tpu7x-", plan.shape.pod_type.substr(4))
              : plan.shape.pod_type;
      env["TPU_TOPOLOGY"] = plan.shape.topology;
      // GKE's device plugin sets each of these twice (with and without the
      // TPU_ prefix), from the parent's shape: both are the sub-slice's.
      // Its wrap-around is the plugin's rule on the sub-slice's shape (a
      // 2x2x2 of a 4x4x4 does not wrap), and only on the parent's whole
      // axes (a 4x4x4 of a 4x4x8 wraps on x and y).
      const scheduler::TpuShape* parent =
          slice < static_cast<int>(parents.size()) ? parents[slice] : nullptr;
      const std::string wrap = absl::StrJoin(
          parent ? scheduler::CarvedWrap(plan.shape, *parent) : plan.shape.wrap,
          ",",
          [](std::string* out, bool w) { out->append(w ? "true" : "false"); });
      const std::string host_bounds = absl::StrJoin(plan.shape.host_grid, ",");
      const std::string chip_bounds = absl::StrJoin(plan.shape.host_box, ",");
      for (const char* prefix : {"TPU_", ""}) {
        env[absl::StrCat(prefix, "HOST_BOUNDS")] = host_bounds;
        env[absl::StrCat(prefix, "CHIPS_PER_HOST_BOUNDS")] = chip_bounds;
      }
      env["TPU_TOPOLOGY_WRAP"] = wrap;
      env["WRAP"] = wrap;
      // Ray's worker drops TPU_HOST_BOUNDS and TPU_CHIPS_PER_HOST_BOUNDS
      // from an actor that holds all of its host's chips ("the framework's
      // defaults", which for a sub-slice are the parent's) unless told not
      // to touch them.
      env.emplace("RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS", "1");
    }
    if (k > 1 && plan.chips_per_worker > 0 && plan.host_box.size() == 3 &&
        plan.host_grid.size() == 3) {
      AddProcessEnv(plan, worker_id, rank % k, slice_hosts, env);
    }
    if (plan.num_slices > 1) {
      env["MEGASCALE_COORDINATOR_ADDRESS"] = node_at(0).address;
      env["MEGASCALE_PORT"] = absl::StrCat(kMegascalePort);
      env["MEGASCALE_NUM_SLICES"] = absl::StrCat(plan.num_slices);
      env["MEGASCALE_SLICE_ID"] = absl::StrCat(slice);
    }
  }
  return workers;
}

}  // namespace sliced::server
