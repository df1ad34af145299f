#include "server/core/scaling_config.h"

#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "scheduler/labels.h"

namespace sliced::server {
namespace {

using scheduler::Strategy;
using scheduler::TpuGeneration;

constexpr int64_t kUnit = scheduler::kResourceScale;

// Builder for configs: TpuConfig(4, "4x4") is the seed example.
ScalingConfig TpuConfig(int num_workers, const std::string& topology,
                        const std::string& accelerator = "TPU-V6E") {
  ScalingConfig c;
  c.num_workers = num_workers;
  c.use_tpu = true;
  c.topology = topology;
  c.accelerator_type = accelerator;
  return c;
}

ScalingConfig CpuConfig(int num_workers) {
  ScalingConfig c;
  c.num_workers = num_workers;
  return c;
}

// Placement of n bundles on nodes n0.. with addresses 10.0.0.<i>.
std::vector<PlacedNode> Placed(int n) {
  std::vector<PlacedNode> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({"n" + std::to_string(i), "10.0.0." + std::to_string(i)});
  }
  return out;
}

// A table mutator: sets resources_per_worker[name] = value.
std::function<void(ScalingConfig&)> WithResource(const std::string& name,
                                                 double value) {
  return
      [name, value](ScalingConfig& c) { c.resources_per_worker[name] = value; };
}

scheduler::LabelSelector Selector(
    const absl::btree_map<std::string, std::string>& wire) {
  auto parsed = scheduler::ParseLabelSelector(wire);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return *parsed;
}

TEST(PlanScalingConfigTest, TranslatesValidTpuConfigsToSliceRequirements) {
  struct Case {
    const char* name;
    ScalingConfig config;
    TpuGeneration generation;
    const char* topology;  // canonical
    const char* pod_type;
    int hosts_per_slice;
    int num_slices;
    int64_t tpu_per_host;  // in chips
    Strategy strategy;
  };
  ScalingConfig v4_spelled = TpuConfig(2, "2x2x2", "v4");
  ScalingConfig packed = TpuConfig(8, "4x4", "tpu-v6e");
  packed.placement_strategy = "PACK";
  const Case cases[] = {
      {"seed example: v6e 4x4, 4 workers", TpuConfig(4, "4x4"),
       TpuGeneration::kV6e, "4x4", "v6e-16", 4, 1, 4, Strategy::kSpread},
      {"two v6e 4x4 slices", TpuConfig(8, "4x4"), TpuGeneration::kV6e, "4x4",
       "v6e-16", 4, 2, 4, Strategy::kSpread},
      {"single-host v6e 2x4", TpuConfig(1, "2x4"), TpuGeneration::kV6e, "2x4",
       "v6e-8", 1, 1, 8, Strategy::kSpread},
      {"three single-host v5e 2x2", TpuConfig(3, "2x2", "TPU-V5LITEPOD"),
       TpuGeneration::kV5e, "2x2", "v5litepod-4", 1, 3, 4, Strategy::kSpread},
      {"v4 2x2x2 has 2 hosts", v4_spelled, TpuGeneration::kV4, "2x2x2", "v4-16",
       2, 1, 4, Strategy::kSpread},
      {"v7x via tpu7x", TpuConfig(4, "2x2x4", "tpu7x"), TpuGeneration::kV7x,
       "2x2x4", "v7x-32", 4, 1, 4, Strategy::kSpread},
      {"explicit PACK kept", packed, TpuGeneration::kV6e, "4x4", "v6e-16", 4, 2,
       4, Strategy::kPack},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto plan = PlanScalingConfig(c.config, Limits());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->use_tpu);
    EXPECT_EQ(plan->num_workers, c.config.num_workers);
    EXPECT_EQ(plan->shape.pod_type, c.pod_type);
    EXPECT_EQ(plan->hosts_per_slice, c.hosts_per_slice);
    EXPECT_EQ(plan->num_slices, c.num_slices);
    EXPECT_EQ(plan->request.strategy, c.strategy);
    EXPECT_TRUE(plan->request.bundles.empty());  // the solver expands them
    EXPECT_TRUE(plan->request.priorities.empty());
    ASSERT_TRUE(plan->request.slice.has_value());
    const scheduler::SliceRequirement& slice = *plan->request.slice;
    EXPECT_EQ(slice.generation, c.generation);
    EXPECT_EQ(slice.topology, c.topology);
    EXPECT_EQ(slice.num_slices, c.num_slices);
    EXPECT_EQ(slice.resources_per_host,
              (scheduler::ResourceSet{{"TPU", c.tpu_per_host * kUnit}}));
    EXPECT_TRUE(slice.selector.empty());
    EXPECT_TRUE(scheduler::ValidateRequest(plan->request).ok())
        << scheduler::ValidateRequest(plan->request);
  }
}

