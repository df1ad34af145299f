// The Cloud TPU model (DESIGN §1 table): generations, valid topologies, chips
// per host, cores per chip, pod types, hosts per slice, and accelerator-name
// normalisation as Ray accepts them.
//
// Pure functions over constant tables; thread-safe.
#ifndef SLICED_SCHEDULER_TPU_H_
#define SLICED_SCHEDULER_TPU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sliced::scheduler {

enum class TpuGeneration { kV2, kV3, kV4, kV5p, kV5e, kV6e, kV7x };

// Accepts Ray's spellings, case-insensitively: "TPU-V6E", "v6e", "tpu-v6e",
// "TPU-V5LITEPOD" / "v5litepod" / "v5e" -> v5e, "tpu7x" / "v7x" -> v7x, ...
// Returns InvalidArgument listing the accepted names otherwise.
absl::StatusOr<TpuGeneration> ParseTpuGeneration(absl::string_view name);

// Short name used in pod types: "v2", "v3", "v4", "v5p", "v5litepod", "v6e",
// "v7x".
absl::string_view TpuGenerationName(TpuGeneration generation);

// Ray's accelerator-type label value: "TPU-V2", ..., "TPU-V5P",
// "TPU-V5LITEPOD", "TPU-V6E", "TPU-V7X".
absl::string_view TpuAcceleratorType(TpuGeneration generation);

// One slice shape: a generation and a valid topology.
struct TpuShape {
  TpuGeneration generation = TpuGeneration::kV6e;
  std::string topology;        // canonical, e.g. "4x4", "2x2x2"
  std::vector<int> dims;       // {4, 4}
  int64_t chips = 0;           // product of dims
  int64_t chips_per_host = 0;  // chips one host of this shape carries
  int64_t hosts = 0;           // max(1, chips / chips_per_host)
  int64_t cores_per_chip = 0;
  std::string pod_type;  // "<gen>-<chips * cores_per_chip>", e.g. v6e-16
  // Chips of one host as a box {x, y, z}: 2x2x1 on every multi-host shape,
  // the whole slice on a single-host one; and the slice's hosts as a grid
  // {x, y, z} (dims / host_box), e.g. v6e 4x4 -> {2, 2, 1}.
  std::vector<int> host_box;
  std::vector<int> host_grid;
  // Which axes {x, y, z} wrap around (a torus), as GKE's TPU device plugin
  // sets TPU_TOPOLOGY_WRAP for a slice of this shape: v5e/v6e on an axis of
  // 16 chips; the others on every axis once each is at least 4 (a cube).
  std::vector<bool> wrap;

  friend bool operator==(const TpuShape&, const TpuShape&) = default;
};

// The largest TPU resource count per physical chip a host of `generation`
// may advertise: 2 on v7x (two TensorCores per chip, each its own device
// under Ray's RAY_TPU_RESOURCE_PER_CHIP=2), 1 elsewhere.
int MaxTpuResourcePerChip(TpuGeneration generation);

// Resolves and validates a topology for a generation.
// Returns InvalidArgument naming the topology and the valid set for that
// generation when it is not a valid slice shape.
absl::StatusOr<TpuShape> ResolveTpuShape(TpuGeneration generation,
                                         absl::string_view topology);

// The wrap-around of a box of shape `sub` carved out of a slice of shape
// `parent`: an axis wraps where `sub`'s own shape would (`sub.wrap`) and the
// box spans the whole of the parent's axis. Elsewhere the links at the box's
// ends lead out of it, to the parent's other chips (a 4x4x4 of a 4x4x8 wraps
// on x and y only). REQUIRES: both shapes resolved (3 entries in `wrap`).
std::vector<bool> CarvedWrap(const TpuShape& sub, const TpuShape& parent);

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_TPU_H_
