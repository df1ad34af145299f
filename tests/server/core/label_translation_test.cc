#include "server/core/label_translation.h"

#include "gtest/gtest.h"
#include "scheduler/labels.h"

namespace sliced::server {
namespace {

using scheduler::Labels;

struct Case {
  const char* name;
  Labels in;
  Labels expect_subset;
  std::vector<std::string> expect_absent = {};
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
      // The platform spells Ironwood tpu7x-<cores>; Ray's pod type (what
      // Ray's own labels and its slice reservations say) is v7x-<cores>.
      {"v7x with TPU_ACCELERATOR_TYPE in the platform's spelling",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu7x"},
        {"TPU_ACCELERATOR_TYPE", "tpu7x-128"}},
       {{"ray.io/accelerator-type", "TPU-V7X"},
        {"ray.io/tpu-pod-type", "v7x-128"}}},
      {"v5e with TPU_ACCELERATOR_TYPE v5e-16",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
        {"TPU_ACCELERATOR_TYPE", "V5E-16"}},
       {{"ray.io/tpu-pod-type", "v5litepod-16"}}},
      {"plain CPU node: no invented market type",
       {},
       {{"sliced.io/capacity-tier", "on-demand"}, {"ray.io/node-id", "n1"}},
       {"ray.io/market-type"}},
      {"Ray labels only: no invented market type",
       {{"ray.io/accelerator-type", "TPU-V4"},
        {"ray.io/tpu-topology", "2x2x2"},
        {"ray.io/availability-zone", "z1"}},
       {{"ray.io/tpu-pod-type", "v4-16"},
        {"sliced.io/capacity-tier", "on-demand"}},
       {"ray.io/market-type"}},
      {"env-style TPU labels only: no invented market type",
       {{"TPU_NAME", "slice-a"}, {"TPU_WORKER_ID", "0"}},
       {{"ray.io/tpu-slice-name", "slice-a"}, {"ray.io/tpu-worker-id", "0"}},
       {"ray.io/market-type"}},
      {"GKE node, not spot: on-demand",
       {{"cloud.google.com/gke-nodepool", "pool-a"}},
       {{"ray.io/market-type", "on-demand"},
        {"sliced.io/capacity-tier", "on-demand"}}},
      {"GKE preemptible VM: spot (reclaimable like one)",
       {{"cloud.google.com/gke-preemptible", "true"},
        {"cloud.google.com/gke-nodepool", "pool-a"}},
       {{"ray.io/market-type", "spot"}, {"sliced.io/capacity-tier", "spot"}}},
      {"GKE spot=false: on-demand",
       {{"cloud.google.com/gke-spot", "false"}},
       {{"ray.io/market-type", "on-demand"},
        {"sliced.io/capacity-tier", "on-demand"}}},
      {"explicit spot tier says spot market",
       {{"sliced.io/capacity-tier", "spot"}},
       {{"ray.io/market-type", "spot"}, {"sliced.io/capacity-tier", "spot"}}},
      {"explicit spot tier on a GKE node says spot market",
       {{"sliced.io/capacity-tier", "spot"},
        {"cloud.google.com/gke-nodepool", "pool-a"}},
       {{"ray.io/market-type", "spot"}, {"sliced.io/capacity-tier", "spot"}}},
      {"explicit on-demand tier says on-demand market",
       {{"sliced.io/capacity-tier", "on-demand"}},
       {{"ray.io/market-type", "on-demand"}}},
      {"explicit reserved tier alone: no market type",
       {{"sliced.io/capacity-tier", "reserved"}},
       {{"sliced.io/capacity-tier", "reserved"}},
       {"ray.io/market-type"}},
      {"explicit on-demand market on a Ray-only node",
       {{"ray.io/market-type", "on-demand"}},
       {{"ray.io/market-type", "on-demand"},
        {"sliced.io/capacity-tier", "on-demand"}}},
      {"explicit Ray labels win",
       {{"cloud.google.com/gke-spot", "true"},
        {"topology.kubernetes.io/zone", "z-gke"},
        {"ray.io/availability-zone", "z-ray"},
        {"sliced.io/capacity-tier", "reserved"}},
       {{"ray.io/availability-zone", "z-ray"},
        {"sliced.io/capacity-tier", "reserved"},
        {"ray.io/market-type", "spot"}}},
      {"explicit spot market implies spot tier",
       {{"ray.io/market-type", "spot"}},
       {{"sliced.io/capacity-tier", "spot"}}},
      {"TPU7x dynamic slicing: the partition is the slice, the host's "
       "position its worker id",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu7x"},
        {"cloud.google.com/gke-tpu-topology", "4x4x4"},
        {"cloud.google.com/gce-topology-block", "block-7"},
        {"cloud.google.com/gce-topology-subblock", "sb-3"},
        {"cloud.google.com/gke-tpu-partition-4x4x4-id", "p-3a"},
        {"cloud.google.com/gke-tpu-partition-4x4x4-state", "DEGRADED"},
        {"sliced.io/tpu-host-coords", "1-0-2"}},
       {{"ray.io/accelerator-type", "TPU-V7X"},
        {"ray.io/tpu-slice-name", "p-3a"},
        {"sliced.io/tpu-block", "block-7"},
        {"sliced.io/tpu-partition-state", "DEGRADED"},
        {"ray.io/tpu-worker-id", "9"}}},
      {"TPU_NAME and TPU_WORKER_ID win over the partition and position",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu7x"},
        {"cloud.google.com/gke-tpu-topology", "4x4x4"},
        {"cloud.google.com/gke-tpu-partition-4x4x4-id", "p-3a"},
        {"sliced.io/tpu-host-coords", "1-0-2"},
        {"TPU_NAME", "named"},
        {"TPU_WORKER_ID", "4"}},
       {{"ray.io/tpu-slice-name", "named"}, {"ray.io/tpu-worker-id", "4"}}},
  };
  for (const Case& c : cases) {
    auto out = TranslateNodeLabels("n1", c.in);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    for (const auto& [key, value] : c.expect_subset) {
      auto it = out->find(key);
      ASSERT_NE(it, out->end()) << c.name << ": missing " << key;
      EXPECT_EQ(it->second, value) << c.name << ": " << key;
    }
    for (const std::string& key : c.expect_absent) {
      EXPECT_FALSE(out->contains(key))
          << c.name << ": " << key << "=" << out->at(key);
    }
  }
}

