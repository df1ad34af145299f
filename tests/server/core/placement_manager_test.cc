// The placement manager on the MemoryStore with a fake clock: the queue
// (backfill, starvation bound, full queue, INFEASIBLE re-check), compute
// classes (WAIT / FAIL), idempotent retries, rescheduling after node loss
// (slice groups whole, plain groups only the lost bundles), and watchers.
#include "server/core/placement_manager.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/labels.h"
#include "tests/scheduler/builders.h"
#include "tests/server/core/harness.h"

namespace sliced::server {
namespace {

using scheduler::testing::CpuNode;
using scheduler::testing::Slice;
using scheduler::testing::Units;
using testing::Core;
using testing::CoreOptions;

// A plain group of `n` bundles of `cpu` CPUs each.
PgSpec Cpus(int n, double cpu, PgOwner owner = {},
            scheduler::Strategy strategy = scheduler::Strategy::kPack) {
  scheduler::PlacementRequest r;
  r.strategy = strategy;
  for (int i = 0; i < n; ++i) {
    r.bundles.push_back(scheduler::Bundle{{{"CPU", Units(cpu)}}, {}, ""});
  }
  auto spec = NewPgSpec(std::move(r), owner, Limits());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The nodes of the group's bundles, sorted ("" for one on none).
std::vector<std::string> SortedNodes(const PlacementGroup& group) {
  std::vector<std::string> on;
  for (const PlacedBundle& b : group.bundles) on.push_back(b.node_id);
  std::sort(on.begin(), on.end());
  return on;
}

// `num_slices` whole v6e 4x4 slices.
PgSpec V6eSlices(int num_slices, PgOwner owner = {}) {
  scheduler::PlacementRequest r;
  r.slice = scheduler::SliceRequirement{
      scheduler::TpuGeneration::kV6e, "4x4", num_slices, {}, {}, 1,
      scheduler::Subslicing::kNever};
  auto spec = NewPgSpec(std::move(r), owner, Limits());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

PgOwner WithClass(const std::string& compute_class) {
  PgOwner owner;
  owner.compute_class = compute_class;
  return owner;
}
PgOwner WithRequestId(const std::string& request_id) {
  PgOwner owner;
  owner.request_id = request_id;
  return owner;
}
PgOwner WithPriority(int32_t priority) {
  PgOwner owner;
  owner.priority = priority;
  return owner;
}
CoreOptions Options(absl::Duration starvation_bound, int max_pending,
                    absl::Duration heartbeat_timeout = absl::ZeroDuration()) {
  CoreOptions options;
  options.placement.starvation_bound = starvation_bound;
  options.placement.max_pending = max_pending;
  options.heartbeat_timeout = heartbeat_timeout;
  return options;
}

scheduler::LabelSelector Tier(const std::string& tier) {
  return *scheduler::ParseLabelSelector({{"sliced.io/capacity-tier", tier}});
}

// A 2x2x2 sub-slice of a v5p pod, carving allowed by the request.
PgSpec PodSubSlice() {
  scheduler::PlacementRequest r;
  r.slice = scheduler::SliceRequirement{
      scheduler::TpuGeneration::kV5p, "2x2x2", 1, {}, {}, 1,
      scheduler::Subslicing::kAllowed};
  auto spec = NewPgSpec(std::move(r), {}, Limits());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

class PlacementManagerTest : public ::testing::Test {
 protected:
  void Start(CoreOptions options = {}) {
    auto core = Core::Start(memory_, options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
  }
  // Restarts on the same store, as after kill -9 (the clock goes on).
  void Restart(CoreOptions options = {}) {
    const absl::Time now = core_->now();
    core_.reset();
    Start(options);
    core_->Advance(now - core_->now());
  }
  // A v5p 4x4x4 pod on a daemon started with --subslicing=false.
  void StartWithAPodAndNoCarving() {
    CoreOptions whole_slices_only;
    whole_slices_only.placement.subslicing = false;
    Start(whole_slices_only);
    ASSERT_TRUE(
        core_->Register(scheduler::testing::Slice("pod", "TPU-V5P", "4x4x4"))
            .ok());
  }
  std::string Create(PgSpec spec) {
    auto view = core_->Create(std::move(spec));
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? view->group.id : "";
  }

  storage::MemoryStore memory_;
  std::unique_ptr<Core> core_;
};

TEST_F(PlacementManagerTest, PlacesAtOnceAndQueuesWhatDoesNotFit) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  auto placed = core_->Create(Cpus(2, 4));
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->group.state, PgState::kCreated);
  EXPECT_EQ(placed->group.bundles[0].node_id, "c1");
  auto waiting = core_->Create(Cpus(1, 4));
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->group.state, PgState::kPending);
  // The reason says why; the state alone says PENDING (no "UNSCHEDULABLE: "
  // prefix that a client would print after the state again).
  EXPECT_NE(waiting->group.reason.find("CPU"), std::string::npos)
      << waiting->group.reason;
  EXPECT_EQ(waiting->group.reason.find("UNSCHEDULABLE"), std::string::npos)
      << waiting->group.reason;
  // Removing the first frees the node; the queue is re-tried in that commit.
  ASSERT_TRUE(core_->Remove(placed->group.id).ok());
  EXPECT_EQ(core_->StateOf(waiting->group.id), PgState::kCreated);
  EXPECT_EQ(core_->Remove(placed->group.id).code(),
            absl::StatusCode::kNotFound);
}

// The log has a line at info when a group's state changes, and only then:
// a group re-tried in the queue, or passing through a state within one
// commit, logs no second line for the same state.
TEST_F(PlacementManagerTest, LogsAGroupAtInfoWhenItsStateChanges) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  Logger log(Logger::Level::kInfo, out);
  CoreOptions options;
  options.placement.log = &log;
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  const std::string a = Create(Cpus(2, 4));  // CREATED on c1
  const std::string b = Create(Cpus(1, 4));  // PENDING
  const std::string c = Create(Cpus(1, 4));  // PENDING; b re-tried, still
  ASSERT_TRUE(core_->Register({CpuNode("c2", 8)}).ok());  // b, c CREATED
  // a loses c1: RESCHEDULING (an event within the commit), then not
  // placed on c2's 0 free CPUs: RESCHEDULING again, logged once.
  ASSERT_TRUE(core_->RemoveNode("c1", /*force=*/true).ok());
  ASSERT_EQ(core_->StateOf(a), PgState::kRescheduling);
  ASSERT_TRUE(core_->Remove(a).ok());
  core_.reset();
  std::fclose(out);
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    // "<timestamp> placement group <id> <STATE>[: ...]"
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() > 4 && words[1] == "placement" && words[2] == "group") {
      lines.push_back(absl::StrCat(words[3], " ", absl::StripSuffix(words[4], ":")));
    }
  }
  std::free(text);
  EXPECT_EQ(lines, std::vector<std::string>({
                       a + " CREATED", b + " PENDING", c + " PENDING",
                       b + " CREATED", c + " CREATED", a + " RESCHEDULING",
                       a + " REMOVED"}));
}

TEST_F(PlacementManagerTest, SmallGroupsBackfillAroundABlockedOne) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  const std::string holder = Create(Cpus(1, 6));
  const std::string big = Create(Cpus(1, 8));  // waits for the whole node
  EXPECT_EQ(core_->StateOf(big), PgState::kPending);
  const std::string small = Create(Cpus(1, 2));  // fits beside the holder
  EXPECT_EQ(core_->StateOf(small), PgState::kCreated);
  ASSERT_TRUE(core_->Remove(holder).ok());
  ASSERT_TRUE(core_->Remove(small).ok());
  EXPECT_EQ(core_->StateOf(big), PgState::kCreated);
}

TEST_F(PlacementManagerTest, AStarvingGroupBlocksLaterOnesUntilPlaced) {
  Start(Options(absl::Minutes(5), 100));
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  const std::string holder = Create(Cpus(1, 6));
  const std::string big = Create(Cpus(1, 8));
  core_->Advance(absl::Minutes(6));  // `big` now starves
  auto small = core_->Create(Cpus(1, 2));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->group.state, PgState::kPending);
  // A reason says why, never the state again: the log line, slicectl and
  // the web view print the state beside it.
  EXPECT_TRUE(absl::StartsWith(small->group.reason, "waiting behind " + big))
      << small->group.reason;
  // Behind it, a compute class is still checked first: one that does not
  // exist is NOT_FOUND, and FAIL refuses to wait (nothing is stored).
  ASSERT_TRUE(core_
                  ->PutClass(ComputeClass{
                      "fail", {Tier("spot")}, WhenUnsatisfiable::kFail})
                  .ok());
  const size_t groups = core_->placement().List({}).size();
  auto typo = core_->Create(Cpus(1, 2, WithClass("nope")));
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kNotFound) << typo.status();
  auto fail = core_->Create(Cpus(1, 2, WithClass("fail")));
  EXPECT_EQ(fail.status().code(), absl::StatusCode::kFailedPrecondition)
      << fail.status();
  EXPECT_NE(fail.status().message().find("would wait behind " + big),
            std::string::npos)
      << fail.status();
  EXPECT_EQ(core_->placement().List({}).size(), groups);
  // A higher priority is not held back by a lower one's starvation.
  auto urgent = core_->Create(Cpus(1, 2, WithPriority(10)));
  ASSERT_TRUE(urgent.ok());
  EXPECT_EQ(urgent->group.state, PgState::kCreated);
  ASSERT_TRUE(core_->Remove(urgent->group.id).ok());
  // Capacity freed: the starving group claims it first.
  ASSERT_TRUE(core_->Remove(holder).ok());
  EXPECT_EQ(core_->StateOf(big), PgState::kCreated);
  EXPECT_EQ(core_->StateOf(small->group.id), PgState::kPending);
}

TEST_F(PlacementManagerTest, ComputeClassWaitQueuesAndFailRejects) {
  Start();
  ASSERT_TRUE(core_
                  ->Register({CpuNode("spot-1", 4, "z1", "spot"),
                              CpuNode("res-1", 4, "z1", "reserved")})
                  .ok());
  ASSERT_TRUE(core_
                  ->PutClass(ComputeClass{"wait",
                                          {Tier("spot"), Tier("reserved")},
                                          WhenUnsatisfiable::kWait})
                  .ok());
  ASSERT_TRUE(core_
                  ->PutClass(ComputeClass{
                      "fail", {Tier("spot")}, WhenUnsatisfiable::kFail})
                  .ok());
  // First priority first, then the next one; never split across them.
  auto first = core_->Create(Cpus(1, 4, WithClass("wait")));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->group.bundles[0].node_id, "spot-1");
  EXPECT_EQ(first->group.priority_index, 0);
  auto second = core_->Create(Cpus(1, 4, WithClass("wait")));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->group.bundles[0].node_id, "res-1");
  EXPECT_EQ(second->group.priority_index, 1);
  auto third = core_->Create(Cpus(1, 4, WithClass("wait")));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->group.state, PgState::kPending);
  // FAIL: rejected, and nothing is left behind.
  auto failed = core_->Create(Cpus(1, 4, WithClass("fail")));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(failed.status().message().find("says FAIL"), std::string::npos);
  EXPECT_EQ(core_->placement().List({}).size(), 3u);
  auto unknown = core_->Create(Cpus(1, 1, WithClass("nope")));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

// A job's groups come from the cluster's index by job: in id order, with
// the state filter and pages as for every group, and across a restart.
TEST_F(PlacementManagerTest, ListsAJobsGroupsInPagesWithTheStateFilter) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  std::map<std::string, std::vector<std::string>> by_job;  // in id order
  std::vector<std::string> pending_a;
  for (int i = 0; i < 12; ++i) {
    PgOwner owner;
    owner.job_id = i % 3 == 0 ? "" : i % 3 == 1 ? "a" : "ab";
    const std::string id = Create(Cpus(1, 1, owner));  // c1 fits eight
    by_job[owner.job_id].push_back(id);
    if (owner.job_id == "a" && i >= 8) pending_a.push_back(id);
  }
  auto ids = [](const std::vector<PlacementGroupView>& views) {
    std::vector<std::string> out;
    for (const PlacementGroupView& v : views) out.push_back(v.group.id);
    return out;
  };
  auto pages = [&](PlacementManager::ListFilter filter, int limit) {
    std::vector<std::string> all;
    std::string after;
    for (int page = 0; page < 20; ++page) {
      std::string next;
      for (const std::string& id :
           ids(core_->placement().List(filter, after, limit, &next))) {
        all.push_back(id);
      }
      if (next.empty()) return all;
      after = next;
    }
    ADD_FAILURE() << "no last page";
    return all;
  };
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "before a restart" : "after it");
    for (const std::string job : {"a", "ab"}) {
      EXPECT_EQ(ids(core_->placement().List({.job_id = job})), by_job[job]);
      EXPECT_EQ(pages({.job_id = job}, 1), by_job[job]);
      EXPECT_EQ(pages({.job_id = job}, 3), by_job[job]);
    }
    EXPECT_EQ(pages({.job_id = "a", .state = PgState::kPending}, 1), pending_a);
    EXPECT_TRUE(core_->placement().List({.job_id = "b"}).empty());
    EXPECT_EQ(core_->placement().List({}).size(), 12u);
    // One group by id (a watch of one group lists only it), if the rest of
    // the filter matches.
    const std::string one = by_job["ab"][1];
    EXPECT_EQ(ids(core_->placement().List({.placement_group_id = one})),
              std::vector<std::string>{one});
    EXPECT_EQ(pages({.job_id = "ab", .placement_group_id = one}, 1),
              std::vector<std::string>{one});
    EXPECT_TRUE(core_->placement()
                    .List({.job_id = "a", .placement_group_id = one})
                    .empty());
    EXPECT_TRUE(
        core_->placement().List({.placement_group_id = "pg-none"}).empty());
    Restart();
  }
  // A removed group leaves its job's list.
  ASSERT_TRUE(core_->Remove(by_job["a"][0]).ok());
  by_job["a"].erase(by_job["a"].begin());
  EXPECT_EQ(ids(core_->placement().List({.job_id = "a"})), by_job["a"]);
}