TEST(PlanScalingConfigTest, TpuResourcesAndSelectorGoOnEveryHost) {
  ScalingConfig c = TpuConfig(4, "4x4");
  c.resources_per_worker["TPU"] = 4;
  c.resources_per_worker["CPU"] = 8;
  c.resources_per_worker["memory"] = 0;  // dropped, as Ray does
  c.label_selector["ray.io/availability-zone"] = "in(us-east5-a,us-east5-b)";
  auto plan = PlanScalingConfig(c, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->request.slice.has_value());
  EXPECT_EQ(plan->request.slice->resources_per_host,
            (scheduler::ResourceSet{{"CPU", 8 * kUnit}, {"TPU", 4 * kUnit}}));
  EXPECT_EQ(
      plan->request.slice->selector,
      Selector({{"ray.io/availability-zone", "in(us-east5-a,us-east5-b)"}}));
}

TEST(PlanScalingConfigTest, OneTpuWorkerWithoutTopologyIsAnOrdinaryBundle) {
  ScalingConfig c;
  c.num_workers = 1;
  c.use_tpu = true;
  c.accelerator_type = "v6e";
  auto plan = PlanScalingConfig(c, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->use_tpu);
  EXPECT_FALSE(plan->request.slice.has_value());
  EXPECT_EQ(plan->num_slices, 0);
  ASSERT_EQ(plan->request.bundles.size(), 1u);
  EXPECT_EQ(plan->request.bundles[0].resources,
            (scheduler::ResourceSet{{"TPU", kUnit}}));
  EXPECT_EQ(plan->request.bundles[0].selector,
            Selector({{"ray.io/accelerator-type", "TPU-V6E"}}));
}

TEST(PlanScalingConfigTest, TranslatesNonTpuConfigsToBundles) {
  struct Case {
    const char* name;
    std::function<void(ScalingConfig&)> mutate;
    scheduler::ResourceSet resources;
    absl::btree_map<std::string, std::string> selector;
    Strategy strategy;
  };
  const Case cases[] = {
      {"defaults: 1 CPU, PACK",
       [](ScalingConfig&) {},
       {{"CPU", kUnit}},
       {},
       Strategy::kPack},
      {"GPU default",
       [](ScalingConfig& c) { c.use_gpu = true; },
       {{"GPU", kUnit}},
       {},
       Strategy::kPack},
      {"GPU added to given resources",
       [](ScalingConfig& c) {
         c.use_gpu = true;
         c.resources_per_worker["CPU"] = 2;
       },
       {{"CPU", 2 * kUnit}, {"GPU", kUnit}},
       {},
       Strategy::kPack},
      {"given resources, selector, STRICT_SPREAD",
       [](ScalingConfig& c) {
         c.resources_per_worker["CPU"] = 0.5;
         c.resources_per_worker["memory"] = 1 << 30;
         c.label_selector["ray.io/market-type"] = "!spot";
         c.placement_strategy = "STRICT_SPREAD";
       },
       {{"CPU", kUnit / 2}, {"memory", (int64_t{1} << 30) * kUnit}},
       {{"ray.io/market-type", "!spot"}},
       Strategy::kStrictSpread},
      {"SPREAD",
       [](ScalingConfig& c) { c.placement_strategy = "SPREAD"; },
       {{"CPU", kUnit}},
       {},
       Strategy::kSpread},
      {"STRICT_PACK",
       [](ScalingConfig& c) { c.placement_strategy = "STRICT_PACK"; },
       {{"CPU", kUnit}},
       {},
       Strategy::kStrictPack},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScalingConfig config = CpuConfig(3);
    c.mutate(config);
    auto plan = PlanScalingConfig(config, Limits());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_FALSE(plan->use_tpu);
    EXPECT_EQ(plan->num_workers, 3);
    EXPECT_FALSE(plan->request.slice.has_value());
    EXPECT_EQ(plan->request.strategy, c.strategy);
    ASSERT_EQ(plan->request.bundles.size(), 3u);
    for (const scheduler::Bundle& b : plan->request.bundles) {
      EXPECT_EQ(b.resources, c.resources);
      EXPECT_EQ(b.selector, Selector(c.selector));
      EXPECT_TRUE(b.pinned_node_id.empty());
    }
  }
}

