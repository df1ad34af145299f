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
//    every host of the chosen slices (e.g. a zone or a capacity tier). Its
//    term on ray.io/accelerator-type, if any, must admit accelerator_type's
//    hosts (the two would ask for different TPUs).
//  - tpu_resource_per_chip is checked against the generation with or
//    without a topology (2 on v7x only).
//  - For a TPU slice resources_per_worker defaults to {"TPU": chips per host}
//    (one worker per host, Ray's SlicePlacementGroup default) instead of Ray
//    Train's {"TPU": 1}, and adds no {"CPU": 1}.
//  - A worker's TPU must fit in one host and divide it evenly (Ray only
//    checks the slice): several workers share a host, none spans two.
//  - num_workers must fill whole slices (a multiple of the workers per
//    slice; Ray rounds the slice count up): a host of a slice without its
//    process would hang jax.distributed.initialize on every other host.
//
// Workers per slice follow Ray's ray.util.tpu.get_tpu_worker_resources:
// TPU devices per slice (chips) / TPU per worker, with Ray's messages for
// the indivisible cases; workers per host = chips per host / TPU per worker.
//
// The TPU shapes: with a topology, the request is a SliceRequirement for
// num_workers / workers_per_slice whole slices and the solver expands one
// bundle per host, slice-major, holding the resources of that host's
// workers (workers_per_host x resources_per_worker). A TPU config with
// num_workers == 1 and no topology is, as in Ray, one ordinary bundle (default
// {"TPU": 1}) on a node labelled with the accelerator type, and gets no TPU_*
// slice env.
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
// libtpu's per-process port with several processes per host: torch_xla uses
// 8476 + local rank; sliced starts one higher so that local rank 0 of host 0
// does not collide with the JAX coordinator on 8476.
inline constexpr int kTpuProcessPort = 8477;

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
  int tpu_resource_per_chip = 1;
  // Several JAX processes per host (LayoutTpuWorkers):
  int workers_per_host = 1;
  int chips_per_worker = 0;
  std::vector<int> host_box;   // chips of one host, {x, y, z}
  std::vector<int> host_grid;  // hosts of one slice, {x, y, z}
};

// Fills workers_per_host, chips_per_worker, host_box and host_grid from
// shape, num_slices and num_workers (TPU slices only; no-op otherwise).
void LayoutTpuWorkers(ScalingConfigPlan& plan);

// Validates `config` and translates it into an engine request.
//  - Non-TPU: num_workers bundles of resources_per_worker (default
//    {"CPU": 1}; {"GPU": 1} with use_gpu, as Ray) with the label selector,
//    strategy placement_strategy (default PACK).
//  - TPU with a topology: bundles empty, request.slice = {generation,
//    canonical topology, num_slices, resources_per_host, selector}; strategy
//    placement_strategy (default SPREAD; STRICT_PACK and STRICT_SPREAD are
//    refused where they contradict the layout; else the solver ignores it).
// Returns InvalidArgument naming the field ("scaling_config.<field>: ...").
absl::StatusOr<ScalingConfigPlan> PlanScalingConfig(const ScalingConfig& config,
                                                    const Limits& limits);

// Where the placement put one bundle.
struct PlacedNode {
  std::string node_id;
  std::string address;
};

// The per-worker result, in rank order.
//  TPU slices: host h (bundle h, slice-major) runs workers_per_host
//  consecutive ranks: rank = (slice_index * hosts_per_slice + TPU worker id)
//  * workers_per_host + local rank, so JAX process ids follow TPU worker ids.
//  Env:
//    TPU_WORKER_ID         the host's worker id in its slice
//    TPU_WORKER_HOSTNAMES  that slice's host addresses in worker-id order,
//                          comma-separated
//    TPU_NAME              the slice name
//  and on a sub-slice ("<parent>/<topology>@<x>-<y>-<z>"), as GKE sets them
//  for sub-slice requests (the metadata server describes the parent):
//    TPU_SKIP_MDS_QUERY "true", TPU_ACCELERATOR_TYPE (e.g. v5p-16),
//    TPU_TOPOLOGY (e.g. 2x2x2), TPU_HOST_BOUNDS (the sub-slice's host
//    grid, e.g. "1,1,2"), TPU_CHIPS_PER_HOST_BOUNDS ("2,2,1"),
//    TPU_TOPOLOGY_WRAP (scheduler::CarvedWrap of parents[slice index], the
//    shape of the slice it was carved from; the sub-slice's own shape's wrap
//    when that is null or missing, as for a stitched slice), and the same
//    three without the TPU_ prefix
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
//  With several workers per host, libtpu's multi-process settings (as
//  torch_xla's configure_topology lays them out, one slice at a time):
//    TPU_VISIBLE_CHIPS             the worker's chips on its host, e.g. "2,3"
//    TPU_CHIPS_PER_PROCESS_BOUNDS  the worker's chip box, e.g. "1,1,1",
//                                  "2,1,1" (a sub-box of the host's chips)
//    TPU_PROCESS_BOUNDS            the slice's process grid: host grid x the
//                                  processes of one host, e.g. "4,4,1"
//    TPU_PROCESS_PORT              kTpuProcessPort + local rank
//    TPU_PROCESS_ADDRESSES         every process of the slice, host-major,
//                                  "address:port", comma-separated
//    CLOUD_TPU_TASK_ID             TPU worker id * workers_per_host + local
// REQUIRES: bundle_nodes[i] is where bundle i went (plan.request.bundles, or
// the slice expansion, slice-major: one per host), and for slices
// slice_names.size() == num_slices. Missing entries give empty strings
// rather than undefined behaviour.
std::vector<Worker> BuildWorkers(
    const ScalingConfigPlan& plan, const std::vector<PlacedNode>& bundle_nodes,
    const std::vector<std::string>& slice_names,
    const std::vector<const scheduler::TpuShape*>& parents = {});

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_SCALING_CONFIG_H_