// A list by state alone reads the state index (ClusterState::pgs_by_state):
// the same groups, in the same pages, as a walk of every group filtered by
// state, before and after a restart and as groups change state.
TEST_F(PlacementManagerTest, ListsAStatesGroupsInPages) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  std::vector<std::string> created, pending;  // in id order
  for (int i = 0; i < 12; ++i) {
    const std::string id = Create(Cpus(1, 1));  // c1 fits eight
    (i < 8 ? created : pending).push_back(id);
  }
  auto ids = [](const std::vector<PlacementGroupView>& views) {
    std::vector<std::string> out;
    for (const PlacementGroupView& v : views) out.push_back(v.group.id);
    return out;
  };
  auto pages = [&](PgState state, int limit) {
    std::vector<std::string> all;
    std::string after, next;
    for (int page = 0; page < 20; ++page) {
      for (const std::string& id : ids(core_->placement().List(
               {.state = state}, after, limit, &next))) {
        all.push_back(id);
      }
      if (next.empty()) return all;
      after = next;
    }
    ADD_FAILURE() << "no last page";
    return all;
  };
  // Every state's list against the unfiltered list, filtered here.
  auto by_walk = [&](PgState state) {
    std::vector<std::string> out;
    for (const PlacementGroupView& v : core_->placement().List({})) {
      if (v.group.state == state) out.push_back(v.group.id);
    }
    return out;
  };
  auto check_every_state = [&] {
    for (PgState state :
         {PgState::kPending, PgState::kCreated, PgState::kRescheduling,
          PgState::kInfeasible, PgState::kPreempting}) {
      SCOPED_TRACE(PgStateName(state));
      EXPECT_EQ(ids(core_->placement().List({.state = state})), by_walk(state));
      EXPECT_EQ(pages(state, 1), by_walk(state));
      EXPECT_EQ(pages(state, 3), by_walk(state));
    }
  };
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "before a restart" : "after it");
    EXPECT_EQ(pages(PgState::kPending, 1), pending);
    EXPECT_EQ(pages(PgState::kCreated, 3), created);
    check_every_state();
    Restart();
  }
  // A removal frees a CPU: the first waiting group is placed.
  ASSERT_TRUE(core_->Remove(created[0]).ok());
  EXPECT_EQ(pages(PgState::kPending, 2),
            std::vector<std::string>(pending.begin() + 1, pending.end()));
  check_every_state();
}

TEST_F(PlacementManagerTest, RetriedRequestIdReturnsTheSameGroup) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  auto first = core_->Create(Cpus(1, 4, WithRequestId("r-1")));
  auto again = core_->Create(Cpus(1, 4, WithRequestId("r-1")));
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->group.id, again->group.id);
  // The retry's reply is the whole group as the first create stored it.
  EXPECT_EQ(again->group.state, PgState::kCreated);
  ASSERT_EQ(again->group.bundles.size(), 1u);
  EXPECT_EQ(again->group.bundles[0].node_id, "c1");
  EXPECT_EQ(core_->placement().List({}).size(), 1u);
  // Also across a restart, and after it is gone a new group is made.
  Restart();
  auto after = core_->Create(Cpus(1, 4, WithRequestId("r-1")));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->group.id, first->group.id);
  ASSERT_TRUE(core_->Remove(first->group.id).ok());
  auto fresh = core_->Create(Cpus(1, 4, WithRequestId("r-1")));
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->group.id, first->group.id);
  // The same id from another job is refused, not given that job's group.
  PgOwner other = WithRequestId("r-1");
  other.job_id = "job-b";
  auto refused = core_->Create(Cpus(1, 4, other));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find(fresh->group.id), std::string::npos)
      << refused.status();
}

// A start re-tries the queue, INFEASIBLE groups too, on the state it
// loaded: the flags that decide placement may have changed (here
// --subslicing, off in the last run). Before, a loaded queue waited for the
// next change of the inventory.
TEST_F(PlacementManagerTest, AStartRetriesTheQueueOnTheStateItLoaded) {
  StartWithAPodAndNoCarving();
  const PgSpec spec = PodSubSlice();
  auto g = core_->Create(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->group.state, PgState::kInfeasible);
  Restart();  // sub-slicing on, the default
  ASSERT_TRUE(core_->Op([](Txn&) { return absl::OkStatus(); }).ok());
  auto placed = core_->placement().Get(g->group.id);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->group.state, PgState::kCreated);
}

// Explain and a dry run solve what a create would: with --subslicing=false
// a sub-slice of a pod is not carved, so the dry run says INFEASIBLE, as
// the create then is (it said PLACED).
TEST_F(PlacementManagerTest, ADryRunSolvesWithTheDaemonsFlags) {
  StartWithAPodAndNoCarving();
  const PgSpec spec = PodSubSlice();
  auto dry = core_->placement().ExplainDryRun(spec);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->outcome, "INFEASIBLE") << dry->summary;
  auto g = core_->Create(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->group.state, PgState::kInfeasible);
}

// Found by the crash-loop test: the newest groups removed, then a restart,
// and the next create got a removed group's id. The high-water mark is
// stored with each create, so ids are never handed out twice.
TEST_F(PlacementManagerTest, ARestartNeverReusesTheIdOfARemovedGroup) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  auto kept = core_->Create(Cpus(1, 1));
  auto removed = core_->Create(Cpus(1, 1));
  ASSERT_TRUE(kept.ok() && removed.ok());
  ASSERT_TRUE(core_->Remove(removed->group.id).ok());
  Restart();
  auto next = core_->Create(Cpus(1, 1));
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->group.id, removed->group.id);
  EXPECT_GT(next->group.id, removed->group.id);  // fixed-width hex ids
}

TEST_F(PlacementManagerTest, AFullQueueRefusesGroupsThatWouldWait) {
  Start(Options(absl::ZeroDuration(), 2));
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  Create(Cpus(1, 8));
  Create(Cpus(1, 8));
  auto third = core_->Create(Cpus(1, 8));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  // One that fits at once is still created.
  auto fits = core_->Create(Cpus(1, 4));
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->group.state, PgState::kCreated);
}

TEST_F(PlacementManagerTest, InfeasibleIsRecheckedWhenTheInventoryGrows) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  auto tpu = core_->Create(V6eSlices(1));
  ASSERT_TRUE(tpu.ok());
  EXPECT_EQ(tpu->group.state, PgState::kInfeasible);
  // The reason says why; the state says INFEASIBLE.
  EXPECT_NE(tpu->group.reason.find("no v6e-16 slice"), std::string::npos)
      << tpu->group.reason;
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  auto placed = core_->placement().Get(tpu->group.id);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->group.state, PgState::kCreated);
  EXPECT_EQ(placed->group.slice_names, std::vector<std::string>{"s1"});
  ASSERT_EQ(placed->workers.size(), 4u);
  EXPECT_EQ(placed->workers[3].env.at("TPU_WORKER_ID"), "3");
}

// Counts the solves, and those that ended INFEASIBLE.
class SolveCounter : public PlacementManager::DecisionObserver {
 public:
  void OnDecision(const scheduler::Decision& d, absl::Duration) override {
    ++solves_;
    if (d.outcome == scheduler::Decision::kInfeasible) ++infeasible_;
  }
  int solves() const { return solves_.load(); }
  int infeasible() const { return infeasible_.load(); }

 private:
  std::atomic<int> solves_{0};
  std::atomic<int> infeasible_{0};
};

TEST_F(PlacementManagerTest,
       InfeasibleIsNotSolvedAgainUntilTheInventoryChanges) {
  SolveCounter solves;
  CoreOptions options;
  options.decisions = &solves;
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  const std::string tpu = Create(V6eSlices(1));
  EXPECT_EQ(core_->StateOf(tpu), PgState::kInfeasible);
  EXPECT_EQ(solves.infeasible(), 1);
  // Freed capacity and a node that comes back: no slice appears, and the
  // queue's retries leave the INFEASIBLE group alone.
  const std::string holder = Create(Cpus(1, 4));
  const std::string waiting = Create(Cpus(1, 8));
  ASSERT_TRUE(core_->Remove(holder).ok());
  EXPECT_EQ(core_->StateOf(waiting), PgState::kCreated);
  ASSERT_TRUE(core_->Drain("c1").ok());
  ASSERT_TRUE(core_->Undrain("c1").ok());
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());  // unchanged
  EXPECT_EQ(solves.infeasible(), 1);
  // A new node, and new resources on a known one, re-check it.
  ASSERT_TRUE(core_->Register({CpuNode("c2", 8)}).ok());
  EXPECT_EQ(solves.infeasible(), 2);
  ASSERT_TRUE(core_->Register({CpuNode("c2", 16)}).ok());
  EXPECT_EQ(solves.infeasible(), 3);
  EXPECT_EQ(core_->StateOf(tpu), PgState::kInfeasible);
}

TEST_F(PlacementManagerTest, EqualWaitingGroupsCostOneSolvePerRetry) {
  SolveCounter solves;
  CoreOptions options;
  options.decisions = &solves;
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  const std::string holder = Create(Cpus(1, 8));
  std::vector<std::string> waiting;
  for (int i = 0; i < 10; ++i) waiting.push_back(Create(Cpus(1, 4)));
  const std::string other = Create(Cpus(2, 4));  // asks something else
  ASSERT_EQ(solves.solves(), 12);
  // The release lets two fit: each is solved on the snapshot the one
  // before it changed; the third fails, and the seven after it ask the same
  // on the same snapshot, so they get its decision without a solve. The
  // other request is solved on its own.
  ASSERT_TRUE(core_->Remove(holder).ok());
  EXPECT_EQ(solves.solves(), 12 + 3 + 1);
  for (int i = 0; i < 10; ++i) {
    auto g = core_->placement().Get(waiting[i]);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->group.state, i < 2 ? PgState::kCreated : PgState::kPending)
        << i;
    if (i >= 2) {
      EXPECT_NE(g->group.reason.find("CPU"), std::string::npos)
          << g->group.reason;
    }
  }
  EXPECT_EQ(core_->StateOf(other), PgState::kPending);
  // Freed again: the next in line are placed, in queue order.
  ASSERT_TRUE(core_->Remove(waiting[0]).ok());
  EXPECT_EQ(core_->StateOf(waiting[2]), PgState::kCreated);
  EXPECT_EQ(core_->StateOf(waiting[3]), PgState::kPending);
}

// Runs, in one commit group and in this order, for each pair: the removal
// of `first`, then the creation of `second`; returns the created groups'
// ids. The writer is held while they are submitted, so that they run
// together.
std::vector<std::string> RemoveAndCreateInOneCommitGroup(
    Core& core, std::vector<std::pair<std::string, PgSpec>> pairs) {
  absl::BlockingCounter answered(static_cast<int>(2 * pairs.size()));
  std::vector<std::string> created(pairs.size());
  core.InOneGroup([&] {
    for (size_t i = 0; i < pairs.size(); ++i) {
      core.placement().Remove(pairs[i].first, [&](const absl::Status& s) {
        EXPECT_TRUE(s.ok()) << s;
        answered.DecrementCount();
      });
      core.placement().Create(std::move(pairs[i].second),
                              [&, i](absl::StatusOr<PlacementGroupView> v) {
                                EXPECT_TRUE(v.ok()) << v.status();
                                if (v.ok()) created[i] = v->group.id;
                                answered.DecrementCount();
                              });
    }
  });
  answered.Wait();
  return created;
}

TEST_F(PlacementManagerTest, ACreateRetriesTheQueueOnlyWhenAReleaseMayHelpIt) {
  SolveCounter solves;
  CoreOptions options;
  options.decisions = &solves;
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8), CpuNode("c2", 8)}).ok());
  const std::string big = Create(Cpus(1, 8));  // fills one node
  Create(Cpus(1, 4));                          // the other: 4 free
  std::vector<std::string> small;
  for (int i = 0; i < 3; ++i) small.push_back(Create(Cpus(1, 1)));  // 1 free
  const std::string waiting = Create(Cpus(1, 8));
  ASSERT_EQ(core_->StateOf(waiting), PgState::kPending);
  const int before = solves.solves();

  // Three releases of 1 CPU, each followed by a create: the node they free
  // has 2 CPUs free at most, short of the 8 the queued group asks of one
  // node, so no create re-tries the queue first, nor does the end of the
  // group: 3 solves (not 3 + 3, nor 3 + 1). The next preemption check walks
  // the queue once.
  const std::vector<std::string> created = RemoveAndCreateInOneCommitGroup(
      *core_,
      {{small[0], Cpus(1, 1)}, {small[1], Cpus(1, 1)}, {small[2], Cpus(1, 1)}});
  EXPECT_EQ(solves.solves() - before, 3);
  for (const std::string& id : created) {
    EXPECT_EQ(core_->StateOf(id), PgState::kCreated) << id;
  }
  EXPECT_EQ(core_->StateOf(waiting), PgState::kPending);
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(solves.solves() - before, 3 + 1);
  EXPECT_EQ(core_->StateOf(waiting), PgState::kPending);

  // A release the queued group can use: it is re-tried before the newcomer
  // that asks the same, and gets the node.
  const std::string newcomer =
      RemoveAndCreateInOneCommitGroup(*core_, {{big, Cpus(1, 8)}}).at(0);
  EXPECT_EQ(core_->StateOf(waiting), PgState::kCreated);
  EXPECT_EQ(core_->StateOf(newcomer), PgState::kPending);
}

