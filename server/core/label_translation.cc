#include "server/core/label_translation.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/quote.h"
#include "scheduler/slices.h"
#include "scheduler/tpu.h"

namespace sliced::server {
namespace {

using scheduler::Labels;

constexpr absl::string_view kGkePrefix = "cloud.google.com/";
constexpr absl::string_view kGkeAccelerator =
    "cloud.google.com/gke-tpu-accelerator";
constexpr absl::string_view kGkeTopology = "cloud.google.com/gke-tpu-topology";
constexpr absl::string_view kGkeSpot = "cloud.google.com/gke-spot";
// Preemptible VMs (the older kind of spot VM: reclaimable at any time, and
// after 24 h at most) carry this one instead of gke-spot.
constexpr absl::string_view kGkePreemptible =
    "cloud.google.com/gke-preemptible";
constexpr absl::string_view kGkeFlexStart = "cloud.google.com/gke-flex-start";
constexpr absl::string_view kGkeReservation =
    "cloud.google.com/reservation-name";
constexpr absl::string_view kGkeNodePool = "cloud.google.com/gke-nodepool";
constexpr absl::string_view kGkeBlock = "cloud.google.com/gce-topology-block";
// TPU7x dynamic slicing: cloud.google.com/gke-tpu-partition-<topology>-id
// and -state name the partition (sub-block) a node is in and its health.
constexpr absl::string_view kGkePartitionPrefix =
    "cloud.google.com/gke-tpu-partition-";
constexpr absl::string_view kK8sZone = "topology.kubernetes.io/zone";
constexpr absl::string_view kK8sRegion = "topology.kubernetes.io/region";

struct GkeAccelerator {
  absl::string_view gke;
  absl::string_view ray;
};
constexpr GkeAccelerator kGkeAccelerators[] = {
    {"tpu-v4-podslice", "TPU-V4"},
    {"tpu-v5-lite-podslice", "TPU-V5LITEPOD"},
    {"tpu-v5-lite-device", "TPU-V5LITEPOD"},
    {"tpu-v5p-slice", "TPU-V5P"},
    {"tpu-v6e-slice", "TPU-V6E"},
    {"tpu7x", "TPU-V7X"},
};

const std::string* Find(const Labels& labels, absl::string_view key) {
  auto it = labels.find(key);
  return it == labels.end() ? nullptr : &it->second;
}

// True when the node carries GKE node metadata (cloud.google.com/...).
bool HasGkeMetadata(const Labels& labels) {
  auto it = labels.lower_bound(kGkePrefix);
  return it != labels.end() && absl::StartsWith(it->first, kGkePrefix);
}

bool IsTrue(const Labels& labels, absl::string_view key) {
  const std::string* v = Find(labels, key);
  return v != nullptr && absl::AsciiStrToLower(*v) == "true";
}

// ray.io/accelerator-type from cloud.google.com/gke-tpu-accelerator, if
// given. InvalidArgument for a value sliced does not know.
absl::Status DeriveAccelerator(const Labels& labels, Labels& derived) {
  const std::string* accel = Find(labels, kGkeAccelerator);
  if (accel == nullptr) return absl::OkStatus();
  for (const GkeAccelerator& a : kGkeAccelerators) {
    if (a.gke == *accel) {
      derived[std::string(scheduler::kLabelAcceleratorType)] =
          std::string(a.ray);
      return absl::OkStatus();
    }
  }
  std::string accepted;
  for (const GkeAccelerator& a : kGkeAccelerators) {
    absl::StrAppend(&accepted, accepted.empty() ? "" : ", ", a.gke);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "labels[\"", kGkeAccelerator, "\"]: unknown TPU accelerator ",
      Quote(*accel, '\''), "; accepted: ", accepted));
}

// The tier: from GKE metadata or an explicit spot market type, else
// on-demand (sliced's own label, always present).
std::string Tier(const Labels& labels) {
  const std::string* market = Find(labels, scheduler::kLabelMarketType);
  if (IsTrue(labels, kGkeSpot) || IsTrue(labels, kGkePreemptible) ||
      (market != nullptr && *market == "spot")) {
    return "spot";
  }
  if (IsTrue(labels, kGkeFlexStart)) return "flex-start";
  if (Find(labels, kGkeReservation) != nullptr) return "reserved";
  return "on-demand";
}

// The Ray market type only from metadata that says so: a spot tier or
// gke-spot says spot; a GKE node that is not spot, or an explicit on-demand
// tier, says on-demand. A node with Ray labels alone gets none, so that
// Ray's `!on-demand` still matches it. InvalidArgument when an explicit
// market type contradicts a spot tier.
absl::Status DeriveMarketType(const Labels& labels, Labels& out) {
  const std::string* market = Find(labels, scheduler::kLabelMarketType);
  const absl::string_view gke_spot = IsTrue(labels, kGkeSpot) ? kGkeSpot
                                     : IsTrue(labels, kGkePreemptible)
                                         ? kGkePreemptible
                                         : absl::string_view();
  const std::string tier = out.at(scheduler::kLabelCapacityTier);
  if (market == nullptr) {
    if (tier == "spot" || !gke_spot.empty()) {
      out[std::string(scheduler::kLabelMarketType)] = "spot";
    } else if (HasGkeMetadata(labels) ||
               (Find(labels, scheduler::kLabelCapacityTier) != nullptr &&
                tier == "on-demand")) {
      out[std::string(scheduler::kLabelMarketType)] = "on-demand";
    }
  } else if (tier == "spot" && *market != "spot") {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels[\"", scheduler::kLabelMarketType, "\"]: ", Quote(*market),
        " contradicts capacity tier spot (from ",
        gke_spot.empty() ? scheduler::kLabelCapacityTier : gke_spot,
        "); a spot node's market type is spot"));
  }
  return absl::OkStatus();
}