TEST(PlanScalingConfigTest, RejectsInvalidConfigsNamingFieldWithRaysWording) {
  struct Case {
    const char* name;
    ScalingConfig config;
    std::function<void(ScalingConfig&)> mutate;
    const char* field;   // message starts with "scaling_config.<field>"
    const char* expect;  // substring of the message
  };
  auto none = [](ScalingConfig&) {};
  const Case cases[] = {
      {"no workers", CpuConfig(0), none, "num_workers",
       "must be at least 1, got 0"},
      {"negative workers", CpuConfig(-2), none, "num_workers",
       "must be at least 1"},
      {"too many workers", CpuConfig(10001), none, "num_workers",
       "at most 10000 workers"},
      {"gpu and tpu", TpuConfig(4, "4x4"),
       [](ScalingConfig& c) { c.use_gpu = true; }, "use_tpu",
       "Cannot specify both `use_gpu=True` and `use_tpu=True`"},
      {"tpu without topology", TpuConfig(4, ""), none, "topology",
       "`topology` must be specified in ScalingConfig when `use_tpu=True` and "
       "`num_workers` > 1"},
      {"tpu without accelerator", TpuConfig(4, "4x4", ""), none,
       "accelerator_type",
       "`accelerator_type` must be specified in ScalingConfig when "
       "`use_tpu=True` "
       "and `num_workers` > 1"},
      {"one tpu worker without accelerator", TpuConfig(1, "2x4", ""), none,
       "accelerator_type",
       "`accelerator_type` must be specified in ScalingConfig"},
      {"unknown accelerator", TpuConfig(4, "4x4", "TPU-V9"), none,
       "accelerator_type", "TPU-V6E"},
      {"topology invalid for generation", TpuConfig(4, "3x3"), none, "topology",
       "3x3"},
      {"3D topology on v6e", TpuConfig(2, "2x2x2"), none, "topology", "2x2x2"},
      {"workers not a multiple of hosts", TpuConfig(6, "4x4"), none,
       "num_workers",
       "`num_workers` (6) must be a multiple of the workers per slice of "
       "topology 4x4 (v6e-16: 4 hosts x 1 worker of 4 TPU = 4)"},
      {"fewer workers than hosts", TpuConfig(2, "2x2x4", "v4"), none,
       "num_workers",
       "multiple of the workers per slice of topology 2x2x4 (v4-32: 4 hosts"},
      {"one chip per worker, workers not filling slices", TpuConfig(12, "4x4"),
       WithResource("TPU", 1), "num_workers",
       "(v6e-16: 4 hosts x 4 workers of 1 TPU = 16)"},
      {"TPU per worker not dividing the slice (Ray's message)",
       TpuConfig(5, "4x4"), WithResource("TPU", 3), "resources_per_worker",
       "The requested resources per worker (3 TPU devices) do not divide "
       "evenly into the TPU devices available per slice (16). This "
       "configuration results in an uneven distribution of workers across "
       "slices, which is not supported."},
      {"fractional chips per worker", TpuConfig(32, "4x4"),
       WithResource("TPU", 0.5), "resources_per_worker",
       "a worker's TPU must be whole devices"},
      {"unknown strategy", CpuConfig(2),
       [](ScalingConfig& c) { c.placement_strategy = "pack"; },
       "placement_strategy", "PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"},
      {"STRICT_PACK across TPU hosts", TpuConfig(4, "4x4"),
       [](ScalingConfig& c) { c.placement_strategy = "STRICT_PACK"; },
       "placement_strategy", "4 TPU workers need 4 TPU hosts"},
      {"negative resource", CpuConfig(2), WithResource("CPU", -1),
       "resources_per_worker[\"CPU\"]", "must be >= 0"},
      {"bad resource name", CpuConfig(2), WithResource("a b", 1),
       "resources_per_worker", "a b"},
      {"all-zero resources", CpuConfig(2), WithResource("CPU", 0),
       "resources_per_worker", "every amount is 0"},
      {"more TPU than a host has", TpuConfig(4, "4x4"), WithResource("TPU", 8),
       "resources_per_worker",
       "asks for 8 TPU per worker, but a v6e-16 host has 4"},
      {"TPU without use_tpu", CpuConfig(2), WithResource("TPU", 4),
       "resources_per_worker",
       "`use_tpu` is False but `TPU` was found in `resources_per_worker`"},
      {"use_tpu without TPU resources", TpuConfig(4, "4x4"),
       WithResource("CPU", 8), "resources_per_worker",
       "`use_tpu` is True but `TPU` is set to 0 in `resources_per_worker`"},
      {"GPU without use_gpu", CpuConfig(2), WithResource("GPU", 1),
       "resources_per_worker",
       "`use_gpu` is False but `GPU` was found in `resources_per_worker`"},
      {"topology without use_tpu", CpuConfig(2),
       [](ScalingConfig& c) { c.topology = "4x4"; }, "topology",
       "needs `use_tpu=True`"},
      {"accelerator without use_tpu", CpuConfig(2),
       [](ScalingConfig& c) { c.accelerator_type = "TPU-V6E"; },
       "accelerator_type", "`use_tpu` is False"},
      {"bad selector key", CpuConfig(2),
       [](ScalingConfig& c) { c.label_selector["-bad"] = "x"; },
       "label_selector", "-bad"},
      {"bad selector on TPU", TpuConfig(4, "4x4"),
       [](ScalingConfig& c) { c.label_selector["zone"] = "in()"; },
       "label_selector", "zone"},
      {"STRICT_SPREAD with several TPU workers per host", TpuConfig(16, "4x4"),
       [](ScalingConfig& c) {
         c.resources_per_worker["TPU"] = 1;
         c.placement_strategy = "STRICT_SPREAD";
       },
       "placement_strategy", "runs 4 workers of 1 TPU"},
      {"too many selector entries", CpuConfig(2),
       [](ScalingConfig& c) {
         for (int i = 0; i < 65; ++i)
           c.label_selector["k" + std::to_string(i)] = "v";
       },
       "label_selector", "at most 64 entries, got 65"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScalingConfig config = c.config;
    c.mutate(config);
    auto plan = PlanScalingConfig(config, Limits());
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(plan.status().message());
    EXPECT_EQ(message.rfind(absl::StrCat("scaling_config.", c.field), 0), 0u)
        << message;
    EXPECT_NE(message.find(c.expect), std::string::npos) << message;
  }
}

TEST(PlanScalingConfigTest, AConfigsRequestKeepsTheCreateLimits) {
  // 2,000 single-host v6e 1x1 slices: past the 1,024 slices of a group.
  auto many = PlanScalingConfig(TpuConfig(2000, "1x1"), Limits());
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find(
                "scaling_config.num_workers: 2000 workers need 2000 slices"),
            std::string::npos)
      << many.status();
  Limits small;
  small.max_bundles_per_pg = 100;
  // 400 workers of v6e 4x4: 100 slices of 4 hosts, 400 host bundles.
  auto hosts = PlanScalingConfig(TpuConfig(400, "4x4"), small);
  EXPECT_NE(hosts.status().message().find("400 hosts; at most 100 bundles"),
            std::string::npos)
      << hosts.status();
  auto cpus = PlanScalingConfig(CpuConfig(101), small);
  EXPECT_NE(cpus.status().message().find("101 bundles; at most 100"),
            std::string::npos)
      << cpus.status();
  EXPECT_TRUE(PlanScalingConfig(CpuConfig(100), small).ok());
  EXPECT_TRUE(PlanScalingConfig(TpuConfig(1024, "1x1"), Limits()).ok());
}