// A release no waiting group can use (the node it frees covers no group's
// least ask of one node) places nothing, so the commit does not walk the
// queue; the next preemption check does, which brings the reasons up to
// date (the node is now short of another resource first). A release the
// group can use places it in the same commit.
TEST_F(PlacementManagerTest,
       AReleaseNoWaitingGroupCanUseLeavesTheWalkToTheNextCheck) {
  SolveCounter solves;
  CoreOptions options;
  options.decisions = &solves;
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());  // 32 GB of memory
  auto one_bundle = [](scheduler::ResourceSet resources) {
    scheduler::PlacementRequest r;
    r.bundles.push_back(scheduler::Bundle{std::move(resources), {}, ""});
    auto spec = NewPgSpec(std::move(r), PgOwner(), Limits());
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  };
  const std::string cpus = Create(Cpus(1, 8));
  const std::string memory = Create(one_bundle({{"memory", Units(32e9)}}));
  const std::string waiting =
      Create(one_bundle({{"CPU", Units(8)}, {"memory", Units(32e9)}}));
  ASSERT_EQ(core_->StateOf(waiting), PgState::kPending);
  auto reason = [&] { return core_->placement().Get(waiting)->group.reason; };
  const std::string short_of_cpu = reason();
  EXPECT_NE(short_of_cpu.find("insufficient free CPU"), std::string::npos)
      << short_of_cpu;
  const int before = solves.solves();

  ASSERT_TRUE(core_->Remove(cpus).ok());  // c1: 8 CPUs free, no memory
  EXPECT_EQ(solves.solves(), before);
  EXPECT_EQ(reason(), short_of_cpu);
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(solves.solves(), before + 1);
  EXPECT_NE(reason().find("insufficient free memory"), std::string::npos)
      << reason();
  ASSERT_TRUE(core_->CompletePreemptions().ok());  // nothing skipped since
  EXPECT_EQ(solves.solves(), before + 1);

  ASSERT_TRUE(core_->Remove(memory).ok());
  EXPECT_EQ(core_->StateOf(waiting), PgState::kCreated);
}

TEST_F(PlacementManagerTest,
       AStarvingGroupThatLeavesLetsTheGroupsBehindItGoFirst) {
  Start(Options(absl::Minutes(1), 100));
  ASSERT_TRUE(core_->Register({CpuNode("c1", 16)}).ok());
  Create(Cpus(1, 8));
  const std::string starving = Create(Cpus(1, 16));
  core_->Advance(absl::Minutes(2));
  // Behind the starving group: not solved, though 8 CPUs are free.
  const std::string behind = Create(Cpus(1, 2));
  ASSERT_EQ(core_->StateOf(behind), PgState::kPending);
  // The starving group leaves (it held nothing) and a newcomer that would
  // take the free 8 CPUs arrives in the same commit group: the group that
  // waited behind is tried first, and the newcomer no longer fits.
  const std::string newcomer =
      RemoveAndCreateInOneCommitGroup(*core_, {{starving, Cpus(1, 8)}}).at(0);
  EXPECT_EQ(core_->StateOf(behind), PgState::kCreated);
  EXPECT_EQ(core_->StateOf(newcomer), PgState::kPending);
}

TEST_F(PlacementManagerTest, ASliceGroupThatLosesAHostMovesWhole) {
  Start();
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  auto g = core_->Create(V6eSlices(1));
  ASSERT_TRUE(g.ok());
  const std::string first_slice = g->group.slice_names.at(0);
  const std::string other = first_slice == "s1" ? "s2" : "s1";
  ASSERT_TRUE(
      core_
          ->Heartbeat({NodeBeat{first_slice + "-w2",
                                scheduler::NodeState::kDead, std::nullopt}})
          .ok());
  auto moved = core_->placement().Get(g->group.id);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->group.state, PgState::kCreated);
  EXPECT_EQ(moved->group.slice_names, std::vector<std::string>{other});
  for (const PlacedBundle& b : moved->group.bundles) {
    EXPECT_EQ(b.node_id.rfind(other + "-w", 0), 0u) << b.node_id;
  }
  // The surviving hosts of the broken slice hold nothing.
  auto survivor = core_->nodes().Get(first_slice + "-w0");
  ASSERT_TRUE(survivor.ok());
  EXPECT_TRUE(survivor->placement_group_ids.empty());
}

TEST_F(PlacementManagerTest, AQuarantinedHostMovesItsSliceAndTakesNothing) {
  Start();
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  auto g = core_->Create(V6eSlices(1));
  ASSERT_TRUE(g.ok());
  const std::string first = g->group.slice_names.at(0);
  const std::string other = first == "s1" ? "s2" : "s1";
  const std::string sick = first + "-w1";
  // The agent reports the host unhealthy: the lease stays, the slice moves.
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{
                      sick, std::nullopt,
                      std::vector<std::string>{"slice.error.detected.gauge=1",
                                               "/dev/accel0 held by pid 7"}}})
                  .ok());
  auto node = core_->nodes().Get(sick);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->node.state, scheduler::NodeState::kAlive);
  EXPECT_EQ(node->node.quarantine_reason,
            "slice.error.detected.gauge=1; /dev/accel0 held by pid 7");
  auto moved = core_->placement().Get(g->group.id);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->group.state, PgState::kCreated);
  EXPECT_EQ(moved->group.slice_names, std::vector<std::string>{other});
  for (const SliceView& slice : core_->nodes().ListSlices()) {
    if (slice.info.name != first) continue;
    EXPECT_FALSE(slice.info.intact);
    EXPECT_NE(slice.info.reason.find("is quarantined (slice.error"),
              std::string::npos)
        << slice.info.reason;
  }
  // A second slice group waits, and Explain names the quarantine.
  const std::string waiting = Create(V6eSlices(1));
  auto why = core_->placement().Explain(waiting);
  ASSERT_TRUE(why.ok());
  const std::string said =
      absl::StrCat(why->summary, "\n", absl::StrJoin(why->details, "\n"));
  EXPECT_NE(said.find("quarantined"), std::string::npos) << said;
  // Re-registration and a beat without a health report keep the quarantine;
  // it is durable.
  ASSERT_TRUE(core_->Register(Slice(first, "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{sick, std::nullopt, std::nullopt}}).ok());
  EXPECT_FALSE(core_->nodes().Get(sick)->node.quarantine_reason.empty());
  auto stored = memory_.Load();
  ASSERT_TRUE(stored.ok());
  for (const scheduler::Node& n : stored->nodes) {
    if (n.node_id == sick) {
      EXPECT_FALSE(n.quarantine_reason.empty());
    }
  }
  EXPECT_EQ(core_->placement().Get(waiting)->group.state, PgState::kPending);
  // A healthy report lifts it, and the waiting group is placed at once.
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{sick, std::nullopt,
                                        std::vector<std::string>{}}})
                  .ok());
  EXPECT_TRUE(core_->nodes().Get(sick)->node.quarantine_reason.empty());
  auto placed = core_->placement().Get(waiting);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->group.state, PgState::kCreated);
  EXPECT_EQ(placed->group.slice_names, std::vector<std::string>{first});
}

// An agent that re-registers its unchanged node (a retry, or after a daemon
// restart) renews the lease and writes nothing: with every write failing,
// it still succeeds; a changed node does write.
TEST_F(PlacementManagerTest, RegisteringAnUnchangedNodeWritesNothing) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  core_->faults().FailWrites(1000);
  EXPECT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  EXPECT_EQ(core_->Register({CpuNode("c1", 16)}).code(),
            absl::StatusCode::kUnavailable);
  core_->faults().FailWrites(0);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 16)}).ok());
}

// A node that registers again under the groups it holds must still have the
// resources they use. Otherwise the registration is refused, naming the
// field, and changes nothing (it used to be taken: the node showed negative
// capacity, and the stored placements held capacity twice, which a restart
// refused to serve). Its labels may change under them.
TEST_F(PlacementManagerTest, ANodeCannotShrinkUnderTheGroupsItHolds) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  ASSERT_TRUE(core_->Register(Slice("s", "TPU-V6E", "4x4")).ok());
  const std::string cpu_group = Create(Cpus(1, 6));
  const std::string slice_group = Create(V6eSlices(1));
  ASSERT_EQ(core_->placement().Get(slice_group)->group.state,
            PgState::kCreated);

  absl::Status shrunk = core_->Register({CpuNode("c1", 4)});
  EXPECT_EQ(shrunk.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shrunk.message().find("nodes[0].resources[CPU]"), std::string::npos)
      << shrunk;
  EXPECT_NE(shrunk.message().find(cpu_group), std::string::npos) << shrunk;
  scheduler::Node fewer_chips = Slice("s", "TPU-V6E", "4x4")[1];
  fewer_chips.resources.erase("TPU");
  absl::Status no_tpu = core_->Register({CpuNode("c9", 8), fewer_chips});
  EXPECT_EQ(no_tpu.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_tpu.message().find("nodes[1].resources[TPU]"), std::string::npos)
      << no_tpu;
  EXPECT_EQ(core_->nodes().Get("c9").status().code(),
            absl::StatusCode::kNotFound);  // the whole call changed nothing

  // Room to spare, new labels, and shrinking once free are all taken.
  ASSERT_TRUE(core_->Register({CpuNode("c1", 6)}).ok());
  scheduler::Node relabelled = Slice("s", "TPU-V6E", "4x4")[1];
  relabelled.labels["team"] = "b";
  ASSERT_TRUE(core_->Register({relabelled}).ok());
  ASSERT_TRUE(core_->Remove(cpu_group).ok());
  ASSERT_TRUE(core_->Register({CpuNode("c1", 2)}).ok());
  Restart();
  EXPECT_EQ(core_->placement().Get(slice_group)->group.state,
            PgState::kCreated);
}

TEST_F(PlacementManagerTest, APlainGroupReplacesOnlyItsLostBundles) {
  Start();
  ASSERT_TRUE(
      core_->Register({CpuNode("a", 4), CpuNode("b", 4), CpuNode("c", 4)})
          .ok());
  auto g =
      core_->Create(Cpus(2, 4, PgOwner{}, scheduler::Strategy::kStrictSpread));
  ASSERT_TRUE(g.ok());
  const std::string kept = g->group.bundles[0].node_id;
  const std::string lost = g->group.bundles[1].node_id;
  ASSERT_TRUE(core_->RemoveNode(lost, /*force=*/true).ok());
  auto moved = core_->placement().Get(g->group.id);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->group.state, PgState::kCreated);
  EXPECT_EQ(moved->group.bundles[0].node_id, kept);
  EXPECT_NE(moved->group.bundles[1].node_id, lost);
  EXPECT_NE(moved->group.bundles[1].node_id, kept);
}

// A batch may name a node twice; the later beat wins, and a node it turns
// DEAD loses its groups as if the beats had come one by one.
TEST_F(PlacementManagerTest, ABatchNamingANodeTwiceStillReschedulesItsGroups) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("a", 4), CpuNode("b", 4)}).ok());
  auto g =
      core_->Create(Cpus(2, 4, PgOwner{}, scheduler::Strategy::kStrictSpread));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(
      core_
          ->Heartbeat(
              {NodeBeat{"b", scheduler::NodeState::kDraining, std::nullopt},
               NodeBeat{"b", scheduler::NodeState::kDead, std::nullopt}})
          .ok());
  auto lost = core_->placement().Get(g->group.id);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->group.state, PgState::kRescheduling);
  EXPECT_EQ(lost->group.bundles[1].node_id, "");
}

TEST_F(PlacementManagerTest, ALostGroupWithNowhereToGoWaitsAndKeepsSurvivors) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("a", 4), CpuNode("b", 4)}).ok());
  auto g =
      core_->Create(Cpus(2, 4, PgOwner{}, scheduler::Strategy::kStrictSpread));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"b", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  auto waiting = core_->placement().Get(g->group.id);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->group.state, PgState::kRescheduling);
  EXPECT_EQ(waiting->group.bundles[0].node_id, "a");  // still held
  EXPECT_EQ(waiting->group.bundles[1].node_id, "");
  // The node comes back: the lost bundle is re-placed beside the survivor,
  // which is never held twice.
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{"b", std::nullopt, std::nullopt}}).ok());
  auto back = core_->placement().Get(g->group.id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->group.state, PgState::kCreated);
  EXPECT_EQ(back->group.bundles[0].node_id, "a");
  EXPECT_EQ(back->group.bundles[1].node_id, "b");
  core_->cluster().Read([](const ClusterState& s) {
    EXPECT_TRUE(s.snapshot->CheckNotOverCommitted().ok());
    return 0;
  });
}

// A mass expiry too large for the store as one op (etcd: one Txn) is
// split in halves: every node that fits goes DEAD; only a node whose own
// death is too large stays ALIVE, and the check says why.
TEST_F(PlacementManagerTest, AMassExpiryTooLargeForOneOpIsSplit) {
  Start(Options(absl::Minutes(5), 100, absl::Seconds(10)));
  ASSERT_TRUE(core_->Register({CpuNode("big", 4)}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core_->Create(Cpus(1, 1)).ok());
  std::vector<scheduler::Node> small;
  for (int i = 0; i < 8; ++i) small.push_back(CpuNode(absl::StrCat("n", i), 4));
  ASSERT_TRUE(core_->Register(small).ok());
  // "big"'s death writes 4 keys (itself and its 3 groups); two of the others
  // together write 2.
  core_->faults().LimitUnitWrites(3);
  core_->Advance(absl::Seconds(12));
  absl::Status checked = core_->CheckLeases();
  EXPECT_EQ(checked.code(), absl::StatusCode::kFailedPrecondition) << checked;
  for (int i = 0; i < 8; ++i) {
    auto node = core_->nodes().Get(absl::StrCat("n", i));
    ASSERT_TRUE(node.ok());
    EXPECT_EQ(node->node.state, scheduler::NodeState::kDead) << i;
  }
  auto big = core_->nodes().Get("big");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->node.state, scheduler::NodeState::kAlive);
  // With room again, the next check takes it.
  core_->faults().LimitUnitWrites(0);
  ASSERT_TRUE(core_->CheckLeases().ok());
  big = core_->nodes().Get("big");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->node.state, scheduler::NodeState::kDead);
}

