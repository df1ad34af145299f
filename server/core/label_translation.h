// GKE / KubeRay node metadata -> Ray labels (DESIGN §5).
//
// Pure function; thread-safe.
#ifndef SLICED_SERVER_CORE_LABEL_TRANSLATION_H_
#define SLICED_SERVER_CORE_LABEL_TRANSLATION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/types.h"

namespace sliced::server {

// Returns `labels` plus the Ray labels derived from raw GKE metadata:
//   cloud.google.com/gke-tpu-accelerator      -> ray.io/accelerator-type
//   cloud.google.com/gke-tpu-topology         -> ray.io/tpu-topology
//   TPU_NAME, TPU_WORKER_ID, TPU_ACCELERATOR_TYPE
//        -> ray.io/tpu-slice-name, ray.io/tpu-worker-id, ray.io/tpu-pod-type
//   topology.kubernetes.io/zone|region        ->
//   ray.io/availability-zone|region cloud.google.com/gke-nodepool ->
//   ray.io/node-group gke-spot=true -> market-type spot, tier spot;
//   gke-flex-start=true -> tier flex-start; reservation-name present -> tier
//   reserved; otherwise tier on-demand.
// plus ray.io/node-id = node_id, and ray.io/tpu-pod-type computed from the
// accelerator type and topology when both are known. Explicit labels always
// win over derived ones; the raw labels are kept.
// ray.io/market-type is derived only from metadata that says so: spot when
// the tier is spot (gke-spot, an explicit tier); on-demand for a GKE node
// (any cloud.google.com/ label) that is not spot, or an explicit tier
// on-demand. A node with Ray labels alone gets none (Ray's `!on-demand`
// matches it); an explicit ray.io/market-type=spot implies tier spot.
// Returns InvalidArgument naming the label when a GKE TPU accelerator value is
// not one sliced knows, or when a spot node says a market type other than
// spot.
absl::StatusOr<scheduler::Labels> TranslateNodeLabels(
    absl::string_view node_id, const scheduler::Labels& labels);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_LABEL_TRANSLATION_H_