TEST(PlanScalingConfigTest, SeveralWorkersPerHostFollowRaysFormula) {
  struct Case {
    const char* name;
    ScalingConfig config;
    double tpu_per_worker;
    int num_slices;
    int workers_per_host;
    int64_t tpu_per_host;  // units
  };
  const Case cases[] = {
      // The one-process-per-chip config of issue 13.
      {"v6e 4x4, TPU:1 x 16", TpuConfig(16, "4x4"), 1, 1, 4, 4},
      // Ray's own test: TPU:1 workers on two v4-16 slices.
      {"v4 2x2x2 x 2, TPU:1 x 16", TpuConfig(16, "2x2x2", "TPU-V4"), 1, 2, 4,
       4},
      {"v6e 4x4, TPU:2 x 8", TpuConfig(8, "4x4"), 2, 1, 2, 4},
      {"v6e 2x4 single host, TPU:1 x 8", TpuConfig(8, "2x4"), 1, 1, 8, 8},
      {"default: one worker per host", TpuConfig(8, "4x4"), 0, 2, 1, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScalingConfig config = c.config;
    if (c.tpu_per_worker > 0) {
      config.resources_per_worker["TPU"] = c.tpu_per_worker;
      config.resources_per_worker["CPU"] = 2;
    }
    auto plan = PlanScalingConfig(config, Limits());
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->request.slice.has_value());
    EXPECT_EQ(plan->num_slices, c.num_slices);
    EXPECT_EQ(plan->request.slice->num_slices, c.num_slices);
    EXPECT_EQ(plan->workers_per_host, c.workers_per_host);
    EXPECT_EQ(plan->request.slice->resources_per_host.at("TPU"),
              c.tpu_per_host * kUnit);
    if (c.tpu_per_worker > 0) {
      // The host bundle carries every worker's resources.
      EXPECT_EQ(plan->request.slice->resources_per_host.at("CPU"),
                2 * c.workers_per_host * kUnit);
    }
  }
}