// A queue walk that would write more than the store takes in one op (etcd:
// one Txn; hundreds of groups placed at once) is cut at the limit, and the
// rest of the queue is walked at the next preemption checks: INFEASIBLE
// groups too when the walk re-checked them. (Such a walk was dropped whole,
// and so was every later one: none of those groups was ever placed.)
TEST_F(PlacementManagerTest, AQueueWalkTooLargeForOneOpIsCutAndGoesOn) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 10)}).ok());
  const std::string holder = Create(Cpus(1, 10));
  std::vector<std::string> pending, infeasible;
  for (int i = 0; i < 10; ++i) pending.push_back(Create(Cpus(1, 1)));
  for (int i = 0; i < 6; ++i) infeasible.push_back(Create(Cpus(1, 20)));
  ASSERT_EQ(core_->StateOf(pending.back()), PgState::kPending);
  ASSERT_EQ(core_->StateOf(infeasible.back()), PgState::kInfeasible);
  auto created = [&](const std::vector<std::string>& ids) {
    return std::count_if(ids.begin(), ids.end(), [&](const std::string& id) {
      return core_->StateOf(id) == PgState::kCreated;
    });
  };
  core_->faults().LimitUnitWrites(4);
  // Releases the room of all ten: the walk is cut, and goes on.
  ASSERT_TRUE(core_->Remove(holder).ok());
  EXPECT_GT(created(pending), 0);
  EXPECT_LT(created(pending), 10);
  for (int i = 0; i < 10 && created(pending) < 10; ++i) {
    ASSERT_TRUE(core_->CompletePreemptions().ok());
  }
  EXPECT_EQ(created(pending), 10);
  // A new node re-checks the INFEASIBLE groups, and so does what is left of
  // that walk.
  ASSERT_TRUE(core_->Register({CpuNode("c2", 120)}).ok());
  EXPECT_GT(created(infeasible), 0);
  EXPECT_LT(created(infeasible), 6);
  for (int i = 0; i < 10 && created(infeasible) < 6; ++i) {
    ASSERT_TRUE(core_->CompletePreemptions().ok());
  }
  EXPECT_EQ(created(infeasible), 6);
}

// A node change rewrites the reason of every waiting group (it counts the
// nodes). A walk cut at the store's write limit (etcd: one Txn) stops
// writing reasons alone at half of it, and goes on placing: under steady
// node churn, reason rewrites at the head of a deep queue took every walk's
// writes, and a group behind them that fit waited for good.
TEST_F(PlacementManagerTest, ReasonRewritesDoNotHoldAWalkBackFromWhatFits) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  Create(Cpus(1, 8));
  std::vector<std::string> big;
  for (int i = 0; i < 20; ++i) big.push_back(Create(Cpus(1, 8)));
  const std::string small = Create(Cpus(1, 2));
  ASSERT_EQ(core_->StateOf(small), PgState::kPending);
  const std::string reason_before =
      core_->placement().Get(big.back())->group.reason;
  core_->faults().LimitUnitWrites(6);
  // Churn: nodes too small for any of them come, one per check.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(core_->Register({CpuNode(absl::StrCat("tiny", i), 1)}).ok());
    ASSERT_TRUE(core_->CompletePreemptions().ok());
  }
  ASSERT_TRUE(core_->Register({CpuNode("c2", 2)}).ok());  // `small` fits
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(core_->Register({CpuNode(absl::StrCat("more", i), 1)}).ok());
    ASSERT_TRUE(core_->CompletePreemptions().ok());
  }
  EXPECT_EQ(core_->StateOf(small), PgState::kCreated);
  // Once the churn stops, the next checks write the reasons left stale.
  auto reason = [&](const std::string& id) {
    auto view = core_->placement().Get(id);
    return view.ok() ? view->group.reason : view.status().ToString();
  };
  const std::string current = reason(big.front());
  EXPECT_NE(current, reason_before);
  for (int i = 0; i < 20 && reason(big.back()) != current; ++i) {
    ASSERT_TRUE(core_->CompletePreemptions().ok());
  }
  for (const std::string& id : big) EXPECT_EQ(reason(id), current) << id;
}

// A create re-tries the queue first when an earlier op of its commit group
// freed capacity; that walk writes at most 64 groups, so that the create
// still fits what the store commits at once (here 100 writes, as etcd's
// Txn limit). The newcomer then waits behind the rest of the queue, which
// the walk at the end of the commit group re-tries. (The create was
// refused with FAILED_PRECONDITION: its walk wrote every group it placed.)
TEST_F(PlacementManagerTest, ACreatesWalkOfTheQueueIsBounded) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 1)}).ok());
  Create(Cpus(1, 1));
  std::vector<std::string> waiting;
  for (int i = 0; i < 120; ++i) waiting.push_back(Create(Cpus(1, 1)));
  ASSERT_EQ(core_->StateOf(waiting.back()), PgState::kPending);
  core_->faults().LimitUnitWrites(100);
  absl::BlockingCounter answered(2);
  absl::StatusOr<PlacementGroupView> created;
  core_->InOneGroup([&] {
    core_->nodes().Register({CpuNode("c2", 200)},
                            [&](absl::StatusOr<std::vector<NodeView>> v) {
                              EXPECT_TRUE(v.ok()) << v.status();
                              answered.DecrementCount();
                            });
    core_->placement().Create(Cpus(1, 1),
                              [&](absl::StatusOr<PlacementGroupView> v) {
                                created = std::move(v);
                                answered.DecrementCount();
                              });
  });
  answered.Wait();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->group.state, PgState::kPending);
  EXPECT_EQ(core_->StateOf(created->group.id), PgState::kCreated);
  for (const std::string& id : waiting) {
    EXPECT_EQ(core_->StateOf(id), PgState::kCreated) << id;
  }
}

TEST_F(PlacementManagerTest, ExpiredLeasesRescheduleInTheSameCommit) {
  Start(Options(absl::Minutes(5), 100, absl::Seconds(10)));
  ASSERT_TRUE(core_->Register({CpuNode("a", 4), CpuNode("b", 4)}).ok());
  auto g = core_->Create(Cpus(1, 4));
  ASSERT_TRUE(g.ok());
  const std::string held = g->group.bundles[0].node_id;
  const std::string spare = held == "a" ? "b" : "a";
  core_->Advance(absl::Seconds(8));
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{spare, std::nullopt, std::nullopt}}).ok());
  core_->Advance(absl::Seconds(4));  // `held` is 12 s silent, `spare` 4 s
  ASSERT_TRUE(core_->CheckLeases().ok());
  auto dead = core_->nodes().Get(held);
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ(dead->node.state, scheduler::NodeState::kDead);
  auto moved = core_->placement().Get(g->group.id);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->group.bundles[0].node_id, spare);
  // Durable: the store says DEAD too.
  bool stored_dead = false;
  auto stored = memory_.Load();
  ASSERT_TRUE(stored.ok());
  for (const scheduler::Node& n : stored->nodes) {
    if (n.node_id == held) {
      stored_dead = n.state == scheduler::NodeState::kDead;
    }
  }
  EXPECT_TRUE(stored_dead);
}

// Records what a watch stream receives.
class Recorder : public PlacementManager::Watcher {
 public:
  void Deliver(const PlacementGroup& /*group*/,
               absl::FunctionRef<const PlacementGroupView&()> view) override {
    const PlacementGroupView& v = view();
    absl::MutexLock lock(&mu_);
    seen_.push_back(v.group.id + ":" + std::string(PgStateName(v.group.state)));
    reasons_.push_back(v.group.reason);
  }
  void Restored() override {
    absl::MutexLock lock(&mu_);
    seen_.push_back("restored");
    reasons_.push_back("");
  }
  std::vector<std::string> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  // The pending reason of each event, in the order of seen().
  std::vector<std::string> reasons() {
    absl::MutexLock lock(&mu_);
    return reasons_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> seen_;
  std::vector<std::string> reasons_;
};

TEST_F(PlacementManagerTest, ABeatThatOnlyRenewsTakesNoWriteOp) {
  Start(Options(absl::Minutes(5), 100, absl::Seconds(10)));
  ASSERT_TRUE(core_->Register({CpuNode("a", 4), CpuNode("b", 4)}).ok());
  // Every commit fails from here: a beat that changes nothing but the lease
  // is still answered (it commits nothing), and it still counts.
  core_->faults().FailWrites(1000);
  core_->Advance(absl::Seconds(8));
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"a", std::nullopt, std::nullopt},
                               NodeBeat{"b", scheduler::NodeState::kAlive,
                                        std::vector<std::string>{}}})
                  .ok());
  EXPECT_EQ(core_->nodes().Get("a")->last_heartbeat, core_->now());
  // A beat that changes the node (quarantine) is a write, and fails here.
  EXPECT_EQ(core_
                ->Heartbeat({NodeBeat{"b", std::nullopt,
                                      std::vector<std::string>{"hbm ecc"}}})
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(core_->nodes().Get("b")->node.quarantine_reason, "");
  // An unknown node is NotFound, naming it, as before.
  EXPECT_EQ(
      core_->Heartbeat({NodeBeat{"ghost", std::nullopt, std::nullopt}}).code(),
      absl::StatusCode::kNotFound);
  core_->faults().FailWrites(0);
  core_->Advance(absl::Seconds(4));  // 12 s since registration, 4 s since beats
  ASSERT_TRUE(core_->CheckLeases().ok());
  EXPECT_EQ(core_->nodes().Get("a")->node.state, scheduler::NodeState::kAlive);
  EXPECT_EQ(core_->nodes().Get("b")->node.state, scheduler::NodeState::kAlive);
  // A DEAD node's beat revives it through the writer.
  core_->Advance(absl::Seconds(11));
  ASSERT_TRUE(core_->CheckLeases().ok());
  ASSERT_EQ(core_->nodes().Get("a")->node.state, scheduler::NodeState::kDead);
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{"a", std::nullopt, std::nullopt}}).ok());
  EXPECT_EQ(core_->nodes().Get("a")->node.state, scheduler::NodeState::kAlive);
}

// Watch: the current state, then every change. WatchChanges (the watch
// hub's, whose streams get their current state one by one): the changes only.
TEST_F(PlacementManagerTest, WatchersGetTheCurrentStateThenEveryChange) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  const std::string a = Create(Cpus(1, 4));
  Recorder recorder;
  Recorder changes;
  core_->placement().Watch(&recorder);
  core_->placement().WatchChanges(&changes);
  const std::string b = Create(Cpus(1, 4));
  ASSERT_TRUE(core_->Remove(a).ok());
  core_->placement().Unwatch(&recorder);
  core_->placement().Unwatch(&changes);
  EXPECT_EQ(recorder.seen(),
            (std::vector<std::string>{a + ":CREATED", b + ":PENDING",
                                      a + ":REMOVED", b + ":CREATED"}));
  EXPECT_EQ(changes.seen(),
            (std::vector<std::string>{b + ":PENDING", a + ":REMOVED",
                                      b + ":CREATED"}));
}

// WithCurrentState holds installs off while `subscribe` runs: the state it
// copied stays the installed one, so what `subscribe` registers gets every
// later change and none already in that state (a commit installed in
// between would come again as a change, or after a later state of its
// group).
TEST_F(PlacementManagerTest, NoCommitIsInstalledWhileAWatchStarts) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 64)}).ok());
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop) {
      auto view = core_->Create(Cpus(1, 1));
      if (!view.ok() || !core_->Remove(view->group.id).ok()) return;
    }
  });
  int moved = 0;
  for (int i = 0; i < 100; ++i) {
    std::vector<std::string> copied, listed;
    const PlacementManager::CurrentState current =
        core_->placement().WithCurrentState({}, [&] {
          absl::SleepFor(absl::Milliseconds(1));  // commits are queued
          for (const PlacementGroupView& v : core_->placement().List({})) {
            listed.push_back(v.group.id);
          }
        });
    for (const auto& g : current.groups) copied.push_back(g->id);
    if (listed != copied) ++moved;
  }
  stop = true;
  churn.join();
  EXPECT_EQ(moved, 0);
}

// A commit whose sync failed may have landed: the writer re-reads the store,
// and the watchers are told (Watcher::Restored), as what is installed now
// (here the group of that commit) was never delivered to them.
TEST_F(PlacementManagerTest, AReReadAfterAFailedCommitIsToldToTheWatchers) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  Recorder recorder;
  core_->placement().WatchChanges(&recorder);
  core_->faults().FailSyncs(1);
  EXPECT_EQ(core_->Create(Cpus(1, 1)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(core_->placement().List({}).size(), 1u);  // it landed
  const std::string b = Create(Cpus(1, 1));
  core_->placement().Unwatch(&recorder);
  EXPECT_EQ(recorder.seen(),
            (std::vector<std::string>{"restored", b + ":CREATED"}));
}

// Writes, in one log, what a watcher receives and when it is flushed.
class FlushLog : public PlacementManager::Watcher {
 public:
  void Deliver(
      const PlacementGroup& group,
      absl::FunctionRef<const PlacementGroupView&()> /*view*/) override {
    Add("event " + group.id);
  }
  void Flush() override { Add("flush"); }
  void Add(std::string entry) {
    absl::MutexLock lock(&mu_);
    log_.push_back(std::move(entry));
  }
  std::vector<std::string> log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> log_;
};

TEST_F(PlacementManagerTest, ACommitsEventsAreFlushedAfterItsAnswers) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  FlushLog log;
  core_->placement().Watch(&log);
  absl::Notification answered;
  std::string id;
  core_->placement().Create(Cpus(1, 1), [&](auto view) {
    ASSERT_TRUE(view.ok()) << view.status();
    id = view->group.id;
    log.Add("answer " + id);
    answered.Notify();
  });
  answered.WaitForNotification();
  // The writer runs one group at a time: once the next create is answered,
  // the first group's flush has run.
  Create(Cpus(1, 1));
  core_->placement().Unwatch(&log);
  // The registration's group may flush after its answer, once the watcher
  // is in: from the create's event on, the order is the create's own.
  const std::vector<std::string> seen = log.log();
  auto event = std::find(seen.begin(), seen.end(), "event " + id);
  ASSERT_GE(seen.end() - event, 3) << absl::StrJoin(seen, ", ");
  EXPECT_EQ(std::vector<std::string>(event, event + 3),
            (std::vector<std::string>{"event " + id, "answer " + id, "flush"}));
}

