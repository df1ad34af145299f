#include "server/core/label_translation.h"

#include "gtest/gtest.h"

namespace sliced::server {
namespace {

using scheduler::Labels;

struct Case {
  const char* name;
  Labels in;
  Labels expect_subset;
};

TEST(LabelTranslationTest, DerivesRayLabelsFromGkeMetadata) {
  const Case cases[] = {
      {"v6e slice on spot",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu-v6e-slice"},
        {"cloud.google.com/gke-tpu-topology", "4x4"},
        {"cloud.google.com/gke-spot", "true"},
        {"cloud.google.com/gke-nodepool", "pool-a"},
        {"topology.kubernetes.io/zone", "us-east5-b"},
        {"topology.kubernetes.io/region", "us-east5"},
        {"TPU_NAME", "slice-a"},
        {"TPU_WORKER_ID", "2"}},
       {{"ray.io/accelerator-type", "TPU-V6E"},
        {"ray.io/tpu-topology", "4x4"},
        {"ray.io/tpu-pod-type", "v6e-16"},
        {"ray.io/tpu-slice-name", "slice-a"},
        {"ray.io/tpu-worker-id", "2"},
        {"ray.io/market-type", "spot"},
        {"sliced.io/capacity-tier", "spot"},
        {"ray.io/node-group", "pool-a"},
        {"ray.io/availability-zone", "us-east5-b"},
        {"ray.io/availability-region", "us-east5"},
        {"ray.io/node-id", "n1"},
        {"TPU_NAME", "slice-a"}}},
      {"v5e flex-start",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
        {"cloud.google.com/gke-tpu-topology", "2x4"},
        {"cloud.google.com/gke-flex-start", "true"}},
       {{"ray.io/accelerator-type", "TPU-V5LITEPOD"},
        {"ray.io/tpu-pod-type", "v5litepod-8"},
        {"ray.io/market-type", "on-demand"},
        {"sliced.io/capacity-tier", "flex-start"}}},
      {"v4 reserved with TPU_ACCELERATOR_TYPE",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu-v4-podslice"},
        {"cloud.google.com/reservation-name", "res-1"},
        {"TPU_ACCELERATOR_TYPE", "v4-16"}},
       {{"ray.io/accelerator-type", "TPU-V4"},
        {"ray.io/tpu-pod-type", "v4-16"},
        {"sliced.io/capacity-tier", "reserved"}}},
      {"v7x",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu7x"}},
       {{"ray.io/accelerator-type", "TPU-V7X"}}},
      {"plain CPU node",
       {},
       {{"ray.io/market-type", "on-demand"},
        {"sliced.io/capacity-tier", "on-demand"},
        {"ray.io/node-id", "n1"}}},
      {"explicit Ray labels win",
       {{"cloud.google.com/gke-spot", "true"},
        {"topology.kubernetes.io/zone", "z-gke"},
        {"ray.io/availability-zone", "z-ray"},
        {"sliced.io/capacity-tier", "reserved"},
        {"ray.io/node-id", "custom"}},
       {{"ray.io/availability-zone", "z-ray"},
        {"sliced.io/capacity-tier", "reserved"},
        {"ray.io/market-type", "spot"},
        {"ray.io/node-id", "custom"}}},
      {"explicit spot market implies spot tier",
       {{"ray.io/market-type", "spot"}},
       {{"sliced.io/capacity-tier", "spot"}}},
  };
  for (const Case& c : cases) {
    auto out = TranslateNodeLabels("n1", c.in);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    for (const auto& [key, value] : c.expect_subset) {
      auto it = out->find(key);
      ASSERT_NE(it, out->end()) << c.name << ": missing " << key;
      EXPECT_EQ(it->second, value) << c.name << ": " << key;
    }
  }
}

TEST(LabelTranslationTest, UnknownGkeAcceleratorNamesTheLabelAndAcceptedSet) {
  auto out = TranslateNodeLabels(
      "n1", {{"cloud.google.com/gke-tpu-accelerator", "tpu-v9-slice"}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("gke-tpu-accelerator"),
            std::string::npos);
  EXPECT_NE(out.status().message().find("tpu-v6e-slice"), std::string::npos);
}

}  // namespace
}  // namespace sliced::server
