// Trace generator; see trace.h.
#include "bench/gen/trace.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/common/rng.h"

namespace sliced::bench {
namespace {

using scheduler::kResourceScale;

scheduler::LabelSelector Selector(absl::string_view key, absl::string_view value) {
  auto s = scheduler::ParseLabelSelector({{std::string(key), std::string(value)}});
  if (!s.ok()) std::abort();  // constant keys and values
  return *std::move(s);
}

// Picks a shape weighted by the chips the fleet has of it; multi-slice jobs
// only among shapes with at least two slices.
const FleetShape& PickShape(const Fleet& fleet, Rng& rng, bool multi) {
  std::vector<double> w;
  for (const FleetShape& s : fleet.shapes) {
    w.push_back(multi && s.slices < 2 ? 0.0 : double(s.slices * s.shape.chips));
  }
  return fleet.shapes[rng.Weighted(w)];
}

void MakeSliceJob(const Fleet& fleet, Rng& rng, bool multi, Job& job) {
  const FleetShape& fs = PickShape(fleet, rng, multi);
  scheduler::SliceRequirement slice;
  slice.generation = fs.shape.generation;
  slice.topology = fs.shape.topology;
  slice.num_slices =
      multi ? static_cast<int>(rng.Int(2, std::min<int64_t>(4, std::max<int64_t>(2, fs.slices / 4))))
            : 1;
  if (rng.Bernoulli(0.2)) {
    slice.selector = Selector(scheduler::kLabelZone, kZones[rng.Int(0, 1)]);
  }
  job.kind = multi ? JobKind::kMultiSlice : JobKind::kSlice;
  job.chips = fs.shape.chips * slice.num_slices;
  job.shape = absl::StrCat(fs.shape.pod_type, " x", slice.num_slices);
  job.request.slice = std::move(slice);
}

double Hours(double h) { return h * 3600; }

}  // namespace

const char* JobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kCpu: return "cpu";
    case JobKind::kTpuBundles: return "tpu-bundles";
    case JobKind::kSlice: return "slice";
    case JobKind::kMultiSlice: return "multi-slice";
  }
  return "?";
}

std::vector<scheduler::LabelSelector> ComputeClassPriorities(
    absl::string_view name) {
  if (name != "cost-optimized") return {};
  std::vector<scheduler::LabelSelector> out;
  for (const char* tier : {"spot", "flex-start", "reserved"}) {
    out.push_back(Selector(scheduler::kLabelCapacityTier, tier));
  }
  return out;
}

std::vector<Job> GenerateTrace(const Fleet& fleet, const TraceOptions& options) {
  Rng rng(options.seed * 0x2545f4914f6cdd1dULL + 7);
  std::vector<Job> jobs(options.jobs);
  double chip_seconds = 0;
  for (int64_t i = 0; i < options.jobs; ++i) {
    Job& job = jobs[i];
    job.id = i;
    const double u = rng.Uniform();
    if (u < 0.35) {  // CPU gang: 1-4 bundles of 1-8 CPUs
      const int64_t n = rng.Int(1, 4), cpu = int64_t{1} << rng.Int(0, 3);
      for (int64_t b = 0; b < n; ++b) {
        job.request.bundles.push_back(
            {{{"CPU", cpu * kResourceScale}}, {}, ""});
      }
      job.request.strategy = rng.Bernoulli(0.5) ? scheduler::Strategy::kPack
                                                : scheduler::Strategy::kSpread;
      job.kind = JobKind::kCpu;
      job.shape = absl::StrCat(n, " x {CPU: ", cpu, "}");
      job.duration_s = rng.LogNormal(600, 1.0);
    } else if (u < 0.50) {  // generic TPU bundles, PACK: 1-8 x {TPU: 1|4}
      const int64_t n = int64_t{1} << rng.Int(0, 3);
      const int64_t tpu = rng.Bernoulli(0.5) ? 1 : 4;
      for (int64_t b = 0; b < n; ++b) {
        job.request.bundles.push_back(
            {{{"TPU", tpu * kResourceScale}, {"CPU", kResourceScale}}, {}, ""});
      }
      job.request.strategy = scheduler::Strategy::kPack;
      job.kind = JobKind::kTpuBundles;
      job.chips = n * tpu;
      job.shape = absl::StrCat(n, " x {TPU: ", tpu, "}");
      job.duration_s = rng.LogNormal(1200, 1.0);
    } else if (u < 0.93) {
      MakeSliceJob(fleet, rng, /*multi=*/false, job);
      job.duration_s = rng.LogNormal(Hours(1), 1.0);
    } else {
      MakeSliceJob(fleet, rng, /*multi=*/true, job);
      job.duration_s = rng.LogNormal(Hours(3), 0.8);
    }
    job.duration_s = std::clamp(job.duration_s, 30.0, Hours(48));
    const double p = rng.Uniform();
    job.priority = p < 0.7 ? 0 : (p < 0.95 ? 1 : 2);
    if (job.kind != JobKind::kCpu && rng.Bernoulli(0.3)) {
      job.compute_class = "cost-optimized";
      job.request.priorities = ComputeClassPriorities(job.compute_class);
    }
    chip_seconds += job.chips * job.duration_s;
  }
  // Poisson arrivals at the rate that offers `load` x the fleet's chips.
  const double mean_gap = chip_seconds / options.jobs /
                          (options.load * std::max<int64_t>(1, fleet.tpu_chips));
  double t = 0;
  for (Job& job : jobs) {
    t += rng.Exponential(mean_gap);
    job.arrival_s = t;
  }
  return jobs;
}

std::vector<Job> GenerateSliceBatch(const Fleet& fleet, uint64_t seed,
                                    double oversubscription) {
  Rng rng(seed * 0x9e3779b97f4a7c15ULL + 3);
  int64_t fleet_slices = 0;
  for (const FleetShape& s : fleet.shapes) fleet_slices += s.slices;
  const int64_t target = static_cast<int64_t>(fleet_slices * oversubscription);
  std::vector<Job> jobs;
  int64_t asked = 0;
  while (asked < target) {
    Job job;
    job.id = static_cast<int64_t>(jobs.size());
    MakeSliceJob(fleet, rng, /*multi=*/rng.Bernoulli(0.2), job);
    job.duration_s = Hours(1);
    job.priority = rng.Bernoulli(0.2) ? 1 : 0;
    if (rng.Bernoulli(0.3)) {
      job.compute_class = "cost-optimized";
      job.request.priorities = ComputeClassPriorities(job.compute_class);
    }
    asked += job.request.slice->num_slices;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

uint64_t Fingerprint(const std::vector<Job>& jobs) {
  Fnv fnv;
  auto mix = [&fnv](absl::string_view s) { fnv.Mix(s); };
  for (const Job& j : jobs) {
    mix(absl::StrFormat("%d %.6f %.6f %d %s %s %d", j.id, j.arrival_s,
                        j.duration_s, j.priority, j.compute_class, j.shape,
                        j.request.bundles.size()));
    if (j.request.slice) mix(SelectorToString(j.request.slice->selector));
  }
  return fnv.hash();
}

}  // namespace sliced::bench