// Ray's spelling of the platform's accelerator type (TPU_ACCELERATOR_TYPE),
// as Ray's own node labels spell it: lower case, the generation as v<gen>
// ("tpu7x-128" -> "v7x-128"), and v5e as v5litepod.
std::string RayPodType(absl::string_view platform) {
  std::string type =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(platform));
  absl::string_view rest = type;
  if (absl::ConsumePrefix(&rest, "tpu")) {
    absl::ConsumePrefix(&rest, "-");
    absl::ConsumePrefix(&rest, "v");
    type = absl::StrCat("v", rest);
  }
  rest = type;
  if (absl::ConsumePrefix(&rest, "v5e-"))
    type = absl::StrCat("v5litepod-", rest);
  return type;
}

// Pod type from accelerator + topology, when both resolve and none is given.
void DerivePodType(Labels& out) {
  const std::string* accel = Find(out, scheduler::kLabelAcceleratorType);
  const std::string* topo = Find(out, scheduler::kLabelTpuTopology);
  if (accel == nullptr || topo == nullptr ||
      Find(out, scheduler::kLabelTpuPodType) != nullptr) {
    return;
  }
  auto generation = scheduler::ParseTpuGeneration(*accel);
  if (!generation.ok()) return;
  auto shape = scheduler::ResolveTpuShape(*generation, *topo);
  if (shape.ok())
    out[std::string(scheduler::kLabelTpuPodType)] = shape->pod_type;
}

// Dynamic slicing (TPU7x): the node's partition of its own topology is its
// slice, and the partition's state says whether that slice is usable.
void DerivePartition(const Labels& labels, Labels& derived) {
  const std::string* topology = Find(labels, kGkeTopology);
  if (topology == nullptr) return;
  const std::string prefix = absl::StrCat(kGkePartitionPrefix, *topology);
  if (const std::string* id = Find(labels, prefix + "-id")) {
    // TPU_NAME, when given, names the slice instead.
    derived.emplace(std::string(scheduler::kLabelTpuSliceName), *id);
  }
  if (const std::string* state = Find(labels, prefix + "-state")) {
    derived[std::string(scheduler::kLabelTpuPartitionState)] = *state;
  }
}

