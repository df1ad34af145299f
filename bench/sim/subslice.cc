// The sub-slice comparison; see subslice.h.
#include "bench/sim/subslice.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/json.h"
#include "bench/common/output.h"
#include "bench/common/rng.h"
#include "bench/gen/fleet.h"
#include "bench/gen/trace.h"
#include "bench/sim/sim.h"
#include "scheduler/subslices.h"

namespace sliced::bench {
namespace {

using scheduler::InventorySnapshot;
using scheduler::kResourceScale;
using scheduler::TpuGeneration;
using scheduler::TpuShape;

constexpr const char* kSizes[] = {"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4"};
constexpr double kSizeWeights[] = {0.35, 0.25, 0.20, 0.12, 0.08};
constexpr const char* kPodZones[] = {"us-central1-a", "us-central1-b"};
constexpr char kBaselineName[] = "first-fit carving";

TpuShape ShapeOf(TpuGeneration generation, const char* topology) {
  auto shape = scheduler::ResolveTpuShape(generation, topology);
  if (!shape.ok()) std::abort();  // the tables above are constant and valid
  return *shape;
}

// `pods` 4x4x4 pods, 60 % v5p and 40 % v7x, in two zones.
Fleet MakePods(int64_t pods, uint64_t seed) {
  Rng rng(seed * 0x2545f4914f6cdd1dULL + 7);
  Fleet fleet;
  int64_t count[2] = {0, 0};
  for (int64_t p = 0; p < pods; ++p) {
    const bool v7x = rng.Bernoulli(0.4);
    const TpuShape shape =
        ShapeOf(v7x ? TpuGeneration::kV7x : TpuGeneration::kV5p, "4x4x4");
    ++count[v7x];
    const std::string name = absl::StrFormat("pod%04d-%s", p, shape.pod_type);
    const char* zone = kPodZones[rng.Int(0, 1)];
    for (int64_t w = 0; w < shape.hosts; ++w) {
      scheduler::Node n;
      n.node_id = absl::StrCat(name, "-w", w);
      n.address = absl::StrCat(n.node_id, ".bench.internal");
      n.labels = {
          {std::string(scheduler::kLabelNodeId), n.node_id},
          {std::string(scheduler::kLabelZone), zone},
          {std::string(scheduler::kLabelCapacityTier), "reserved"},
          {std::string(scheduler::kLabelAcceleratorType),
           std::string(scheduler::TpuAcceleratorType(shape.generation))},
          {std::string(scheduler::kLabelTpuTopology), shape.topology},
          {std::string(scheduler::kLabelTpuSliceName), name},
          {std::string(scheduler::kLabelTpuWorkerId), absl::StrCat(w)},
      };
      n.resources = {{"CPU", 200 * kResourceScale},
                     {"TPU", shape.chips_per_host * kResourceScale}};
      fleet.nodes.push_back(std::move(n));
    }
    fleet.tpu_chips += shape.chips;
  }
  for (int g = 0; g < 2; ++g) {
    if (count[g] > 0) {
      fleet.shapes.push_back(
          {ShapeOf(g ? TpuGeneration::kV7x : TpuGeneration::kV5p, "4x4x4"),
           count[g]});
    }
  }
  return fleet;
}

// Slice jobs of mixed sizes, each allowed to be carved; generation by the
// fleet's chips of it; arrivals offer `load` x the fleet's chips.
std::vector<Job> MakeTrace(const Fleet& fleet, int64_t jobs, uint64_t seed,
                           double load) {
  Rng rng(seed * 0x9e3779b97f4a7c15ULL + 17);
  const std::vector<double> size_w(std::begin(kSizeWeights),
                                   std::end(kSizeWeights));
  std::vector<double> gen_w;
  for (const FleetShape& s : fleet.shapes) {
    gen_w.push_back(static_cast<double>(s.slices));
  }
  std::vector<Job> out(jobs);
  double offered = 0;
  for (int64_t i = 0; i < jobs; ++i) {
    Job& job = out[i];
    job.id = i;
    const TpuGeneration gen = fleet.shapes[rng.Weighted(gen_w)].shape.generation;
    const TpuShape shape = ShapeOf(gen, kSizes[rng.Weighted(size_w)]);
    job.kind = JobKind::kSlice;
    job.chips = shape.chips;
    job.shape = shape.pod_type;
    job.duration_s = std::clamp(rng.Exponential(3600), 60.0, 12 * 3600.0);
    scheduler::SliceRequirement req;
    req.generation = gen;
    req.topology = shape.topology;
    req.subslicing = scheduler::Subslicing::kAllowed;
    job.request.slice = req;
    offered += static_cast<double>(job.chips) * job.duration_s;
  }
  const double mean_gap =
      offered / jobs / (load * static_cast<double>(fleet.tpu_chips));
  double t = 0;
  for (Job& job : out) {
    t += rng.Exponential(mean_gap);
    job.arrival_s = t;
  }
  return out;
}

// The baseline: pods in name order (snapshot order), aligned boxes in origin
// order (x fastest), the first whose hosts hold no TPU; hosts in worker-id
// order stand for positions (the fleet reports none).
class FirstFitCarving : public Policy {
 public:
  Placement Place(const InventorySnapshot& snap, const Job& job) override {
    const scheduler::SliceRequirement& req = *job.request.slice;
    const TpuShape want = ShapeOf(req.generation, req.topology.c_str());
    for (const scheduler::SliceState& slice : snap.ListSlices()) {
      if (!slice.info.intact) continue;
      auto gen = scheduler::ParseTpuGeneration(slice.info.accelerator_type);
      if (!gen.ok() || *gen != req.generation) continue;
      const TpuShape parent = ShapeOf(*gen, slice.info.topology.c_str());
      if (parent.chips_per_host != want.chips_per_host) continue;
      const std::vector<int>& g = parent.host_grid;
      const std::vector<int>& b = want.host_grid;
      if (b[0] > g[0] || b[1] > g[1] || b[2] > g[2]) continue;
      for (int oz = 0; oz + b[2] <= g[2]; oz += b[2]) {
        for (int oy = 0; oy + b[1] <= g[1]; oy += b[1]) {
          for (int ox = 0; ox + b[0] <= g[0]; ox += b[0]) {
            Placement p = Box(snap, slice, g, b, {ox, oy, oz}, want);
            if (!p.nodes.empty()) return p;
          }
        }
      }
    }
    return {};
  }