TEST_F(PlacementManagerTest, RemovedEventRepeatsNoStaleReason) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  const std::string waiting = Create(Cpus(1, 8));
  auto view = core_->placement().Get(waiting);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->group.state, PgState::kInfeasible);
  // The reason says why, without repeating the state.
  EXPECT_FALSE(view->group.reason.empty());
  EXPECT_EQ(view->group.reason.find("INFEASIBLE"), std::string::npos)
      << view->group.reason;
  Recorder recorder;
  core_->placement().Watch(&recorder);
  ASSERT_TRUE(core_->Remove(waiting).ok());
  core_->placement().Unwatch(&recorder);
  EXPECT_EQ(recorder.seen(), (std::vector<std::string>{waiting + ":INFEASIBLE",
                                                       waiting + ":REMOVED"}));
  EXPECT_EQ(recorder.reasons(),
            (std::vector<std::string>{view->group.reason, ""}));
}

// A victim with on_preemption REMOVE and no grace, made and preempted in
// one commit: watchers saw it PREEMPTING (an intermediate event), so its
// last event is REMOVED, as for any group that leaves. (There was none: a
// watcher kept it PREEMPTING for good.)
TEST_F(PlacementManagerTest, AGroupMadeAndRemovedInOneCommitEndsRemoved) {
  CoreOptions options;
  options.placement.preemption_grace = absl::ZeroDuration();
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  PgOwner leaves = WithPriority(0);
  leaves.on_preemption = OnPreemption::kRemove;
  Recorder recorder;
  core_->placement().Watch(&recorder);
  absl::BlockingCounter answered(2);
  std::string victim, preemptor;
  core_->InOneGroup([&] {
    core_->placement().Create(Cpus(1, 4, leaves),
                              [&](absl::StatusOr<PlacementGroupView> v) {
                                EXPECT_TRUE(v.ok()) << v.status();
                                if (v.ok()) victim = v->group.id;
                                answered.DecrementCount();
                              });
    core_->placement().Create(Cpus(1, 4, WithPriority(1000)),
                              [&](absl::StatusOr<PlacementGroupView> v) {
                                EXPECT_TRUE(v.ok()) << v.status();
                                if (v.ok()) preemptor = v->group.id;
                                answered.DecrementCount();
                              });
  });
  answered.Wait();
  core_->placement().Unwatch(&recorder);
  EXPECT_EQ(core_->StateOf(preemptor), PgState::kCreated);
  EXPECT_EQ(core_->placement().Get(victim).status().code(),
            absl::StatusCode::kNotFound);
  std::vector<std::string> of_victim;
  for (const std::string& event : recorder.seen()) {
    if (event.rfind(victim + ":", 0) == 0) of_victim.push_back(event);
  }
  ASSERT_FALSE(of_victim.empty());
  EXPECT_EQ(of_victim.back(), victim + ":REMOVED");
}

TEST_F(PlacementManagerTest, UndrainedNodeTakesTheWaitingGroupsAtOnce) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4), CpuNode("c2", 4)}).ok());
  auto drained = core_->Drain("c1");
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(drained->node.state, scheduler::NodeState::kDraining);
  const std::string spread =
      Create(Cpus(2, 1, {}, scheduler::Strategy::kStrictSpread));
  EXPECT_EQ(core_->StateOf(spread), PgState::kPending);

  auto undrained = core_->Undrain("c1");
  ASSERT_TRUE(undrained.ok()) << undrained.status();
  EXPECT_EQ(undrained->node.state, scheduler::NodeState::kAlive);
  // The queue was re-tried in the undrain's commit.
  EXPECT_EQ(core_->StateOf(spread), PgState::kCreated);
  // A no-op on an ALIVE node.
  auto again = core_->Undrain("c1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->node.state, scheduler::NodeState::kAlive);
  EXPECT_EQ(core_->Undrain("nope").status().code(),
            absl::StatusCode::kNotFound);
  // A dead node stays dead: a drain or undrain applies when it comes back.
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  auto dead = core_->Undrain("c2");
  ASSERT_TRUE(dead.ok()) << dead.status();
  EXPECT_EQ(dead->node.state, scheduler::NodeState::kDead);
  EXPECT_FALSE(dead->node.drain_kept);
}

TEST_F(PlacementManagerTest, ANodeRemovedAndRegisteredInOneCommitKeepsALease) {
  CoreOptions options;
  options.heartbeat_timeout = absl::Seconds(10);
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  absl::BlockingCounter answered(2);
  core_->InOneGroup([&] {
    core_->nodes().Remove("c1", false, [&](const absl::Status& s) {
      EXPECT_TRUE(s.ok()) << s;
      answered.DecrementCount();
    });
    core_->nodes().Register({CpuNode("c1", 8)},
                            [&](absl::StatusOr<std::vector<NodeView>> v) {
                              EXPECT_TRUE(v.ok()) << v.status();
                              answered.DecrementCount();
                            });
  });
  answered.Wait();
  ASSERT_TRUE(core_->nodes().Get("c1").ok());
  // Its lease runs out like any node's: it was not forgotten by the remove.
  core_->Advance(absl::Seconds(11));
  ASSERT_TRUE(core_->CheckLeases().ok());
  EXPECT_EQ(core_->nodes().Get("c1")->node.state, scheduler::NodeState::kDead);
}

TEST_F(PlacementManagerTest, ARefusedBatchRenewsNoLease) {
  // Every mutation is all or nothing: a batch refused for one entry renews
  // the others' leases neither.
  CoreOptions options;
  options.heartbeat_timeout = absl::Seconds(10);
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("a", 4), CpuNode("b", 4)}).ok());
  const std::string pg = Create(Cpus(2, 4, {}, scheduler::Strategy::kSpread));
  ASSERT_EQ(core_->StateOf(pg), PgState::kCreated);
  const absl::Time registered = core_->nodes().Get("a")->last_heartbeat;
  core_->Advance(absl::Seconds(6));
  EXPECT_EQ(core_
                ->Heartbeat({NodeBeat{"a", scheduler::NodeState::kDraining, {}},
                             NodeBeat{"nope", std::nullopt, {}}})
                .code(),
            absl::StatusCode::kNotFound);
  // b shrinks below its bundle: refused.
  EXPECT_EQ(core_->Register({CpuNode("a", 4), CpuNode("b", 2)}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->nodes().Get("a")->last_heartbeat, registered);
  core_->Advance(absl::Seconds(5));  // 11 s since a's last real renewal
  ASSERT_TRUE(core_->CheckLeases().ok());
  EXPECT_EQ(core_->nodes().Get("a")->node.state, scheduler::NodeState::kDead);
}

TEST_F(PlacementManagerTest, AReportRacingARemoveLeavesNoTelemetryBehind) {
  // An agent reports as fast as it can while its node is removed: a report
  // that found the node must land before the remove forgets it, never after.
  Start();
  std::atomic<bool> stop{false};
  std::atomic<int> not_found{0};
  std::thread agent([&] {
    ChipMetrics chip;
    chip.duty_cycle = 50;
    while (!stop.load()) {
      if (core_->logging()
              .ReportMetrics({NodeTpuMetrics{"t1", {chip}}})
              .code() == absl::StatusCode::kNotFound) {
        not_found.fetch_add(1);
      }
    }
  });
  int stale = 0;
  for (int i = 0; i < 300 && stale == 0; ++i) {
    ASSERT_TRUE(core_->Register({CpuNode("t1", 4)}).ok());
    absl::SleepFor(absl::Microseconds(200));
    ASSERT_TRUE(core_->RemoveNode("t1", false).ok());
    // Every report that began before the remove is over once one fails.
    const int seen = not_found.load();
    while (not_found.load() <= seen) std::this_thread::yield();
    if (core_->telemetry().Fresh(core_->now()).contains("t1")) ++stale;
  }
  stop = true;
  agent.join();
  EXPECT_EQ(stale, 0);
}

TEST_F(PlacementManagerTest, ANodeRemovedAndRegisteredInOneCommitLogsAnew) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  ASSERT_TRUE(core_->AppendLogs("c1", {"old-0", "old-1", "old-2"}).ok());
  absl::BlockingCounter answered(3);
  auto answer = [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    answered.DecrementCount();
  };
  core_->InOneGroup([&] {
    core_->nodes().Remove("c1", false, answer);
    core_->nodes().Register(
        {CpuNode("c1", 4)},
        [&](absl::StatusOr<std::vector<NodeView>> v) { answer(v.status()); });
    core_->logging().AppendLogs("c1", Core::Lines({"new-0", "new-1"}), answer);
  });
  answered.Wait();
  const std::vector<std::string> fresh = {"new-0", "new-1"};
  EXPECT_EQ(core_->LogTexts("c1"), fresh);
  Restart();  // the store holds the same
  EXPECT_EQ(core_->LogTexts("c1"), fresh);
  ASSERT_TRUE(core_->AppendLogs("c1", {"new-2"}).ok());
  Restart();
  EXPECT_EQ(core_->LogTexts("c1"),
            (std::vector<std::string>{"new-0", "new-1", "new-2"}));
  // Removed for good, its lines go with it: a node of that id starts empty.
  ASSERT_TRUE(core_->RemoveNode("c1", false).ok());
  Restart();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  EXPECT_EQ(core_->LogTexts("c1"), std::vector<std::string>{});
}

TEST_F(PlacementManagerTest, AHeartbeatSayingAliveLiftsNoDrain) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4), CpuNode("c2", 4)}).ok());
  ASSERT_TRUE(core_->Drain("c1").ok());
  const auto alive = [](const char* id) {
    return NodeBeat{id, scheduler::NodeState::kAlive, std::nullopt};
  };
  // Only UndrainNode lifts a drain (an agent's token may not call it).
  ASSERT_TRUE(core_->Heartbeat({alive("c1")}).ok());
  EXPECT_EQ(core_->nodes().Get("c1")->node.state,
            scheduler::NodeState::kDraining);
  // ALIVE still brings a DEAD node back, as any beat does.
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  ASSERT_EQ(core_->nodes().Get("c2")->node.state, scheduler::NodeState::kDead);
  ASSERT_TRUE(core_->Heartbeat({alive("c2")}).ok());
  EXPECT_EQ(core_->nodes().Get("c2")->node.state, scheduler::NodeState::kAlive);
}

TEST_F(PlacementManagerTest, ADrainedNodeThatDiesComesBackDrained) {
  CoreOptions options;
  options.heartbeat_timeout = absl::Seconds(10);
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4), CpuNode("c2", 4)}).ok());
  ASSERT_TRUE(core_->Drain("c1").ok());
  ASSERT_TRUE(core_->Drain("c2").ok());
  auto state = [&](const char* id) {
    return core_->nodes().Get(id)->node.state;
  };
  // c1's lease runs out (a host rebooted for its maintenance); c2 says it
  // is dead, then alive in the same batch (its agent's token could).
  core_->Advance(absl::Seconds(11));
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt},
                               NodeBeat{"c2", std::nullopt, std::nullopt}})
                  .ok());
  EXPECT_EQ(state("c2"), scheduler::NodeState::kDraining);
  ASSERT_TRUE(core_->CheckLeases().ok());
  ASSERT_EQ(state("c1"), scheduler::NodeState::kDead);
  Restart(options);  // kept in the store
  ASSERT_EQ(state("c1"), scheduler::NodeState::kDead);
  // Back by heartbeat, or by registering again: still drained.
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{"c1", std::nullopt, std::nullopt}}).ok());
  EXPECT_EQ(state("c1"), scheduler::NodeState::kDraining);
  core_->Advance(absl::Seconds(11));
  ASSERT_TRUE(core_->CheckLeases().ok());
  ASSERT_EQ(state("c1"), scheduler::NodeState::kDead);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  EXPECT_EQ(state("c1"), scheduler::NodeState::kDraining);
  // Only UndrainNode lifts it, and then a death is only a death.
  ASSERT_TRUE(core_->Undrain("c1").ok());
  // An operator may drain or undrain a node while it is dead: the drain
  // waits, kept across a restart, for the node to come back.
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  auto drained = core_->Drain("c2");
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(drained->node.state, scheduler::NodeState::kDead);
  EXPECT_TRUE(drained->node.drain_kept);
  Restart(options);
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{"c2", std::nullopt, std::nullopt}}).ok());
  EXPECT_EQ(state("c2"), scheduler::NodeState::kDraining);
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  ASSERT_TRUE(core_->Undrain("c2").ok());
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{"c2", std::nullopt, std::nullopt}}).ok());
  EXPECT_EQ(state("c2"), scheduler::NodeState::kAlive);
  core_->Advance(absl::Seconds(11));
  ASSERT_TRUE(core_->CheckLeases().ok());
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{"c1", std::nullopt, std::nullopt}}).ok());
  EXPECT_EQ(state("c1"), scheduler::NodeState::kAlive);
}

