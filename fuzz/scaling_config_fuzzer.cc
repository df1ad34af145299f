// libFuzzer target: ScalingConfig validation and translation, through the
// API conversion into the core.
// Input: a serialized sliced.v1.ScalingConfig. Invariants: no crash; an
// accepted config yields a request the engine accepts, and workers can be
// built for it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "scheduler/solver.h"
#include "server/api/convert_placement.h"
#include "server/core/scaling_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sliced::v1::SubmitScalingConfigRequest request;
  if (!request.mutable_scaling_config()->ParseFromArray(
          data, static_cast<int>(size))) {
    return 0;
  }
  auto spec =
      sliced::server::api::PgSpecFromProto(request, sliced::server::Limits());
  if (!spec.ok()) return 0;
  if (!sliced::scheduler::ValidateRequest(spec->group.request).ok()) {
    std::abort();
  }
  auto plan = sliced::server::PlanScalingConfig(*spec->group.scaling_config,
                                                sliced::server::Limits());
  if (!plan.ok()) std::abort();  // accepted once, accepted again
  std::vector<sliced::server::PlacedNode> nodes(
      static_cast<size_t>(plan->num_workers), {"n", "10.0.0.1"});
  (void)sliced::server::BuildWorkers(
      *plan, nodes, std::vector<std::string>(plan->num_slices, "s"));
  return 0;
}
