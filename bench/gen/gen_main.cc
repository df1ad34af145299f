// sliced_gen: writes a generated fleet, trace or whole-slice batch as JSON
// lines on stdout, for use outside the harness (e.g. feeding grpcurl or
// another scheduler the same workload). The fingerprint goes to stderr.
//
//   sliced_gen --what=fleet --nodes=10000 --seed=1 > fleet.jsonl
//   sliced_gen --what=trace --nodes=10000 --jobs=20000 --seed=1 > trace.jsonl
//   sliced_gen --what=batch --nodes=10000 --seed=1 > batch.jsonl
//
// Fleet lines have the API's Node JSON shape (node_id, address, labels,
// resources); job lines carry the API request: either `slice`
// (accelerator_type, topology, num_slices, label_selector) or `bundles` and
// `strategy`, plus compute_class, priority, arrival_s and duration_s.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/common/json.h"
#include "bench/gen/fleet.h"
#include "bench/gen/trace.h"

ABSL_FLAG(std::string, what, "fleet", "fleet, trace or batch");
ABSL_FLAG(int64_t, nodes, 1000, "fleet size");
ABSL_FLAG(int64_t, jobs, 2000, "trace length");
ABSL_FLAG(uint64_t, seed, 1, "seed");
ABSL_FLAG(double, load, 0.9, "trace: offered TPU load");
ABSL_FLAG(double, oversubscription, 1.3, "batch: slices asked / fleet slices");

namespace sliced::bench {
namespace {

void WriteResources(JsonWriter& j, const scheduler::ResourceSet& resources) {
  j.BeginObject();
  for (const auto& [name, amount] : resources) {
    j.Key(name).Number(scheduler::FromFixedPoint(amount));
  }
  j.EndObject();
}

void WriteJob(const Job& job) {
  JsonWriter j;
  j.BeginObject().Key("id").Number(job.id).Key("arrival_s").Number(job.arrival_s)
      .Key("duration_s").Number(job.duration_s).Key("priority").Number(job.priority)
      .Key("compute_class").String(job.compute_class).Key("kind")
      .String(JobKindName(job.kind)).Key("chips").Number(job.chips)
      .Key("shape").String(job.shape);
  if (job.request.slice) {
    const scheduler::SliceRequirement& s = *job.request.slice;
    j.Key("slice").BeginObject().Key("accelerator_type")
        .String(scheduler::TpuAcceleratorType(s.generation)).Key("topology")
        .String(s.topology).Key("num_slices").Number(s.num_slices)
        .Key("label_selector").BeginObject();
    for (const auto& term : s.selector.terms) {
      j.Key(term.key).String(term.values.empty() ? "" : term.values[0]);
    }
    j.EndObject().EndObject();
  } else {
    j.Key("strategy").String(scheduler::StrategyName(job.request.strategy))
        .Key("bundles").BeginArray();
    for (const auto& b : job.request.bundles) {
      j.BeginObject().Key("resources");
      WriteResources(j, b.resources);
      j.EndObject();
    }
    j.EndArray();
  }
  j.EndObject();
  std::printf("%s\n", j.str().c_str());
}

int Main() {
  const std::string what = absl::GetFlag(FLAGS_what);
  const Fleet fleet = GenerateFleet({absl::GetFlag(FLAGS_nodes), absl::GetFlag(FLAGS_seed)});
  if (what == "fleet") {
    for (const scheduler::Node& n : fleet.nodes) {
      JsonWriter j;
      j.BeginObject().Key("node_id").String(n.node_id).Key("address").String(n.address)
          .Key("labels").BeginObject();
      for (const auto& [k, v] : n.labels) j.Key(k).String(v);
      j.EndObject().Key("resources");
      WriteResources(j, n.resources);
      j.EndObject();
      std::printf("%s\n", j.str().c_str());
    }
    std::fprintf(stderr, "fleet fingerprint %016llx\n",
                 static_cast<unsigned long long>(Fingerprint(fleet)));
    return 0;
  }
  std::vector<Job> jobs;
  if (what == "trace") {
    TraceOptions options;
    options.jobs = absl::GetFlag(FLAGS_jobs);
    options.seed = absl::GetFlag(FLAGS_seed);
    options.load = absl::GetFlag(FLAGS_load);
    jobs = GenerateTrace(fleet, options);
  } else if (what == "batch") {
    jobs = GenerateSliceBatch(fleet, absl::GetFlag(FLAGS_seed),
                              absl::GetFlag(FLAGS_oversubscription));
  } else {
    std::fprintf(stderr, "sliced_gen: --what must be fleet, trace or batch\n");
    return 2;
  }
  for (const Job& job : jobs) WriteJob(job);
  std::fprintf(stderr, "%s fingerprint %016llx\n", what.c_str(),
               static_cast<unsigned long long>(Fingerprint(jobs)));
  return 0;
}

}  // namespace
}  // namespace sliced::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return sliced::bench::Main();
}