TEST_F(PlacementManagerTest, AGroupOnADrainingNodeIsReplacedAroundIt) {
  Start();
  ASSERT_TRUE(
      core_->Register({CpuNode("c1", 4), CpuNode("c2", 4), CpuNode("c3", 4)})
          .ok());
  const std::string pg =
      Create(Cpus(3, 4, {}, scheduler::Strategy::kStrictSpread));
  ASSERT_TRUE(core_->Drain("c2").ok());
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c3", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  EXPECT_EQ(core_->StateOf(pg), PgState::kRescheduling);
  // Draining keeps what c2 holds: the lost bundle alone needs a node.
  ASSERT_TRUE(core_->Register({CpuNode("c4", 4)}).ok());
  auto view = core_->placement().Get(pg);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->group.state, PgState::kCreated) << view->group.reason;
  EXPECT_EQ(SortedNodes(view->group),
            (std::vector<std::string>{"c1", "c2", "c4"}));
}

TEST_F(PlacementManagerTest, ASurvivorStaysOnANodeRelabelledSinceItsPlacement) {
  Start();
  ASSERT_TRUE(core_
                  ->Register({CpuNode("c1", 4), CpuNode("c2", 4),
                              CpuNode("c3", 4), CpuNode("c4", 4, "z2")})
                  .ok());
  PgSpec spec = Cpus(3, 4, {}, scheduler::Strategy::kStrictSpread);
  auto in_z1 =
      scheduler::ParseLabelSelector({{"ray.io/availability-zone", "z1"}});
  ASSERT_TRUE(in_z1.ok()) << in_z1.status();
  for (scheduler::Bundle& b : spec.group.request.bundles) {
    b.selector = *in_z1;
  }
  const std::string pg = Create(spec);
  ASSERT_EQ(core_->StateOf(pg), PgState::kCreated);
  // c1 moves to z2 under its bundle (labels apply to new placements only);
  // then c3 is lost, and its bundle needs a z1 node again.
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4, "z2")}).ok());
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c3", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  EXPECT_EQ(core_->StateOf(pg), PgState::kRescheduling);
  ASSERT_TRUE(core_->Register({CpuNode("c5", 4)}).ok());
  auto view = core_->placement().Get(pg);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->group.state, PgState::kCreated) << view->group.reason;
  EXPECT_EQ(SortedNodes(view->group),
            (std::vector<std::string>{"c1", "c2", "c5"}));
}

TEST_F(PlacementManagerTest,
       ARescheduledGroupKeepsItsSurvivorsAndItsListInUse) {
  // Primary: two 8-CPU bundles; fallback: four 4-CPU ones.
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("n1", 8), CpuNode("n2", 8)}).ok());
  auto with_fallback = [](std::vector<std::vector<double>> lists) {
    scheduler::PlacementRequest r;
    r.strategy = scheduler::Strategy::kSpread;
    for (size_t l = 0; l < lists.size(); ++l) {
      std::vector<scheduler::Bundle> bundles;
      for (double cpu : lists[l]) {
        bundles.push_back(scheduler::Bundle{{{"CPU", Units(cpu)}}, {}, ""});
      }
      (l == 0 ? r.bundles : r.fallbacks.emplace_back()) = std::move(bundles);
    }
    auto spec = NewPgSpec(std::move(r), {}, Limits());
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  };
  const std::string pg = Create(with_fallback({{8, 8}, {4, 4, 4, 4}}));
  ASSERT_EQ(core_->placement().Get(pg)->group.fallback_index, -1);
  const std::string kept = core_->placement().Get(pg)->group.bundles[0].node_id;
  const std::string lost = kept == "n1" ? "n2" : "n1";
  ASSERT_TRUE(core_->Register({CpuNode("n3", 4), CpuNode("n4", 4)}).ok());
  // With n2 gone the fallback would fit (n1 twice, n3, n4), but only by
  // moving the survivor: it stays, and the group waits for an 8-CPU node.
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{lost, scheduler::NodeState::kDead, {}}}).ok());
  auto view = core_->placement().Get(pg);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->group.state, PgState::kRescheduling) << view->group.reason;
  ASSERT_EQ(view->group.bundles.size(), 2u);
  EXPECT_EQ(view->group.bundles[0].node_id, kept);

  // A group placed on its fallback re-places the lost bundle of that list,
  // and still reports the fallback.
  ASSERT_TRUE(core_->Remove(pg).ok());
  const std::string on_fallback =
      Create(with_fallback({{16, 16}, {4, 4, 4, 4}}));
  view = core_->placement().Get(on_fallback);
  ASSERT_EQ(view->group.state, PgState::kCreated);
  ASSERT_EQ(view->group.fallback_index, 0);
  const std::string gone = "n3";  // holds one bundle (n1 or n2 two)
  ASSERT_TRUE(
      core_->Heartbeat({NodeBeat{gone, scheduler::NodeState::kDead, {}}}).ok());
  ASSERT_TRUE(core_->Register({CpuNode("n5", 4)}).ok());
  view = core_->placement().Get(on_fallback);
  EXPECT_EQ(view->group.state, PgState::kCreated) << view->group.reason;
  EXPECT_EQ(view->group.fallback_index, 0);
  EXPECT_EQ(view->group.bundles.size(), 4u);
}

TEST_F(PlacementManagerTest, ExplainSaysWhyAGroupWaits) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  const std::string waiting = Create(Cpus(1, 8));
  auto why = core_->placement().Explain(waiting);
  ASSERT_TRUE(why.ok());
  EXPECT_EQ(why->outcome, "INFEASIBLE");
  EXPECT_FALSE(why->details.empty());
  auto dry = core_->placement().ExplainDryRun(Cpus(1, 2));
  ASSERT_TRUE(dry.ok());
  EXPECT_EQ(dry->outcome, "PLACED");
  EXPECT_EQ(dry->bundle_nodes, std::vector<std::string>{"c1"});
  EXPECT_EQ(core_->placement().Explain("pg-nope").status().code(),
            absl::StatusCode::kNotFound);
}

// Preemption on with a 30 s grace and the given cool-down.
CoreOptions Preempting(absl::Duration cooldown) {
  CoreOptions options;
  options.placement.preemption_grace = absl::Seconds(30);
  options.placement.preemption_cooldown = cooldown;
  return options;
}

PgOwner OfClass(const std::string& priority_class, int32_t priority = 0) {
  PgOwner owner;
  owner.priority_class = priority_class;
  owner.priority = priority;
  return owner;
}

TEST_F(PlacementManagerTest, ExplainSaysWhatPreemptionWouldFreeAndDoesNothing) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  const std::string kept = Create(V6eSlices(1, OfClass("batch")));
  const std::string victim = Create(V6eSlices(1));  // the default class
  auto dry =
      core_->placement().ExplainDryRun(V6eSlices(1, OfClass("production")));
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->outcome, "UNSCHEDULABLE");
  ASSERT_FALSE(dry->details.empty());
  EXPECT_EQ(
      dry->details.back(),
      absl::StrCat("preemption: preempting 1 group(s) of "
                   "priority <= 0 makes room: ",
                   victim, " (best-effort, 16 TPU on slice ",
                   core_->placement().Get(victim)->group.slice_names[0], ")"));
  // A group that may not preempt says why it would wait.
  PgSpec never = V6eSlices(1, OfClass("production"));
  never.group.preemption_policy = PreemptionPolicy::kNever;
  auto waits = core_->placement().ExplainDryRun(never);
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(waits->details.back().rfind(
                "preemption_policy NEVER, so it waits; preempting 1", 0),
            0)
      << waits->details.back();
  // An equal priority has no candidates: no preemption line.
  auto equal = core_->placement().ExplainDryRun(V6eSlices(1));
  ASSERT_TRUE(equal.ok());
  for (const std::string& line : equal->details) {
    EXPECT_EQ(line.find("preempt"), std::string::npos) << line;
  }
  // Nothing was preempted.
  EXPECT_EQ(core_->placement().Get(victim)->group.state, PgState::kCreated);
  EXPECT_EQ(core_->placement().Get(kept)->group.state, PgState::kCreated);
  // A bad class in a dry run is refused like a create.
  auto bad = core_->placement().ExplainDryRun(V6eSlices(1, OfClass("urgent")));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// Candidates are the groups on the nodes the preemptor could use: past the
// planner's bound of 4,096 candidates, younger best-effort groups on a CPU
// node no longer crowd out the one holding the slice.
TEST_F(PlacementManagerTest, VictimsComeFromTheNodesTheRequestCouldUse) {
  Start(Preempting(absl::ZeroDuration()));
  std::vector<scheduler::Node> nodes = Slice("s1", "TPU-V6E", "4x4");
  nodes.push_back(CpuNode("cpu", 5000, "z9"));
  ASSERT_TRUE(core_->Register(nodes).ok());
  const std::string holder = Create(V6eSlices(1));  // best-effort, oldest
  for (int i = 0; i < 4100; ++i) {
    PgSpec spec = Cpus(1, 1);
    spec.group.request.bundles[0].selector = *scheduler::ParseLabelSelector(
        {{std::string(scheduler::kLabelZone), "z9"}});
    ASSERT_EQ(core_->StateOf(Create(spec)), PgState::kCreated);
  }
  const std::string prod = Create(V6eSlices(1, OfClass("production")));
  EXPECT_EQ(core_->placement().Get(prod)->group.preempting,
            std::vector<std::string>{holder});
}

// A walk's later pass re-places a group this op changed in an earlier one
// (here V, preempted and requeued by P in pass 1, preempts eight groups in
// pass 2): the group is compared with what it was after those writes,
// which move the op's changes (an ASan build saw the old read as a
// heap-use-after-free).
TEST_F(PlacementManagerTest, ALaterPassPreemptsForAGroupAnEarlierPassMoved) {
  CoreOptions options;
  options.placement.preemption_grace = absl::ZeroDuration();
  options.placement.preemption_cooldown = absl::Seconds(10);
  Start(options);
  ASSERT_TRUE(
      core_->Register({CpuNode("a", 8, "za"), CpuNode("b", 8, "zb")}).ok());
  auto on = [](PgSpec spec, const std::string& node) {
    spec.group.request.bundles[0].selector = *scheduler::ParseLabelSelector(
        {{std::string(scheduler::kLabelZone), "z" + node}});
    return spec;
  };
  std::vector<std::string> low;
  for (int i = 0; i < 8; ++i) {
    low.push_back(Create(on(Cpus(1, 1, OfClass("", 0)), "b")));
  }
  core_->Advance(absl::Seconds(10));
  const std::string v = Create(Cpus(1, 8, OfClass("", 100)));
  ASSERT_EQ(core_->placement().Get(v)->group.bundles[0].node_id, "a");
  // V is still in its cool-down: P waits.
  const std::string p = Create(on(Cpus(1, 8, OfClass("", 1000)), "a"));
  ASSERT_EQ(core_->StateOf(p), PgState::kPending);
  core_->Advance(absl::Seconds(10));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(core_->StateOf(p), PgState::kCreated);
  EXPECT_EQ(core_->placement().Get(v)->group.bundles[0].node_id, "b");
  EXPECT_EQ(core_->StateOf(v), PgState::kCreated);
  for (const std::string& id : low) {
    EXPECT_EQ(core_->StateOf(id), PgState::kPending) << id;
  }
}

// Preemptions that fall due at one check finish in one op each: all of
// them together may be more than the store commits at once (etcd: one
// Txn), and such an op failed at every check, for good.
TEST_F(PlacementManagerTest, PreemptionsDueTogetherFinishApart) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(core_->Register({CpuNode("c1", 3)}).ok());
  std::vector<std::string> low, high;
  for (int i = 0; i < 3; ++i) low.push_back(Create(Cpus(1, 1)));
  for (int i = 0; i < 3; ++i) {
    high.push_back(Create(Cpus(1, 1, OfClass("", 1000))));
    ASSERT_EQ(core_->StateOf(high.back()), PgState::kPending);
  }
  for (const std::string& id : low) {
    ASSERT_EQ(core_->StateOf(id), PgState::kPreempting) << id;
  }
  core_->faults().LimitUnitWrites(4);
  core_->Advance(absl::Seconds(31));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  for (const std::string& id : high) {
    EXPECT_EQ(core_->StateOf(id), PgState::kCreated) << id;
  }
  for (const std::string& id : low) {
    EXPECT_EQ(core_->StateOf(id), PgState::kPending) << id;
  }
}

// The groups of a lost node are re-placed highest priority first (they
// were in id order): one left RESCHEDULING preempts nothing, so the
// high-priority group would wait behind the low one that took the room.
TEST_F(PlacementManagerTest, ALostNodesGroupsAreReplacedByPriority) {
  Start();
  ASSERT_TRUE(core_->Register({CpuNode("n1", 8)}).ok());
  const std::string low = Create(Cpus(1, 4, OfClass("", 0)));
  const std::string high = Create(Cpus(1, 4, OfClass("", 1000)));
  ASSERT_TRUE(core_->Register({CpuNode("spare", 4)}).ok());
  ASSERT_TRUE(core_->RemoveNode("n1", /*force=*/true).ok());
  EXPECT_EQ(core_->StateOf(high), PgState::kCreated);
  EXPECT_EQ(core_->placement().Get(high)->group.bundles[0].node_id, "spare");
  EXPECT_EQ(core_->StateOf(low), PgState::kRescheduling);
}

