// Seeded fleet generator: a realistic mix of TPU slices (v4, v5p, v5e, v6e,
// v7x, single- and multi-host, many topologies) across zones and capacity
// tiers, plus CPU nodes, labelled the way KubeRay/Ray label them (DESIGN §1).
//
//   FleetOptions options;
//   options.nodes = 10'000;
//   options.seed = 7;
//   Fleet fleet = GenerateFleet(options);
//
// The same options always give the same fleet (bench/common/rng.h).
// Pure functions; thread-safe.
#ifndef SLICED_BENCH_GEN_FLEET_H_
#define SLICED_BENCH_GEN_FLEET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/tpu.h"
#include "scheduler/types.h"

namespace sliced::bench {

// Zones and tiers of every generated fleet.
inline constexpr const char* kZones[] = {"us-east5-a", "us-east5-b",
                                         "us-central1-a", "europe-west4-a"};
inline constexpr const char* kTiers[] = {"spot", "flex-start", "reserved",
                                         "on-demand"};

// Which catalogue of slice shapes the fleet draws from.
enum class FleetMix {
  kDefault,  // every generation, single- and multi-host, up to v6e 16x16
  // The mixed-trace fleet (issue 13, item 4): multi-host slices (v6e 4x4 and
  // 8x8, v5p 2x2x4, v4 2x4x4; 60 % of the TPU hosts) and single-host TPU
  // nodes (v6e 2x4, v5e 2x2, v5p 2x2x1; 40 %). Use with a small
  // cpu_fraction (e.g. 0.05): a few CPU nodes.
  kMixed,
};

struct FleetOptions {
  int64_t nodes = 1000;        // total nodes, TPU hosts and CPU nodes
  uint64_t seed = 1;
  double cpu_fraction = 0.15;  // share of CPU-only nodes
  FleetMix mix = FleetMix::kDefault;
};

// One slice shape the fleet holds, with how many slices of it.
struct FleetShape {
  scheduler::TpuShape shape;
  int64_t slices = 0;
};

struct Fleet {
  std::vector<scheduler::Node> nodes;  // TPU hosts slice by slice, then CPU
  std::vector<FleetShape> shapes;      // shapes present, catalogue order
  int64_t tpu_chips = 0;               // total
  int64_t cpu_nodes = 0;
};

// Builds a fleet of exactly options.nodes nodes (the last slice may be
// replaced by CPU nodes to hit the count). Every slice is intact: all hosts,
// worker ids 0..hosts-1, chips adding up.
Fleet GenerateFleet(const FleetOptions& options);

// A fingerprint of the fleet (FNV-1a over ids, labels and resources), for
// checking determinism.
uint64_t Fingerprint(const Fleet& fleet);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_GEN_FLEET_H_