TEST(PlanScalingConfigTest, OneTpuWorkerAsksForASupportedChipCount) {
  // Ray's TPU accelerator takes 1, 2, 4 or 8 chips per task or actor.
  ScalingConfig config = TpuConfig(1, "");
  for (double tpu : {1.0, 2.0, 4.0, 8.0}) {
    config.resources_per_worker["TPU"] = tpu;
    auto plan = PlanScalingConfig(config, Limits());
    ASSERT_TRUE(plan.ok()) << tpu << ": " << plan.status();
    EXPECT_EQ(plan->request.bundles[0].resources.at("TPU"),
              static_cast<int64_t>(tpu) * kUnit);
  }
  for (double tpu : {0.5, 3.0, 16.0, 0.0, -1.0}) {
    config.resources_per_worker["TPU"] = tpu;
    auto plan = PlanScalingConfig(config, Limits());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << tpu;
    EXPECT_NE(plan.status().message().find(
                  tpu > 0 ? "scaling_config.resources_per_worker[\"TPU\"]: "
                            "must be 1, 2, 4 or 8"
                          : "scaling_config.resources_per_worker"),
              std::string::npos)
        << plan.status();
  }
}

TEST(PlanScalingConfigTest, TpuResourcePerChipScalesTheSliceAsRayDoes) {
  // v7x 2x2x2: 8 chips on 2 hosts; with 2 TPU per chip a slice offers 16.
  ScalingConfig config = TpuConfig(2, "2x2x2", "TPU-V7X");
  config.tpu_resource_per_chip = 2;
  auto plan = PlanScalingConfig(config, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->request.slice->tpu_resource_per_chip, 2);
  EXPECT_EQ(plan->request.slice->resources_per_host.at("TPU"), 8 * kUnit);
  EXPECT_EQ(plan->workers_per_host, 1);

  config = TpuConfig(16, "2x2x2", "TPU-V7X");
  config.tpu_resource_per_chip = 2;
  config.resources_per_worker["TPU"] = 1;  // one TensorCore each
  plan = PlanScalingConfig(config, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slices, 1);
  EXPECT_EQ(plan->workers_per_host, 8);
  EXPECT_EQ(plan->chips_per_worker, 0);  // workers share chips
  const std::vector<Worker> workers = BuildWorkers(*plan, Placed(2), {"x"});
  ASSERT_EQ(workers.size(), 16u);
  EXPECT_EQ(workers[9].node_id, "n1");
  EXPECT_EQ(workers[9].env.count("TPU_VISIBLE_CHIPS"), 0u);

  config = TpuConfig(8, "2x2x2", "TPU-V7X");
  config.tpu_resource_per_chip = 2;
  config.resources_per_worker["TPU"] = 2;  // one whole chip each
  plan = PlanScalingConfig(config, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->chips_per_worker, 1);
  EXPECT_EQ(
      BuildWorkers(*plan, Placed(2), {"x"})[5].env.at("TPU_VISIBLE_CHIPS"),
      "1");

  config = TpuConfig(4, "4x4");
  config.tpu_resource_per_chip = 2;
  auto v6e = PlanScalingConfig(config, Limits());
  EXPECT_EQ(v6e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v6e.status().message().find(
                "scaling_config.tpu_resource_per_chip: must be 1 on v6e"),
            std::string::npos)
      << v6e.status();
  // Without a topology too (one worker on a host of that generation).
  config = TpuConfig(1, "");
  config.tpu_resource_per_chip = 2;
  auto one = PlanScalingConfig(config, Limits());
  EXPECT_NE(one.status().message().find(
                "scaling_config.tpu_resource_per_chip: must be 1 on v6e"),
            std::string::npos)
      << one.status();
  config.tpu_resource_per_chip = -1;
  auto negative = PlanScalingConfig(config, Limits());
  EXPECT_NE(negative.status().message().find(
                "`tpu_resource_per_chip` must be a positive integer."),
            std::string::npos)
      << negative.status();
}

TEST(PlanScalingConfigTest, ASelectorOnTheAcceleratorTypeMustAdmitIt) {
  for (const std::string& topology : {std::string(""), std::string("4x4")}) {
    ScalingConfig config = TpuConfig(topology.empty() ? 1 : 4, topology);
    for (const char* agrees : {"TPU-V6E", "in(TPU-V6E,TPU-V5P)", "!TPU-V5P"}) {
      config.label_selector["ray.io/accelerator-type"] = agrees;
      auto plan = PlanScalingConfig(config, Limits());
      ASSERT_TRUE(plan.ok()) << agrees << ": " << plan.status();
      // One worker: its bundle asks for TPU-V6E hosts only, not whatever
      // else the caller's term admits (a slice asks by its generation).
      if (topology.empty()) {
        ASSERT_EQ(plan->request.bundles.size(), 1u);
        EXPECT_EQ(
            scheduler::SelectorToString(plan->request.bundles[0].selector),
            "{ray.io/accelerator-type: TPU-V6E}")
            << agrees;
      }
    }
    for (const char* excludes : {"TPU-V5P", "!TPU-V6E", "in(TPU-V4)"}) {
      config.label_selector["ray.io/accelerator-type"] = excludes;
      auto plan = PlanScalingConfig(config, Limits());
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(
          plan.status().message().find(absl::StrCat(
              "scaling_config.label_selector[ray.io/accelerator-type]: \"",
              excludes,
              "\" excludes the hosts of accelerator_type TPU-V6E "
              "(labelled TPU-V6E)")),
          std::string::npos)
          << excludes << ": " << plan.status();
    }
  }
}

