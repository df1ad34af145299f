#include "scheduler/tpu.h"

#include <algorithm>
#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/quote.h"

namespace sliced::scheduler {
namespace {

constexpr absl::string_view kAcceptedNames =
    "TPU-V2, TPU-V3, TPU-V4, TPU-V5P, TPU-V5LITEPOD (v5e), TPU-V6E, TPU-V7X "
    "(tpu7x), case-insensitive, with or without the TPU- prefix";

constexpr std::array<absl::string_view, 5> kV2Topologies = {"4x4", "4x8", "8x8",
                                                            "8x16", "16x16"};
constexpr std::array<absl::string_view, 7> kV3Topologies = {
    "4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"};
constexpr std::array<absl::string_view, 9> kLiteTopologies = {
    "1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"};
constexpr std::array<absl::string_view, 10> kV7xTopologies = {
    "2x2x1", "2x2x2", "2x2x4", "2x4x4",  "4x4x4",
    "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"};
constexpr std::array<absl::string_view, 4> kV4SmallTopologies = {
    "2x2x1", "2x2x2", "2x2x4", "2x4x4"};

template <size_t N>
bool Contains(const std::array<absl::string_view, N>& set,
              absl::string_view topology) {
  return std::find(set.begin(), set.end(), topology) != set.end();
}

template <size_t N>
std::string Listed(const std::array<absl::string_view, N>& set) {
  return absl::StrJoin(set, ", ");
}

// Checks `dims` against the generation's rules; returns "" when valid, else
// the description of the valid set.
std::string ValidTopologyRule(TpuGeneration generation,
                              const std::vector<int>& dims,
                              absl::string_view topology) {
  switch (generation) {
    case TpuGeneration::kV2:
      return Contains(kV2Topologies, topology) ? "" : Listed(kV2Topologies);
    case TpuGeneration::kV3:
      return Contains(kV3Topologies, topology) ? "" : Listed(kV3Topologies);
    case TpuGeneration::kV5e:
    case TpuGeneration::kV6e:
      return Contains(kLiteTopologies, topology) ? "" : Listed(kLiteTopologies);
    case TpuGeneration::kV7x:
      return Contains(kV7xTopologies, topology) ? "" : Listed(kV7xTopologies);
    case TpuGeneration::kV4:
    case TpuGeneration::kV5p: {
      const int max_xy = generation == TpuGeneration::kV4 ? 12 : 16;
      const int max_z = generation == TpuGeneration::kV4 ? 16 : 24;
      const std::string rule = absl::StrCat(
          Listed(kV4SmallTopologies),
          ", or XxYxZ with every dimension a multiple of 4, X and Y <= ",
          max_xy, ", Z <= ", max_z);
      if (Contains(kV4SmallTopologies, topology)) return "";
      if (dims.size() != 3) return rule;
      for (int d : dims) {
        if (d % 4 != 0) return rule;
      }
      if (dims[0] > max_xy || dims[1] > max_xy || dims[2] > max_z) return rule;
      return "";
    }
  }
  return "unknown generation";
}

}  // namespace

absl::StatusOr<TpuGeneration> ParseTpuGeneration(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  absl::string_view rest = lower;
  if (!absl::ConsumePrefix(&rest, "tpu-")) absl::ConsumePrefix(&rest, "tpu");
  if (rest == "v2") return TpuGeneration::kV2;
  if (rest == "v3") return TpuGeneration::kV3;
  if (rest == "v4") return TpuGeneration::kV4;
  if (rest == "v5p") return TpuGeneration::kV5p;
  if (rest == "v5litepod" || rest == "v5lite" || rest == "v5e") {
    return TpuGeneration::kV5e;
  }
  if (rest == "v6e") return TpuGeneration::kV6e;
  if (rest == "v7x" || rest == "7x") return TpuGeneration::kV7x;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown TPU accelerator type ", Quote(name),
                   "; accepted: ", kAcceptedNames));
}