// What the walk at the end of a commit group frees itself is walked again
// at the next check: here a preemptor placed without its victim (another
// group left) turns that victim, which lost a node while PREEMPTING,
// RESCHEDULING. It was not in that walk's list, and nothing walked the
// queue again: it waited RESCHEDULING beside free room.
TEST_F(PlacementManagerTest, WhatTheLastWalkFreesIsWalkedAtTheNextCheck) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(
      core_->Register({CpuNode("n1", 2), CpuNode("n2", 2), CpuNode("big", 4)})
          .ok());
  const std::string g = Create(Cpus(1, 4, OfClass("", 2000)));
  const std::string v =
      Create(Cpus(2, 2, OfClass("", 0), scheduler::Strategy::kStrictSpread));
  ASSERT_EQ(core_->StateOf(v), PgState::kCreated);
  ASSERT_TRUE(core_->Register({CpuNode("s", 2)}).ok());
  const std::string p = Create(Cpus(2, 2, OfClass("", 1000)));
  ASSERT_EQ(core_->StateOf(p), PgState::kPending);
  ASSERT_EQ(core_->StateOf(v), PgState::kPreempting);
  ASSERT_TRUE(core_->RemoveNode("n1", /*force=*/true).ok());
  ASSERT_EQ(core_->StateOf(v), PgState::kPreempting);
  ASSERT_TRUE(core_->CompletePreemptions().ok());  // nothing due yet
  // `big` frees: P is placed there without its victim, which turns
  // RESCHEDULING (it lost n1) inside that walk.
  ASSERT_TRUE(core_->Remove(g).ok());
  ASSERT_EQ(core_->StateOf(p), PgState::kCreated);
  ASSERT_EQ(core_->StateOf(v), PgState::kRescheduling);
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(core_->StateOf(v), PgState::kCreated);
}

// A walk cut to the store's limit starts no preemption whose writes do not
// fit what it may still write: the groups before it are placed, and the
// preemption starts in a later walk where it comes first. (The walk,
// halved, still held the preemption, was refused again and was dropped at
// every check: nothing in it was ever placed.)
TEST_F(PlacementManagerTest, ACutWalkStartsNoPreemptionAboveItsLimit) {
  Start(Preempting(absl::Seconds(10)));
  ASSERT_TRUE(
      core_->Register({CpuNode("a", 3, "za"), CpuNode("b", 2, "zb")}).ok());
  auto in = [](PgSpec spec, const std::string& zone) {
    spec.group.request.bundles[0].selector = *scheduler::ParseLabelSelector(
        {{std::string(scheduler::kLabelZone), zone}});
    return spec;
  };
  std::vector<std::string> low;
  for (int i = 0; i < 3; ++i) {
    low.push_back(Create(in(Cpus(1, 1, OfClass("", 0)), "za")));
  }
  const std::string holder = Create(in(Cpus(1, 2, OfClass("", 5000)), "zb"));
  const std::string g1 = Create(in(Cpus(1, 1, OfClass("", 1000)), "zb"));
  const std::string g2 = Create(in(Cpus(1, 1, OfClass("", 1000)), "zb"));
  // Its victims are in their cool-down: it waits, searching nothing.
  const std::string p = Create(in(Cpus(1, 3, OfClass("", 1000)), "za"));
  ASSERT_EQ(core_->StateOf(p), PgState::kPending);
  ASSERT_TRUE(core_->placement().Get(p)->group.preempting.empty());
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  core_->faults().LimitUnitWrites(4);
  core_->Advance(absl::Seconds(11));
  // b frees: g1 and g2 (1 write each), then p, whose preemption writes 4.
  ASSERT_TRUE(core_->Remove(holder).ok());
  EXPECT_EQ(core_->StateOf(g1), PgState::kCreated);
  EXPECT_EQ(core_->StateOf(g2), PgState::kCreated);
  EXPECT_TRUE(core_->placement().Get(p)->group.preempting.empty());
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(core_->placement().Get(p)->group.preempting.size(), 3u);
  for (const std::string& id : low) {
    EXPECT_EQ(core_->StateOf(id), PgState::kPreempting) << id;
  }
}

TEST_F(PlacementManagerTest, PriorityClassesResolveAtCreateAndSurviveRestart) {
  CoreOptions options;
  auto classes = PriorityClasses::Parse(
      "serving=2000:non-preemptible,batch=100,scavenger=-10", "batch");
  ASSERT_TRUE(classes.ok()) << classes.status();
  options.placement.priority_classes = *classes;
  Start(options);
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  const std::string serving = Create(V6eSlices(1, OfClass("serving")));
  const std::string plain = Create(Cpus(1, 1));
  const std::string bare = Create(Cpus(1, 1, OfClass("", 7)));
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  EXPECT_EQ(get(serving).priority_class, "serving");
  EXPECT_EQ(get(serving).priority, 2000);
  EXPECT_EQ(get(plain).priority_class, "batch");
  EXPECT_EQ(get(plain).priority, 100);
  EXPECT_EQ(get(bare).priority_class, "");
  EXPECT_EQ(get(bare).priority, 7);

  // Refused, and nothing is created.
  const size_t before = core_->placement().List({}).size();
  for (PgOwner owner : {OfClass("production"), OfClass("batch", 5)}) {
    auto refused = core_->Create(Cpus(1, 1, owner));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << refused.status();
  }
  EXPECT_EQ(core_->placement().List({}).size(), before);

  // A non-preemptible class is never offered as a victim.
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  const std::string scavenger = Create(V6eSlices(1, OfClass("scavenger")));
  auto dry = core_->placement().ExplainDryRun(V6eSlices(2, OfClass("", 5000)));
  ASSERT_TRUE(dry.ok()) << dry.status();
  const std::string said = absl::StrJoin(dry->details, "\n");
  EXPECT_NE(said.find("would not make room"), std::string::npos) << said;
  EXPECT_EQ(said.find(serving), std::string::npos) << said;

  Restart(options);
  EXPECT_EQ(get(serving).priority_class, "serving");
  EXPECT_EQ(get(serving).priority, 2000);
  EXPECT_EQ(get(scavenger).priority, -10);
}

// ---------------------------------------------------------------- preemption

TEST_F(PlacementManagerTest,
       APreemptorWaitsOutTheGraceThenTakesTheVictimsSlice) {
  const CoreOptions options = Preempting(absl::ZeroDuration());
  Start(options);
  for (const char* s : {"s1", "s2", "s3"}) {
    ASSERT_TRUE(core_->Register(Slice(s, "TPU-V6E", "4x4")).ok());
  }
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  const std::string low = Create(V6eSlices(1));  // best-effort
  const std::string batch1 = Create(V6eSlices(1, OfClass("batch")));
  const std::string batch2 = Create(V6eSlices(1, OfClass("batch")));
  const std::vector<std::string> low_slice = get(low).slice_names;
  Recorder recorder;
  core_->placement().Watch(&recorder);
  const absl::Time deadline = core_->now() + absl::Seconds(30);

  const std::string prod = Create(V6eSlices(1, OfClass("production")));
  EXPECT_EQ(get(prod).state, PgState::kPending);
  EXPECT_EQ(get(prod).preempting, std::vector<std::string>{low});
  EXPECT_EQ(get(prod).preemption_deadline, deadline);
  EXPECT_EQ(get(low).state, PgState::kPreempting);
  EXPECT_EQ(get(low).preempted_by, prod);
  EXPECT_EQ(get(low).preemption_deadline, deadline);
  // Reasons without the state in front (the log line adds it).
  EXPECT_TRUE(absl::StartsWith(get(low).reason, "preempted by " + prod))
      << get(low).reason;
  EXPECT_TRUE(absl::StartsWith(get(prod).reason, "preempting 1 group(s)"))
      << get(prod).reason;
  EXPECT_EQ(get(batch1).state, PgState::kCreated);
  EXPECT_EQ(get(batch2).state, PgState::kCreated);
  // The victim keeps its capacity: nothing else takes it meanwhile, and a
  // second preemptor picks a different victim.
  EXPECT_EQ(get(Create(V6eSlices(1, OfClass("", -5)))).state,
            PgState::kPending);
  const std::string prod2 = Create(V6eSlices(1, OfClass("production")));
  ASSERT_EQ(get(prod2).preempting.size(), 1u);
  EXPECT_NE(get(prod2).preempting[0], low);
  core_->placement().Unwatch(&recorder);
  const std::vector<std::string> seen = recorder.seen();
  EXPECT_EQ(std::count(seen.begin(), seen.end(), low + ":PREEMPTING"), 1);

  core_->Advance(absl::Seconds(29));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(low).state, PgState::kPreempting);
  // kill -9 in the grace period: all of it is in the store.
  Restart(options);
  EXPECT_EQ(get(low).state, PgState::kPreempting);
  EXPECT_EQ(get(low).preemption_deadline, deadline);
  EXPECT_EQ(get(prod).preempting, std::vector<std::string>{low});

  core_->Advance(absl::Seconds(2));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(prod).state, PgState::kCreated);
  EXPECT_EQ(get(prod).slice_names, low_slice);
  EXPECT_TRUE(get(prod).preempting.empty());
  EXPECT_EQ(get(prod2).state, PgState::kCreated);
  // The victim is requeued, on no node, and remembers who preempted it.
  EXPECT_EQ(get(low).state, PgState::kPending);
  EXPECT_EQ(get(low).preempted_by, prod);
  for (const PlacedBundle& b : get(low).bundles) EXPECT_EQ(b.node_id, "");
  // No counter-preemption: it is best-effort, the others are higher.
  EXPECT_TRUE(get(low).preempting.empty());
}

TEST_F(PlacementManagerTest, ExplainSaysARescheduledGroupDoesNotPreempt) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(
      core_->Register({CpuNode("c1", 4), CpuNode("c2", 4), CpuNode("c3", 4)})
          .ok());
  const std::string prod = Create(
      Cpus(2, 4, OfClass("production"), scheduler::Strategy::kStrictSpread));
  const std::string low = Create(Cpus(1, 4));  // best-effort, on the third
  ASSERT_EQ(core_->StateOf(low), PgState::kCreated);
  const std::string lost = SortedNodes(core_->placement().Get(prod)->group)[0];
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{lost, scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  ASSERT_EQ(core_->StateOf(prod), PgState::kRescheduling);
  auto why = core_->placement().Explain(prod);
  ASSERT_TRUE(why.ok()) << why.status();
  ASSERT_FALSE(why->details.empty());
  EXPECT_EQ(why->details.back(),
            "preemption: only PENDING groups preempt (this one is "
            "RESCHEDULING), so it waits for capacity to free");
  EXPECT_EQ(core_->StateOf(low), PgState::kCreated);
}

TEST_F(PlacementManagerTest, TheFreeCapacityAPreemptorCountsOnIsHeldForIt) {
  // P needs both slices: one is free, A holds the other. During A's grace
  // a best-effort B must not take the free one, or P would not fit when A
  // leaves (and would preempt B, and A would come back: a loop).
  const CoreOptions options = Preempting(absl::ZeroDuration());
  Start(options);
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  const std::string a = Create(V6eSlices(1));  // best-effort, on s1
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  const std::string p = Create(V6eSlices(2, OfClass("production")));
  ASSERT_EQ(get(p).preempting, std::vector<std::string>{a});
  const std::string b = Create(V6eSlices(1));
  EXPECT_EQ(get(b).state, PgState::kPending);
  EXPECT_NE(get(b).reason.find("it would take capacity that " + p),
            std::string::npos)
      << get(b).reason;
  // A group that does not touch P's capacity is not held back.
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4)}).ok());
  EXPECT_EQ(get(Create(Cpus(1, 4))).state, PgState::kCreated);
  Restart(options);  // the hold is derived, not stored
  EXPECT_EQ(get(Create(V6eSlices(1))).state, PgState::kPending);
  core_->Advance(absl::Seconds(31));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(p).state, PgState::kCreated);
  EXPECT_EQ(get(p).slice_names.size(), 2u);
  EXPECT_EQ(get(a).state, PgState::kPending);
  EXPECT_EQ(get(b).state, PgState::kPending);
  // Nothing more is preempted: the others are best-effort, P is placed.
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(p).state, PgState::kCreated);
  EXPECT_TRUE(get(b).preempting.empty());
}

TEST_F(PlacementManagerTest, VictimsOfANoGracePreemptionInAWalkAreRetried) {
  // No grace: a preemption started by a queue walk releases its victim in
  // that walk, after the walk took its list. The victim must still be
  // re-tried, here onto the node that is free.
  CoreOptions options = Preempting(absl::Minutes(1));
  options.placement.preemption_grace = absl::ZeroDuration();
  Start(options);
  ASSERT_TRUE(
      core_->Register({CpuNode("n1", 8, "z1"), CpuNode("n2", 8, "z2")}).ok());
  const std::string v = Create(Cpus(1, 8));  // best-effort
  const std::string w = Create(Cpus(1, 8));
  const std::string v_node =
      core_->placement().Get(v)->group.bundles[0].node_id;
  const std::string zone = v_node == "n1" ? "z1" : "z2";
  PgSpec prod = Cpus(1, 8, OfClass("production"));
  prod.group.request.bundles[0].selector =
      *scheduler::ParseLabelSelector({{"ray.io/availability-zone", zone}});
  const std::string p = Create(prod);  // v is in its cool-down: p waits
  ASSERT_EQ(core_->StateOf(p), PgState::kPending);
  ASSERT_TRUE(core_->Remove(w).ok());  // the other node is free
  ASSERT_EQ(core_->StateOf(p), PgState::kPending);
  core_->Advance(absl::Minutes(2));  // the cool-down ends
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(core_->StateOf(p), PgState::kCreated);
  auto victim = core_->placement().Get(v);
  ASSERT_TRUE(victim.ok());
  EXPECT_EQ(victim->group.state, PgState::kCreated) << victim->group.reason;
  EXPECT_NE(victim->group.bundles[0].node_id, v_node);
}

