// Fleet generator; see fleet.h.
#include "bench/gen/fleet.h"

#include <cstdlib>
#include <iterator>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/rng.h"

namespace sliced::bench {
namespace {

using scheduler::kResourceScale;
using scheduler::TpuGeneration;

// The catalogue: shape and its share of the TPU hosts.
struct CatalogueEntry {
  TpuGeneration generation;
  const char* topology;
  double host_share;
};
constexpr CatalogueEntry kCatalogue[] = {
    {TpuGeneration::kV6e, "2x4", 10},   {TpuGeneration::kV6e, "4x4", 20},
    {TpuGeneration::kV6e, "8x8", 12},   {TpuGeneration::kV6e, "16x16", 6},
    {TpuGeneration::kV5e, "2x2", 5},    {TpuGeneration::kV5e, "4x8", 6},
    {TpuGeneration::kV5p, "2x2x1", 3},  {TpuGeneration::kV5p, "2x2x4", 6},
    {TpuGeneration::kV5p, "4x4x4", 6},  {TpuGeneration::kV4, "2x2x2", 4},
    {TpuGeneration::kV4, "2x4x4", 5},   {TpuGeneration::kV7x, "2x2x1", 3},
    {TpuGeneration::kV7x, "2x2x4", 6},  {TpuGeneration::kV7x, "4x4x4", 4},
};
// The mixed-trace catalogue (FleetMix::kMixed).
constexpr CatalogueEntry kMixedCatalogue[] = {
    {TpuGeneration::kV6e, "4x4", 30},   {TpuGeneration::kV6e, "8x8", 10},
    {TpuGeneration::kV5p, "2x2x4", 10}, {TpuGeneration::kV4, "2x4x4", 10},
    {TpuGeneration::kV6e, "2x4", 20},   {TpuGeneration::kV5e, "2x2", 10},
    {TpuGeneration::kV5p, "2x2x1", 10},
};
constexpr double kZoneWeights[] = {0.35, 0.25, 0.25, 0.15};
constexpr double kTierWeights[] = {0.30, 0.10, 0.35, 0.25};

std::string RegionOf(absl::string_view zone) {
  return std::string(zone.substr(0, zone.rfind('-')));
}

scheduler::Node BaseNode(std::string id, const char* zone, const char* tier) {
  scheduler::Node n;
  n.node_id = std::move(id);
  n.address = absl::StrCat(n.node_id, ".bench.internal");
  n.labels = {
      {std::string(scheduler::kLabelNodeId), n.node_id},
      {std::string(scheduler::kLabelZone), zone},
      {std::string(scheduler::kLabelRegion), RegionOf(zone)},
      {std::string(scheduler::kLabelCapacityTier), tier},
      {std::string(scheduler::kLabelMarketType),
       absl::string_view(tier) == "spot" ? "spot" : "on-demand"},
  };
  return n;
}

}  // namespace

Fleet GenerateFleet(const FleetOptions& options) {
  Rng rng(options.seed * 0x5851f42d4c957f2dULL + 1);
  Fleet fleet;
  std::vector<scheduler::TpuShape> shapes;
  std::vector<double> slice_weights;  // host share / hosts: picks slices
  const bool mixed = options.mix == FleetMix::kMixed;
  const auto* first = mixed ? std::begin(kMixedCatalogue) : std::begin(kCatalogue);
  const auto* last = mixed ? std::end(kMixedCatalogue) : std::end(kCatalogue);
  for (const CatalogueEntry& e : std::span(first, last)) {
    auto shape = scheduler::ResolveTpuShape(e.generation, e.topology);
    if (!shape.ok()) std::abort();  // the catalogue is constant and valid
    slice_weights.push_back(e.host_share / shape->hosts);
    shapes.push_back(*std::move(shape));
  }
  std::vector<int64_t> counts(shapes.size(), 0);
  const std::vector<double> zone_w(std::begin(kZoneWeights), std::end(kZoneWeights));
  const std::vector<double> tier_w(std::begin(kTierWeights), std::end(kTierWeights));

  const int64_t tpu_hosts = options.nodes -
      static_cast<int64_t>(options.nodes * options.cpu_fraction);
  int64_t slice_index = 0;
  while (static_cast<int64_t>(fleet.nodes.size()) < tpu_hosts) {
    const size_t k = rng.Weighted(slice_weights);
    const scheduler::TpuShape& shape = shapes[k];
    const char* zone = kZones[rng.Weighted(zone_w)];
    const char* tier = kTiers[rng.Weighted(tier_w)];
    if (static_cast<int64_t>(fleet.nodes.size()) + shape.hosts > tpu_hosts) {
      // Too big for what is left: the remainder becomes CPU nodes, unless a
      // single-host shape can still fill it.
      if (shape.hosts > 1) {
        if (tpu_hosts - static_cast<int64_t>(fleet.nodes.size()) < 64) break;
        continue;
      }
    }
    const std::string slice = absl::StrFormat(
        "s%06d-%s-%s", slice_index++, shape.pod_type, shape.topology);
    const std::string pod_type = shape.pod_type;
    for (int64_t w = 0; w < shape.hosts; ++w) {
      scheduler::Node n = BaseNode(
          shape.hosts == 1 ? slice : absl::StrCat(slice, "-w", w), zone, tier);
      n.labels[std::string(scheduler::kLabelAcceleratorType)] =
          std::string(scheduler::TpuAcceleratorType(shape.generation));
      n.labels[std::string(scheduler::kLabelTpuTopology)] = shape.topology;
      n.labels[std::string(scheduler::kLabelTpuSliceName)] = slice;
      n.labels[std::string(scheduler::kLabelTpuWorkerId)] = absl::StrCat(w);
      n.labels[std::string(scheduler::kLabelTpuPodType)] = pod_type;
      n.labels[std::string(scheduler::kLabelNodeGroup)] = slice;
      const int64_t chips = shape.hosts == 1 ? shape.chips : shape.chips_per_host;
      n.resources = {
          {"CPU", (chips >= 8 ? 180 : 96) * kResourceScale},
          {"memory", int64_t{200'000'000'000} * kResourceScale},
          {"TPU", chips * kResourceScale},
      };
      if (w == 0) n.resources[absl::StrCat("TPU-", pod_type, "-head")] = kResourceScale;
      fleet.nodes.push_back(std::move(n));
    }
    fleet.tpu_chips += shape.chips;
    ++counts[k];
  }
  for (int64_t i = 0; static_cast<int64_t>(fleet.nodes.size()) < options.nodes; ++i) {
    scheduler::Node n = BaseNode(absl::StrFormat("cpu-%06d", i),
                                 kZones[rng.Weighted(zone_w)],
                                 kTiers[rng.Weighted(tier_w)]);
    const bool big = rng.Bernoulli(0.3);
    n.resources = {{"CPU", (big ? 64 : 32) * kResourceScale},
                   {"memory", int64_t{big ? 256'000'000'000 : 128'000'000'000} *
                                  kResourceScale}};
    fleet.nodes.push_back(std::move(n));
    ++fleet.cpu_nodes;
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (counts[k] > 0) fleet.shapes.push_back({shapes[k], counts[k]});
  }
  return fleet;
}

uint64_t Fingerprint(const Fleet& fleet) {
  Fnv fnv;
  auto mix = [&fnv](absl::string_view s) { fnv.Mix(s); };
  for (const scheduler::Node& n : fleet.nodes) {
    mix(n.node_id);
    mix(n.address);
    for (const auto& [k, v] : n.labels) {
      mix(k);
      mix(v);
    }
    for (const auto& [k, v] : n.resources) {
      mix(k);
      mix(absl::StrCat(v));
    }
  }
  return fnv.hash();
}

}  // namespace sliced::bench