 private:
  static Placement Box(const InventorySnapshot& snap,
                       const scheduler::SliceState& slice,
                       const std::vector<int>& g, const std::vector<int>& b,
                       const std::vector<int>& o, const TpuShape& want) {
    Placement p;
    for (int z = 0; z < b[2]; ++z) {
      for (int y = 0; y < b[1]; ++y) {
        for (int x = 0; x < b[0]; ++x) {
          const int cell = (o[0] + x) + g[0] * ((o[1] + y) + g[1] * (o[2] + z));
          const std::string& id = slice.info.node_ids[cell];
          auto free = snap.FreeResources(id);
          const scheduler::Node* node = snap.FindNode(id);
          if (!free.ok() || node == nullptr) return {};
          auto held = free->find("TPU");
          auto total = node->resources.find("TPU");
          if (held == free->end() || total == node->resources.end() ||
              held->second < total->second) {
            return {};
          }
          p.nodes.push_back(static_cast<uint32_t>(snap.NodeIndex(id)));
          p.resources.push_back(
              {{"TPU", want.chips_per_host * kResourceScale}});
        }
      }
    }
    return p;
  }
};

// The mean over pods of the largest free aligned box (a free pod counts
// whole), in chips.
double MeanLargestFreeBox(const InventorySnapshot& snap) {
  const std::vector<scheduler::SliceState> slices = snap.ListSlices();
  if (slices.empty()) return 0;
  double sum = 0;
  for (const scheduler::SliceState& slice : slices) {
    if (!slice.info.intact) continue;
    auto gen = scheduler::ParseTpuGeneration(slice.info.accelerator_type);
    if (!gen.ok()) continue;
    if (slice.free) {
      sum += static_cast<double>(ShapeOf(*gen, slice.info.topology.c_str()).chips);
      continue;
    }
    const std::string largest =
        scheduler::FreeSubslices(snap, slice.info.name).largest_free;
    if (!largest.empty()) {
      sum += static_cast<double>(ShapeOf(*gen, largest.c_str()).chips);
    }
  }
  return sum / static_cast<double>(slices.size());
}

struct Row {
  uint64_t seed = 0;
  SimResult result;
};

}  // namespace

int RunSubslice(const SubsliceOptions& o) {
  std::vector<Row> rows;
  double offered_load = o.load;
  for (int k = 0; k < o.seeds; ++k) {
    const uint64_t seed = o.seed + k;
    Progress("sub-slice trace, seed %d", seed);
    const Fleet fleet = MakePods(o.pods, seed);
    const std::vector<Job> trace = MakeTrace(fleet, o.jobs, seed, o.load);
    const std::vector<bool> feasible = FeasibleJobs(fleet, trace);
    SimOptions so;
    so.seed = seed;
    so.probe = MeanLargestFreeBox;
    rows.push_back({seed, Replay(fleet, trace, feasible, PolicyKind::kSliced, so)});
    FirstFitCarving baseline;
    rows.push_back(
        {seed, ReplayWith(fleet, trace, feasible, baseline, kBaselineName, so)});
  }
  Progress("%s", "");

  std::string md = absl::StrFormat(
      "### Sub-slices of 4x4x4 pods\n\n**Command**: `sliced_sim "
      "--workload=subslice --pods=%d --jobs=%d --seed=%d --seeds=%d "
      "--load=%g`. Per seed a fleet of %d 4x4x4 pods (60 %% v5p, 40 %% v7x; "
      "16 hosts each) and %d slice jobs (2x2x1 35 %%, 2x2x2 25 %%, 2x2x4 "
      "20 %%, 2x4x4 12 %%, 4x4x4 8 %% of jobs; ~1 h each; each may be carved "
      "out of a pod) at %.0f %% offered load. The bound on utilization is "
      "the offered load (no policy holds more chip-time than is asked).\n\n"
      "| seed | policy | TPU utilization | chip-hours | ÷ first-fit | "
      "acceptance | p99 wait (min) | mean largest free box per pod (chips) "
      "|\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
      o.pods, o.jobs, o.seed, o.seeds, o.load, o.pods, o.jobs,
      100 * offered_load);
  JsonWriter json;
  json.BeginObject().Key("runs").BeginArray();
  for (size_t i = 0; i < rows.size(); i += 2) {
    const double base = rows[i + 1].result.chip_hours;
    for (size_t j = i; j < i + 2; ++j) {
      const SimResult& r = rows[j].result;
      absl::StrAppendFormat(
          &md, "| %d | %s | %.1f %% | %.0f | %.3f | %.1f %% | %.0f | %.1f |\n",
          rows[j].seed, r.policy, 100 * r.utilization, r.chip_hours,
          base > 0 ? r.chip_hours / base : 0, 100 * r.acceptance,
          r.wait_all.p99_s / 60, r.probe_mean);
      json.BeginObject()
          .Key("seed").Number(static_cast<double>(rows[j].seed))
          .Key("policy").String(r.policy)
          .Key("utilization").Number(r.utilization)
          .Key("chip_hours").Number(r.chip_hours)
          .Key("acceptance").Number(r.acceptance)
          .Key("p99_wait_s").Number(r.wait_all.p99_s)
          .Key("mean_largest_free_box_chips").Number(r.probe_mean)
          .EndObject();
    }
  }
  json.EndArray().EndObject();
  std::fputs(md.c_str(), stdout);
  if (!WriteOutputs(o.out_dir, {{"subslice.json", json.str()},
                                {"sim_subslice.md", md}})) {
    return 1;
  }
  if (o.check) {
    for (const Row& row : rows) {
      if (row.result.accepted == 0) {
        std::fprintf(stderr, "%s placed no job on seed %d\n",
                     row.result.policy.c_str(), static_cast<int>(row.seed));
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace sliced::bench