TEST_F(PlacementManagerTest, ExplainSaysAGroupWaitsBehindAStarvingOne) {
  CoreOptions options = Preempting(absl::ZeroDuration());
  options.placement.starvation_bound = absl::Minutes(5);
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  const std::string holder = Create(Cpus(1, 6));  // best-effort
  PgSpec big_spec = Cpus(1, 8, OfClass("production"));
  big_spec.group.preemption_policy = PreemptionPolicy::kNever;
  const std::string big = Create(big_spec);
  core_->Advance(absl::Minutes(6));  // `big` now starves
  // Behind it a group that fits beside the holder, and one that fits only
  // by preempting it: neither is tried, so neither is placed or preempts.
  const std::string fits = Create(Cpus(1, 2, OfClass("production")));
  const std::string would_preempt = Create(Cpus(1, 4, OfClass("production")));
  for (const std::string& id : {fits, would_preempt}) {
    ASSERT_EQ(core_->StateOf(id), PgState::kPending);
    auto why = core_->placement().Explain(id);
    ASSERT_TRUE(why.ok()) << why.status();
    EXPECT_EQ(why->outcome, "UNSCHEDULABLE") << id;
    EXPECT_NE(why->summary.find("waiting behind " + big), std::string::npos)
        << why->summary;
    EXPECT_TRUE(why->bundle_nodes.empty());
    for (const std::string& line : why->details) {
      EXPECT_EQ(line.rfind("preemption", 0), std::string::npos) << line;
    }
  }
  EXPECT_NE(core_->placement().Explain(fits)->summary.find("would fit now"),
            std::string::npos);
  // A dry run is behind it too; the starving group itself is not.
  auto dry = core_->placement().ExplainDryRun(Cpus(1, 2));
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->outcome, "UNSCHEDULABLE");
  EXPECT_TRUE(dry->bundle_nodes.empty());
  EXPECT_EQ(core_->placement().Explain(big)->summary.find("waiting behind"),
            std::string::npos);
  // A higher priority is not behind it.
  auto urgent =
      core_->placement().ExplainDryRun(Cpus(1, 2, WithPriority(2000)));
  ASSERT_TRUE(urgent.ok()) << urgent.status();
  EXPECT_EQ(urgent->outcome, "PLACED");
  EXPECT_EQ(core_->StateOf(holder), PgState::kCreated);
}

TEST_F(PlacementManagerTest, GroupsWithNoPlanDoNotSpendAWalksVictimSearches) {
  // Production groups ahead in the queue (two asks, and more groups than a
  // pass searches without a plan) can't be helped by any preemption (a
  // production group holds s1). Their searches find no plan; the
  // production group behind them, which has one, must still preempt.
  Start(Preempting(absl::Minutes(1)));
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4, "z9")}).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  auto on_c1 = [](PgSpec spec) {
    spec.group.request.bundles[0].selector =
        *scheduler::ParseLabelSelector({{"ray.io/availability-zone", "z9"}});
    return spec;
  };
  const std::string kept = Create(V6eSlices(1, OfClass("production")));
  const std::string b = Create(V6eSlices(1));         // best-effort, on s2
  const std::string low = Create(on_c1(Cpus(1, 4)));  // best-effort
  ASSERT_EQ(get(low).state, PgState::kCreated);
  // Two asks, ten groups each.
  PgSpec other = V6eSlices(2, OfClass("production"));
  other.group.request.slice->selector =
      *scheduler::ParseLabelSelector({{"ray.io/availability-zone", "!z8"}});
  std::vector<std::string> hopeless;
  for (int i = 0; i < 20; ++i) {
    hopeless.push_back(
        Create(i % 2 == 0 ? V6eSlices(2, OfClass("production")) : other));
  }
  const std::string p = Create(on_c1(Cpus(1, 4, OfClass("production"))));
  ASSERT_EQ(core_->StateOf(p), PgState::kPending);  // all in their cool-down
  core_->Advance(absl::Minutes(2));  // the cool-down ends: the queue walks
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(p).preempting, std::vector<std::string>{low}) << get(p).reason;
  EXPECT_EQ(get(low).state, PgState::kPreempting);
  for (const std::string& id : hopeless) {
    EXPECT_TRUE(get(id).preempting.empty());
    EXPECT_EQ(get(id).state, PgState::kPending);
  }
  EXPECT_EQ(get(b).state, PgState::kCreated);
  EXPECT_EQ(get(kept).state, PgState::kCreated);
  core_->Advance(absl::Seconds(31));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(p).state, PgState::kCreated);
}

TEST_F(PlacementManagerTest, AVictimPlacedAgainAtOnceIsSeenRequeuedFirst) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4", "z1")).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  const std::string low = Create(V6eSlices(1));  // best-effort, on s1
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4", "z2")).ok());
  PgSpec prod_spec = V6eSlices(1, OfClass("production"));
  prod_spec.group.request.slice->selector =
      *scheduler::ParseLabelSelector({{"ray.io/availability-zone", "z1"}});
  const std::string prod = Create(prod_spec);
  ASSERT_EQ(get(low).state, PgState::kPreempting);
  Recorder recorder;
  core_->placement().Watch(&recorder);
  core_->Advance(absl::Seconds(31));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  core_->placement().Unwatch(&recorder);
  // The victim was requeued, then placed on s2 in the same commit: its
  // watchers see it PENDING (requeued) first, not a cancelled preemption.
  EXPECT_EQ(get(prod).state, PgState::kCreated);
  EXPECT_EQ(get(low).state, PgState::kCreated);
  EXPECT_EQ(get(low).slice_names, std::vector<std::string>{"s2"});
  const std::vector<std::string> seen = recorder.seen();
  auto at = [&](const std::string& event) {
    return std::find(seen.begin(), seen.end(), event) - seen.begin();
  };
  EXPECT_LT(at(low + ":PENDING"), at(low + ":CREATED"))
      << absl::StrJoin(seen, " ");
}

TEST_F(PlacementManagerTest,
       RemovingThePreemptorCancelsRemovingVictimsHurries) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  ASSERT_TRUE(core_->Register(Slice("s2", "TPU-V6E", "4x4")).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  const std::string a = Create(V6eSlices(1));
  const std::string b = Create(V6eSlices(1));
  const std::string prod = Create(V6eSlices(2, OfClass("production")));
  EXPECT_EQ(get(prod).preempting.size(), 2u);
  ASSERT_TRUE(core_->Remove(prod).ok());
  for (const std::string& id : {a, b}) {
    EXPECT_EQ(get(id).state, PgState::kCreated);
    EXPECT_EQ(get(id).preempted_by, "");
    EXPECT_EQ(get(id).reason, "");
  }

  const std::string again = Create(V6eSlices(2, OfClass("production")));
  EXPECT_EQ(get(a).state, PgState::kPreempting);
  // A victim its owner removes keeps the capacity for the preemptor until
  // the other victim goes too; then the preemptor starts at once.
  ASSERT_TRUE(core_->Remove(a).ok());
  EXPECT_EQ(get(a).state, PgState::kPreempting);
  EXPECT_TRUE(get(a).removed);
  EXPECT_EQ(get(again).state, PgState::kPending);
  EXPECT_EQ(core_->Create(V6eSlices(1)).value().group.state, PgState::kPending);
  ASSERT_TRUE(core_->Remove(b).ok());
  EXPECT_EQ(get(again).state, PgState::kCreated);
  EXPECT_EQ(core_->StateOf(a), PgState::kRemoved);
  EXPECT_EQ(core_->StateOf(b), PgState::kRemoved);
}

TEST_F(PlacementManagerTest, OffNeverAndTheCoolDownKeepGroupsWaiting) {
  CoreOptions off = Preempting(absl::Minutes(1));
  off.placement.preemption = false;
  Start(off);
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  const std::string low = Create(V6eSlices(1));
  core_->Advance(absl::Minutes(2));
  const std::string waits = Create(V6eSlices(1, OfClass("production")));
  EXPECT_EQ(get(waits).state, PgState::kPending);
  EXPECT_TRUE(get(waits).preempting.empty());
  EXPECT_NE(absl::StrJoin(core_->placement().Explain(waits)->details, "\n")
                .find("preemption is off (--preemption=false), so it waits; "
                      "preempting 1 group(s)"),
            std::string::npos);
  ASSERT_TRUE(core_->Remove(waits).ok());
  ASSERT_TRUE(core_->Remove(low).ok());

  Restart(Preempting(absl::Minutes(1)));
  const std::string fresh = Create(V6eSlices(1));
  PgSpec never_spec = V6eSlices(1, OfClass("production"));
  never_spec.group.preemption_policy = PreemptionPolicy::kNever;
  const std::string never = Create(never_spec);
  const std::string prod = Create(V6eSlices(1, OfClass("production")));
  EXPECT_TRUE(get(never).preempting.empty());
  EXPECT_TRUE(get(prod).preempting.empty());  // fresh is cooling down
  EXPECT_NE(absl::StrJoin(core_->placement().Explain(prod)->details, "\n")
                .find("1 running group(s) of lower priority were placed less "
                      "than 1m ago"),
            std::string::npos);
  // When the cool-down ends the queue is re-tried: `prod` preempts, the
  // group that says NEVER still waits (it is first in the queue).
  core_->Advance(absl::Seconds(61));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_TRUE(get(never).preempting.empty());
  EXPECT_EQ(get(prod).preempting, std::vector<std::string>{fresh});
  // Turned off meanwhile: a preemption under way still completes.
  CoreOptions later = Preempting(absl::Minutes(1));
  later.placement.preemption = false;
  Restart(later);
  core_->Advance(absl::Seconds(30));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(get(prod).state, PgState::kCreated);
  EXPECT_EQ(get(fresh).state, PgState::kPending);
}

TEST_F(PlacementManagerTest, AVictimThatLosesANodeStillLeavesOnTime) {
  const CoreOptions options = Preempting(absl::ZeroDuration());
  Start(options);
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4), CpuNode("c2", 4)}).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  PgSpec removable = Cpus(2, 4, {}, scheduler::Strategy::kSpread);
  removable.group.on_preemption = OnPreemption::kRemove;
  const std::string low = Create(removable);
  const std::string prod = Create(Cpus(1, 4, OfClass("production")));
  ASSERT_EQ(get(low).state, PgState::kPreempting);
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  // It is leaving: not placed again (it would keep c1 from its preemptor);
  // what was on c2 is gone, the rest stays held until it leaves.
  EXPECT_EQ(get(low).state, PgState::kPreempting);
  EXPECT_EQ(get(low).preempted_by, prod);
  ASSERT_EQ(get(low).bundles.size(), 2u);
  EXPECT_EQ(SortedNodes(get(low)), (std::vector<std::string>{"", "c1"}));
  EXPECT_NE(get(low).reason.find("lost node(s) c2"), std::string::npos)
      << get(low).reason;
  auto why = core_->placement().Explain(low);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_NE(why->summary.find("on 1 node(s)"), std::string::npos)
      << why->summary;
  // As stored: a restart reads the same.
  Restart(options);
  EXPECT_EQ(get(low).state, PgState::kPreempting);
  EXPECT_EQ(get(prod).state, PgState::kPending);

  core_->Advance(absl::Seconds(31));
  ASSERT_TRUE(core_->CompletePreemptions().ok());
  EXPECT_EQ(core_->StateOf(low), PgState::kRemoved);
  EXPECT_EQ(get(prod).state, PgState::kCreated);
  EXPECT_EQ(get(prod).bundles[0].node_id, "c1");
}

TEST_F(PlacementManagerTest, AVictimThatLostANodeIsReplacedWhenSpared) {
  Start(Preempting(absl::ZeroDuration()));
  ASSERT_TRUE(core_->Register({CpuNode("c1", 4), CpuNode("c2", 4)}).ok());
  auto get = [&](const std::string& id) {
    return core_->placement().Get(id)->group;
  };
  const std::string low = Create(Cpus(2, 4, {}, scheduler::Strategy::kSpread));
  const std::string prod = Create(Cpus(1, 4, OfClass("production")));
  ASSERT_EQ(get(low).state, PgState::kPreempting);
  ASSERT_TRUE(core_
                  ->Heartbeat({NodeBeat{"c2", scheduler::NodeState::kDead,
                                        std::nullopt}})
                  .ok());
  // Its preemptor goes: it is no victim any more, and is re-placed as any
  // group that lost a node is, keeping what survived.
  ASSERT_TRUE(core_->Remove(prod).ok());
  EXPECT_EQ(get(low).state, PgState::kRescheduling);
  EXPECT_EQ(get(low).preempted_by, "");
  // (Re-tried in that commit: the reason is why its lost bundle waits.)
  EXPECT_NE(get(low).reason.find("1 DEAD"), std::string::npos)
      << get(low).reason;
  ASSERT_TRUE(core_->Register({CpuNode("c3", 4)}).ok());
  EXPECT_EQ(get(low).state, PgState::kCreated);
  EXPECT_EQ(SortedNodes(get(low)), (std::vector<std::string>{"c1", "c3"}));
}

TEST_F(PlacementManagerTest,
       NoGraceLeavesAtOnceAndAFailedCommitChangesNothing) {
  CoreOptions options = Preempting(absl::ZeroDuration());
  options.placement.preemption_grace = absl::ZeroDuration();
  Start(options);
  ASSERT_TRUE(core_->Register(Slice("s1", "TPU-V6E", "4x4")).ok());
  PgSpec removable = V6eSlices(1);
  removable.group.on_preemption = OnPreemption::kRemove;
  const std::string low = Create(removable);

  core_->faults().FailWrites(1);
  auto failed = core_->Create(V6eSlices(1, OfClass("production")));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(core_->StateOf(low), PgState::kCreated);
  EXPECT_EQ(core_->placement().List({}).size(), 1u);

  Recorder recorder;
  core_->placement().Watch(&recorder);
  const std::string prod = Create(V6eSlices(1, OfClass("production")));
  core_->placement().Unwatch(&recorder);
  EXPECT_EQ(core_->StateOf(prod), PgState::kCreated);
  EXPECT_EQ(core_->StateOf(low), PgState::kRemoved);
  // Told, even though it left in the same commit.
  EXPECT_EQ(recorder.seen(),
            (std::vector<std::string>{low + ":CREATED", low + ":PREEMPTING",
                                      low + ":REMOVED", prod + ":CREATED"}));
}

}  // namespace
}  // namespace sliced::server
