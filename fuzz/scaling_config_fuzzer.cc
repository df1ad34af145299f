// libFuzzer target: ScalingConfig validation and translation.
// Input: a serialized sliced.v1.ScalingConfig. Invariants: no crash; an
// accepted config yields a request the engine accepts, and workers can be
// built for it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "scheduler/solver.h"
#include "server/scaling_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sliced::v1::ScalingConfig config;
  if (!config.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto plan =
      sliced::server::PlanScalingConfig(config, sliced::server::Limits());
  if (!plan.ok()) return 0;
  if (!sliced::scheduler::ValidateRequest(plan->request).ok()) std::abort();
  std::vector<sliced::server::PlacedNode> nodes(
      static_cast<size_t>(plan->num_workers), {"n", "10.0.0.1"});
  (void)sliced::server::BuildWorkers(
      *plan, nodes, std::vector<std::string>(plan->num_slices, "s"));
  return 0;
}
