// Ray Train v2 / JaxTrainer `ScalingConfig` -> engine request, and, once the
// placement is known, the per-worker result with the env JAX needs on TPUs
// (DESIGN §1 "JaxTrainer-style ScalingConfig").
//
// Pure functions; thread-safe.
//
// Validation follows Ray's ScalingConfig (python/ray/train/v2/api/config.py,
// python/ray/air/config.py) and ray.util.tpu, with Ray's wording where Ray
// has a message. Every error is InvalidArgument and starts with
// "scaling_config.<field>: ". Where sliced differs from Ray, on purpose:
//  - num_workers must be 1..kMaxScalingConfigWorkers: Ray's num_workers=0
//    ("local mode", the function runs in the driver) has nothing to place.
//  - use_tpu=True always needs accelerator_type (Ray: only with
//    num_workers > 1): the generation decides which hosts qualify.
//  - topology and accelerator_type are rejected with use_tpu=False: sliced
//    places only TPUs by type (Ray also takes GPU types there).
//  - label_selector is allowed with use_tpu=True and num_workers > 1 (Ray
//    rejects it because it pins the slice name itself); here it is ANDed on
//    every host of the chosen slices (e.g. a zone or a capacity tier).
//  - For a TPU slice each worker is one whole host: resources_per_worker
//    defaults to {"TPU": chips per host} (Ray's SlicePlacementGroup default)
//    instead of Ray Train's {"TPU": 1}, and may not ask for more TPU than a
//    host has.
//
// The TPU shapes: with a topology, the request is a SliceRequirement for
// num_workers / hosts_per_slice whole slices and the solver expands one
// bundle per host, slice-major. A TPU config with num_workers == 1 and no
// topology is, as in Ray, one ordinary bundle (default {"TPU": 1}) on a node
// labelled with the accelerator type, and gets no TPU_* slice env.
#ifndef SLICED_SERVER_CORE_SCALING_CONFIG_H_
#define SLICED_SERVER_CORE_SCALING_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/solver.h"
#include "scheduler/tpu.h"
#include "server/core/limits.h"
#include "server/core/placement_group.h"

namespace sliced::server {

// Upper bound on num_workers: 10,000 workers is 2.5x the hosts of the largest
// multi-slice jobs run today and keeps one request's bundle list and result
// well under the gRPC message limit.
inline constexpr int kMaxScalingConfigWorkers = 10000;

// Ports in the env of BuildWorkers.
// The JAX distributed coordinator (jax.distributed.initialize) on rank 0:
// 8476, the port JAX itself uses when it auto-detects a Cloud TPU cluster
// (jax/_src/clusters/cloud_tpu_cluster.py).
inline constexpr int kJaxCoordinatorPort = 8476;
// Megascale (multi-slice DCN) coordinator: Ray's default in
// ray.util.tpu.get_tpu_coordinator_env_vars and GKE's.
inline constexpr int kMegascalePort = 8081;

struct ScalingConfigPlan {
  // bundles / slice / strategy; no priorities, fallbacks or pins (the caller
  // adds a compute class's priorities).
  scheduler::PlacementRequest request;
  bool use_tpu = false;
  int num_workers = 0;
  // TPU with a topology only (otherwise zero / default):
  scheduler::TpuShape shape;
  int hosts_per_slice = 0;
  int num_slices = 0;
};

// Validates `config` and translates it into an engine request.
//  - Non-TPU: num_workers bundles of resources_per_worker (default
//    {"CPU": 1}; {"GPU": 1} with use_gpu, as Ray) with the label selector,
//    strategy placement_strategy (default PACK).
//  - TPU with a topology: bundles empty, request.slice = {generation,
//    canonical topology, num_slices, resources_per_host, selector}; strategy
//    placement_strategy (default SPREAD; the solver ignores it for slices).
// Returns InvalidArgument naming the field ("scaling_config.<field>: ...").
absl::StatusOr<ScalingConfigPlan> PlanScalingConfig(const ScalingConfig& config,
                                                    const Limits& limits);

// Where the placement put one bundle.
struct PlacedNode {
  std::string node_id;
  std::string address;
};

// The per-worker result, in rank order (rank = bundle index).
//  TPU slices: worker = host; rank = slice_index * hosts_per_slice + TPU
//  worker id, so JAX process ids match TPU worker ids. Env:
//    TPU_WORKER_ID         the host's worker id in its slice
//    TPU_WORKER_HOSTNAMES  that slice's host addresses in worker-id order,
//                          comma-separated
//    TPU_NAME              the slice name
//  and with num_slices > 1 (Ray's get_tpu_coordinator_env_vars):
//    MEGASCALE_COORDINATOR_ADDRESS  address of slice 0 worker 0, no port
//    MEGASCALE_PORT                 "8081" (kMegascalePort)
//    MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID
//  Every worker (TPU or not) gets the JAX distributed settings, the values
//  Ray's JaxTrainer passes to jax.distributed.initialize():
//    JAX_COORDINATOR_ADDRESS  "<rank 0 address>:8476" (host:port, the form
//                             jax.distributed.initialize reads from this
//                             variable; IPv6 addresses in brackets)
//    JAX_COORDINATOR_PORT     "8476"
//    JAX_NUM_PROCESSES        num_workers
//    JAX_PROCESS_ID           the rank
// REQUIRES: bundle_nodes[i] is where bundle i went (plan.request.bundles, or
// the slice expansion, slice-major), bundle_nodes.size() == num_workers, and
// for slices slice_names.size() == num_slices. Missing entries give empty
// strings rather than undefined behaviour.
std::vector<Worker> BuildWorkers(const ScalingConfigPlan& plan,
                                 const std::vector<PlacedNode>& bundle_nodes,
                                 const std::vector<std::string>& slice_names);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_SCALING_CONFIG_H_