TEST(BuildWorkersTest, OneProcessPerChipGetsLibtpuMultiProcessEnv) {
  ScalingConfig config = TpuConfig(16, "4x4");
  config.resources_per_worker["TPU"] = 1;
  auto plan = PlanScalingConfig(config, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<Worker> workers = BuildWorkers(*plan, Placed(4), {"s-a"});
  ASSERT_EQ(workers.size(), 16u);
  std::set<std::pair<std::string, std::string>> chips;  // (node, chip)
  for (int r = 0; r < 16; ++r) {
    SCOPED_TRACE(r);
    const Worker& w = workers[r];
    EXPECT_EQ(w.rank, r);
    EXPECT_EQ(w.node_id, "n" + std::to_string(r / 4));  // host-major
    EXPECT_EQ(w.tpu_worker_id, r / 4);
    EXPECT_EQ(w.env.at("JAX_PROCESS_ID"), std::to_string(r));
    EXPECT_EQ(w.env.at("JAX_NUM_PROCESSES"), "16");
    EXPECT_EQ(w.env.at("TPU_WORKER_ID"), std::to_string(r / 4));
    EXPECT_EQ(w.env.at("TPU_VISIBLE_CHIPS"), std::to_string(r % 4));
    EXPECT_EQ(w.env.at("TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,1,1");
    // Host grid 2,2,1 x processes of a host 2,2,1.
    EXPECT_EQ(w.env.at("TPU_PROCESS_BOUNDS"), "4,4,1");
    EXPECT_EQ(w.env.at("CLOUD_TPU_TASK_ID"), std::to_string(r));
    EXPECT_EQ(w.env.at("TPU_PROCESS_PORT"), std::to_string(8477 + r % 4));
    EXPECT_TRUE(chips.emplace(w.node_id, w.env.at("TPU_VISIBLE_CHIPS")).second)
        << "a chip given twice";
  }
  EXPECT_EQ(workers[5].env.at("TPU_PROCESS_ADDRESSES"),
            "10.0.0.0:8477,10.0.0.0:8478,10.0.0.0:8479,10.0.0.0:8480,"
            "10.0.0.1:8477,10.0.0.1:8478,10.0.0.1:8479,10.0.0.1:8480,"
            "10.0.0.2:8477,10.0.0.2:8478,10.0.0.2:8479,10.0.0.2:8480,"
            "10.0.0.3:8477,10.0.0.3:8478,10.0.0.3:8479,10.0.0.3:8480");
}

TEST(BuildWorkersTest, TwoChipsPerProcessTakeASubBoxOfTheHost) {
  ScalingConfig config = TpuConfig(8, "4x4");
  config.resources_per_worker["TPU"] = 2;
  auto plan = PlanScalingConfig(config, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<Worker> workers = BuildWorkers(*plan, Placed(4), {"s-a"});
  ASSERT_EQ(workers.size(), 8u);
  EXPECT_EQ(workers[2].node_id, "n1");
  EXPECT_EQ(workers[3].env.at("TPU_VISIBLE_CHIPS"), "2,3");
  // Chips 2,3 along y; the host's two processes side by side along x.
  EXPECT_EQ(workers[3].env.at("TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,2,1");
  EXPECT_EQ(workers[3].env.at("TPU_PROCESS_BOUNDS"), "4,2,1");
  EXPECT_EQ(workers[3].env.at("CLOUD_TPU_TASK_ID"), "3");
  // Ray must not replace these chips with its own choice.
  EXPECT_EQ(workers[3].env.at("RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS"), "1");
  // A v6e 2x4 host (chips 2x4) with two 4-chip workers: a column each.
  config = TpuConfig(2, "2x4");
  config.resources_per_worker["TPU"] = 4;
  plan = PlanScalingConfig(config, Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<Worker> halves = BuildWorkers(*plan, Placed(1), {"s-b"});
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[1].env.at("TPU_VISIBLE_CHIPS"), "4,5,6,7");
  EXPECT_EQ(halves[1].env.at("TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,4,1");
  EXPECT_EQ(halves[1].env.at("TPU_PROCESS_BOUNDS"), "2,1,1");
  // One worker per host keeps the single-process env.
  auto whole = PlanScalingConfig(TpuConfig(4, "4x4"), Limits());
  ASSERT_TRUE(whole.ok());
  const std::vector<Worker> one = BuildWorkers(*whole, Placed(4), {"s-a"});
  EXPECT_EQ(one[1].env.count("TPU_VISIBLE_CHIPS"), 0u);
  EXPECT_EQ(one[1].env.count("RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS"), 0u);
}

// Seeded: random shapes, TPU per worker and slice counts. No chip is given
// twice, every worker's chips are inside its host, ranks follow worker ids.
TEST(BuildWorkersTest, PropertyChipsDisjointInsideHostsRanksByWorkerId) {
  struct Shape {
    const char* accel;
    const char* topology;
    int chips_per_host;
  };
  const Shape shapes[] = {{"TPU-V6E", "4x4", 4},      {"TPU-V6E", "8x8", 4},
                          {"TPU-V6E", "2x4", 8},      {"TPU-V4", "2x2x2", 4},
                          {"TPU-V4", "2x2x4", 4},     {"TPU-V5P", "4x4x4", 4},
                          {"TPU-V5LITEPOD", "2x2", 4}};
  std::mt19937 rng(20261123);
  for (int round = 0; round < 200; ++round) {
    const Shape& shape = shapes[rng() % std::size(shapes)];
    const int divisors[] = {1, 2, 4, 8};
    int tpw = divisors[rng() % 4];
    while (shape.chips_per_host % tpw != 0) tpw /= 2;
    auto resolved = scheduler::ResolveTpuShape(
        *scheduler::ParseTpuGeneration(shape.accel), shape.topology);
    ASSERT_TRUE(resolved.ok());
    const int hosts = static_cast<int>(resolved->hosts);
    const int per_slice = hosts * (shape.chips_per_host / tpw);
    const int num_slices = 1 + static_cast<int>(rng() % 3);
    ScalingConfig config =
        TpuConfig(per_slice * num_slices, shape.topology, shape.accel);
    config.resources_per_worker["TPU"] = tpw;
    SCOPED_TRACE(absl::StrCat(shape.accel, " ", shape.topology, " TPU:", tpw,
                              " x", config.num_workers));
    auto plan = PlanScalingConfig(config, Limits());
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::vector<Worker> workers =
        BuildWorkers(*plan, Placed(hosts * num_slices),
                     std::vector<std::string>(num_slices, "s"));
    ASSERT_EQ(static_cast<int>(workers.size()), config.num_workers);
    std::set<std::pair<std::string, int>> taken;
    int last_host = -1;
    for (const Worker& w : workers) {
      const int host = w.slice_index * hosts + w.tpu_worker_id;
      EXPECT_GE(host, last_host) << "ranks follow worker ids";
      last_host = host;
      EXPECT_EQ(w.node_id, "n" + std::to_string(host));
      std::vector<std::string> chips = {"0"};
      if (plan->workers_per_host > 1) {
        chips = absl::StrSplit(w.env.at("TPU_VISIBLE_CHIPS"), ',');
      }
      EXPECT_EQ(static_cast<int>(chips.size()) * plan->workers_per_host,
                plan->workers_per_host > 1 ? shape.chips_per_host : 1);
      for (const std::string& c : chips) {
        const int chip = std::stoi(c);
        EXPECT_GE(chip, 0);
        EXPECT_LT(chip, shape.chips_per_host);
        EXPECT_TRUE(taken.emplace(w.node_id, chip).second)
            << w.node_id << " chip " << chip << " given twice";
      }
    }
  }
}

TEST(BuildWorkersTest, SingleSliceGivesTpuEnvInWorkerIdOrder) {
  auto plan = PlanScalingConfig(TpuConfig(4, "4x4"), Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Bundle i is TPU worker i of slice "s-a"; the hosts are deliberately not in
  // name or address order, so TPU_WORKER_HOSTNAMES must follow bundle order.
  const std::vector<PlacedNode> placed = {{"h3", "10.1.0.13"},
                                          {"h0", "10.1.0.10"},
                                          {"h2", "10.1.0.12"},
                                          {"h1", "10.1.0.11"}};
  const std::vector<Worker> workers = BuildWorkers(*plan, placed, {"s-a"});
  ASSERT_EQ(workers.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const Worker& w = workers[r];
    EXPECT_EQ(w.rank, r);
    EXPECT_EQ(w.node_id, placed[r].node_id);
    EXPECT_EQ(w.address, placed[r].address);
    EXPECT_EQ(w.slice_name, "s-a");
    EXPECT_EQ(w.slice_index, 0);
    EXPECT_EQ(w.tpu_worker_id, r);
    const auto& env = w.env;
    EXPECT_EQ(env.at("TPU_WORKER_ID"), std::to_string(r));
    EXPECT_EQ(env.at("TPU_WORKER_HOSTNAMES"),
              "10.1.0.13,10.1.0.10,10.1.0.12,10.1.0.11");
    EXPECT_EQ(env.at("TPU_NAME"), "s-a");
    EXPECT_EQ(env.at("JAX_COORDINATOR_ADDRESS"), "10.1.0.13:8476");
    EXPECT_EQ(env.at("JAX_COORDINATOR_PORT"), "8476");
    EXPECT_EQ(env.at("JAX_NUM_PROCESSES"), "4");
    EXPECT_EQ(env.at("JAX_PROCESS_ID"), std::to_string(r));
    EXPECT_EQ(env.count("MEGASCALE_COORDINATOR_ADDRESS"), 0u);
    EXPECT_EQ(env.count("MEGASCALE_NUM_SLICES"), 0u);
    EXPECT_EQ(env.size(), 7u);
  }
}

TEST(BuildWorkersTest, TwoSlicesGetMegascaleEnv) {
  auto plan = PlanScalingConfig(TpuConfig(8, "4x4"), Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<Worker> workers =
      BuildWorkers(*plan, Placed(8), {"s-a", "s-b"});
  ASSERT_EQ(workers.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE(r);
    const Worker& w = workers[r];
    const int slice = r / 4;
    EXPECT_EQ(w.rank, r);
    EXPECT_EQ(w.slice_index, slice);
    EXPECT_EQ(w.tpu_worker_id, r % 4);
    EXPECT_EQ(w.slice_name, slice == 0 ? "s-a" : "s-b");
    const auto& env = w.env;
    EXPECT_EQ(env.at("TPU_WORKER_ID"), std::to_string(r % 4));
    EXPECT_EQ(env.at("TPU_NAME"), slice == 0 ? "s-a" : "s-b");
    EXPECT_EQ(env.at("TPU_WORKER_HOSTNAMES"),
              slice == 0 ? "10.0.0.0,10.0.0.1,10.0.0.2,10.0.0.3"
                         : "10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7");
    EXPECT_EQ(env.at("MEGASCALE_COORDINATOR_ADDRESS"),
              "10.0.0.0");  // slice 0 worker 0
    EXPECT_EQ(env.at("MEGASCALE_PORT"), "8081");
    EXPECT_EQ(env.at("MEGASCALE_NUM_SLICES"), "2");
    EXPECT_EQ(env.at("MEGASCALE_SLICE_ID"), std::to_string(slice));
    EXPECT_EQ(env.at("JAX_COORDINATOR_ADDRESS"), "10.0.0.0:8476");
    EXPECT_EQ(env.at("JAX_NUM_PROCESSES"), "8");
    EXPECT_EQ(env.at("JAX_PROCESS_ID"), std::to_string(r));
  }
}

TEST(BuildWorkersTest, NonTpuWorkersGetOnlyJaxEnvInBundleOrder) {
  auto plan = PlanScalingConfig(CpuConfig(3), Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<PlacedNode> placed = {
      {"c", "fd00::3"}, {"a", "10.0.0.1"}, {"c", "fd00::3"}};
  const std::vector<Worker> workers = BuildWorkers(*plan, placed, {});
  ASSERT_EQ(workers.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    const Worker& w = workers[r];
    EXPECT_EQ(w.rank, r);
    EXPECT_EQ(w.node_id, placed[r].node_id);
    EXPECT_EQ(w.slice_name, "");
    const auto& env = w.env;
    EXPECT_EQ(env.size(), 4u);
    EXPECT_EQ(env.at("JAX_COORDINATOR_ADDRESS"), "[fd00::3]:8476");
    EXPECT_EQ(env.at("JAX_NUM_PROCESSES"), "3");
    EXPECT_EQ(env.at("JAX_PROCESS_ID"), std::to_string(r));
    EXPECT_EQ(env.count("TPU_WORKER_ID"), 0u);
  }
}

TEST(BuildWorkersTest, SingleHostSliceAndShortInputsAreSafe) {
  auto plan = PlanScalingConfig(TpuConfig(1, "2x4"), Limits());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Worker> workers = BuildWorkers(*plan, Placed(1), {"solo"});
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].env.at("TPU_WORKER_HOSTNAMES"), "10.0.0.0");
  EXPECT_EQ(workers[0].env.at("TPU_NAME"), "solo");
  EXPECT_EQ(workers[0].env.at("JAX_NUM_PROCESSES"), "1");
  // A caller's mistake (no placement passed) yields empty strings, not a crash.
  workers = BuildWorkers(*plan, {}, {});
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].node_id, "");
  EXPECT_EQ(workers[0].env.at("TPU_NAME"), "");
}

}  // namespace
}  // namespace sliced::server