absl::string_view TpuGenerationName(TpuGeneration generation) {
  switch (generation) {
    case TpuGeneration::kV2:
      return "v2";
    case TpuGeneration::kV3:
      return "v3";
    case TpuGeneration::kV4:
      return "v4";
    case TpuGeneration::kV5p:
      return "v5p";
    case TpuGeneration::kV5e:
      return "v5litepod";
    case TpuGeneration::kV6e:
      return "v6e";
    case TpuGeneration::kV7x:
      return "v7x";
  }
  return "unknown";
}

absl::string_view TpuAcceleratorType(TpuGeneration generation) {
  switch (generation) {
    case TpuGeneration::kV2:
      return "TPU-V2";
    case TpuGeneration::kV3:
      return "TPU-V3";
    case TpuGeneration::kV4:
      return "TPU-V4";
    case TpuGeneration::kV5p:
      return "TPU-V5P";
    case TpuGeneration::kV5e:
      return "TPU-V5LITEPOD";
    case TpuGeneration::kV6e:
      return "TPU-V6E";
    case TpuGeneration::kV7x:
      return "TPU-V7X";
  }
  return "unknown";
}

absl::StatusOr<TpuShape> ResolveTpuShape(TpuGeneration generation,
                                         absl::string_view topology) {
  TpuShape shape;
  shape.generation = generation;
  const std::string lower =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(topology));
  bool parsed = !lower.empty();
  for (absl::string_view part : absl::StrSplit(lower, 'x')) {
    int dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim <= 0 || dim > 1024 ||
        part.front() == '+' || part.front() == '0') {
      parsed = false;
      break;
    }
    shape.dims.push_back(dim);
  }
  if (!parsed || shape.dims.size() < 2 || shape.dims.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid TPU topology ", Quote(topology),
                     ": expected AxB or AxBxC with positive integers"));
  }
  shape.topology = absl::StrJoin(shape.dims, "x");
  const std::string rule =
      ValidTopologyRule(generation, shape.dims, shape.topology);
  if (!rule.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "topology ", shape.topology, " is not a valid ",
        TpuGenerationName(generation), " slice shape; valid: ", rule));
  }
  shape.chips = 1;
  for (int d : shape.dims) shape.chips *= d;
  const bool lite =
      generation == TpuGeneration::kV5e || generation == TpuGeneration::kV6e;
  shape.chips_per_host = (lite && shape.chips <= 8) ? shape.chips : 4;
  shape.hosts = std::max<int64_t>(1, shape.chips / shape.chips_per_host);
  std::vector<int> dims3 = shape.dims;
  dims3.resize(3, 1);
  shape.host_box = shape.hosts <= 1 ? dims3 : std::vector<int>{2, 2, 1};
  for (int d = 0; d < 3; ++d) {
    shape.host_grid.push_back(std::max(1, dims3[d] / shape.host_box[d]));
  }
  const bool cube =
      std::all_of(dims3.begin(), dims3.end(), [](int d) { return d >= 4; });
  for (int d : dims3) shape.wrap.push_back(lite ? d == 16 : cube);
  shape.cores_per_chip = lite ? 1 : 2;
  shape.pod_type = absl::StrCat(TpuGenerationName(generation), "-",
                                shape.chips * shape.cores_per_chip);
  return shape;
}

std::vector<bool> CarvedWrap(const TpuShape& sub, const TpuShape& parent) {
  std::vector<bool> wrap = sub.wrap;
  for (size_t d = 0; d < wrap.size(); ++d) {
    const int own = d < sub.dims.size() ? sub.dims[d] : 1;
    const int whole = d < parent.dims.size() ? parent.dims[d] : 1;
    wrap[d] = wrap[d] && own == whole;
  }
  return wrap;
}

int MaxTpuResourcePerChip(TpuGeneration generation) {
  return generation == TpuGeneration::kV7x ? 2 : 1;
}

}  // namespace sliced::scheduler