// Ray's selector semantics survive translation: `!on-demand` matches a node
// that registered without a market type, and a spot node never says
// on-demand.
TEST(LabelTranslationTest, MarketTypeSelectorsMatchAsInRay) {
  auto not_on_demand =
      scheduler::ParseLabelSelector({{"ray.io/market-type", "!on-demand"}});
  ASSERT_TRUE(not_on_demand.ok()) << not_on_demand.status();
  struct MatchCase {
    const char* name;
    Labels in;
    bool matches;
  };
  const MatchCase cases[] = {
      {"Ray labels only", {{"ray.io/availability-zone", "z1"}}, true},
      {"GKE spot", {{"cloud.google.com/gke-spot", "true"}}, true},
      {"explicit spot tier", {{"sliced.io/capacity-tier", "spot"}}, true},
      {"GKE on-demand", {{"cloud.google.com/gke-nodepool", "p"}}, false},
      {"explicit on-demand market",
       {{"ray.io/market-type", "on-demand"}},
       false},
  };
  for (const MatchCase& c : cases) {
    auto out = TranslateNodeLabels("n1", c.in);
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status();
    EXPECT_EQ(scheduler::Matches(*not_on_demand, *out), c.matches) << c.name;
  }
}

TEST(LabelTranslationTest, SpotNodeSayingOnDemandMarketIsRejected) {
  const Labels cases[] = {
      {{"sliced.io/capacity-tier", "spot"},
       {"ray.io/market-type", "on-demand"}},
      {{"cloud.google.com/gke-spot", "true"},
       {"ray.io/market-type", "on-demand"}},
      {{"cloud.google.com/gke-preemptible", "true"},
       {"ray.io/market-type", "on-demand"}},
  };
  for (const Labels& in : cases) {
    auto out = TranslateNodeLabels("n1", in);
    ASSERT_FALSE(out.ok()) << in.begin()->first;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("ray.io/market-type"),
              std::string::npos)
        << out.status();
  }
}

TEST(LabelTranslationTest, UnknownTierMarketOrAnotherNodesIdIsRejected) {
  // A tier or market type sliced does not know would leave the node outside
  // every compute-class priority without a word; another node's id would
  // make node-affinity selectors match the wrong node.
  const std::pair<Labels, std::string> cases[] = {
      {{{"sliced.io/capacity-tier", "Spot"}},
       "labels[\"sliced.io/capacity-tier\"]: \"Spot\" is not a capacity "
       "tier; one of spot, flex-start, reserved, on-demand"},
      {{{"sliced.io/capacity-tier", ""}}, "sliced.io/capacity-tier"},
      {{{"sliced.io/capacity-tier", "SPOT"},
        {"ray.io/market-type", "on-demand"}},
       "sliced.io/capacity-tier"},
      {{{"ray.io/market-type", "Spot"}},
       "labels[\"ray.io/market-type\"]: \"Spot\" is not a market type; "
       "one of spot, on-demand"},
      {{{"ray.io/node-id", "n2"}},
       "labels[\"ray.io/node-id\"]: \"n2\" is not this node's id \"n1\""},
  };
  for (const auto& [in, message] : cases) {
    auto out = TranslateNodeLabels("n1", in);
    ASSERT_FALSE(out.ok()) << message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(message), std::string::npos)
        << out.status();
  }
  // Its own id, and each known tier and market type, are fine.
  EXPECT_TRUE(TranslateNodeLabels("n1", {{"ray.io/node-id", "n1"}}).ok());
  for (const char* tier : {"spot", "flex-start", "reserved", "on-demand"}) {
    EXPECT_TRUE(
        TranslateNodeLabels("n1", {{"sliced.io/capacity-tier", tier}}).ok())
        << tier;
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