// A worker id from the host's position when nothing else gives one (dynamic
// slicing nodes carry no TPU_WORKER_ID): its linear place in the host grid,
// x fastest.
void DeriveWorkerId(Labels& out) {
  if (Find(out, scheduler::kLabelTpuWorkerId) != nullptr) return;
  const std::string* coords = Find(out, scheduler::kLabelTpuHostCoords);
  const std::string* accel = Find(out, scheduler::kLabelAcceleratorType);
  const std::string* topo = Find(out, scheduler::kLabelTpuTopology);
  if (coords == nullptr || accel == nullptr || topo == nullptr) return;
  auto generation = scheduler::ParseTpuGeneration(*accel);
  if (!generation.ok()) return;
  auto shape = scheduler::ResolveTpuShape(*generation, *topo);
  if (!shape.ok()) return;
  auto at = scheduler::ParseHostCoords(*coords, shape->host_grid);
  if (!at.ok()) return;
  const std::vector<int>& grid = shape->host_grid;
  out[std::string(scheduler::kLabelTpuWorkerId)] =
      absl::StrCat((*at)[0] + grid[0] * ((*at)[1] + grid[1] * (*at)[2]));
}

// Explicit labels whose values sliced reads: a tier or market type it does
// not know would leave the node outside every compute-class priority
// without a word, and another node's id would make node-affinity selectors
// (and topology strategies' node level) match this node.
absl::Status CheckExplicit(absl::string_view node_id, const Labels& labels) {
  for (const auto& [key, known] :
       {std::pair{scheduler::kLabelCapacityTier,
                  std::vector<absl::string_view>{"spot", "flex-start",
                                                 "reserved", "on-demand"}},
        std::pair{scheduler::kLabelMarketType,
                  std::vector<absl::string_view>{"spot", "on-demand"}}}) {
    const std::string* value = Find(labels, key);
    if (value == nullptr ||
        std::find(known.begin(), known.end(), *value) != known.end()) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "labels[\"", key, "\"]: ", Quote(*value), " is not a ",
        key == scheduler::kLabelCapacityTier ? "capacity tier" : "market type",
        "; one of ", absl::StrJoin(known, ", ")));
  }
  const std::string* id = Find(labels, scheduler::kLabelNodeId);
  if (id != nullptr && *id != node_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels[\"", scheduler::kLabelNodeId, "\"]: ", Quote(*id),
                     " is not this node's id ", Quote(node_id),
                     "; leave it out (sliced sets it)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Labels> TranslateNodeLabels(absl::string_view node_id,
                                           const Labels& labels) {
  absl::Status explicit_labels = CheckExplicit(node_id, labels);
  if (!explicit_labels.ok()) return explicit_labels;
  Labels derived;
  derived[std::string(scheduler::kLabelNodeId)] = std::string(node_id);
  absl::Status accelerator = DeriveAccelerator(labels, derived);
  if (!accelerator.ok()) return accelerator;
  for (const auto& [from, to] :
       {std::pair{kGkeTopology, scheduler::kLabelTpuTopology},
        std::pair{absl::string_view("TPU_NAME"), scheduler::kLabelTpuSliceName},
        std::pair{absl::string_view("TPU_WORKER_ID"),
                  scheduler::kLabelTpuWorkerId},
        std::pair{absl::string_view("TPU_ACCELERATOR_TYPE"),
                  scheduler::kLabelTpuPodType},
        std::pair{kK8sZone, scheduler::kLabelZone},
        std::pair{kK8sRegion, scheduler::kLabelRegion},
        std::pair{kGkeNodePool, scheduler::kLabelNodeGroup},
        std::pair{kGkeBlock, scheduler::kLabelTpuBlock}}) {
    if (const std::string* v = Find(labels, from)) {
      derived[std::string(to)] = *v;
    }
  }
  if (auto it = derived.find(std::string(scheduler::kLabelTpuPodType));
      it != derived.end()) {
    it->second = RayPodType(it->second);
  }
  DerivePartition(labels, derived);
  derived[std::string(scheduler::kLabelCapacityTier)] = Tier(labels);

  Labels out = labels;  // explicit labels win: insert() keeps existing keys
  out.insert(derived.begin(), derived.end());
  absl::Status market = DeriveMarketType(labels, out);
  if (!market.ok()) return market;
  DerivePodType(out);
  DeriveWorkerId(out);
  return out;
}

}  // namespace sliced::server
