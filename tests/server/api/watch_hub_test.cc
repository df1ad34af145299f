// The watch hub on the daemon's core (no gRPC): a new stream's current state
// is sent while commits go on, and what they change follows it.
#include "server/api/watch_hub.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "sliced/v1/sliced.pb.h"
#include "tests/scheduler/builders.h"
#include "tests/server/core/harness.h"

namespace sliced::server::api {
namespace {

using scheduler::testing::CpuNode;
using scheduler::testing::Units;
using testing::Core;

// One group of one bundle of `cpu` CPUs.
PgSpec Cpus(double cpu, std::string job_id = "") {
  scheduler::PlacementRequest r;
  r.bundles.push_back(scheduler::Bundle{{{"CPU", Units(cpu)}}, {}, ""});
  PgOwner owner;
  owner.job_id = std::move(job_id);
  auto spec = NewPgSpec(std::move(r), owner, Limits());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// One group of `n` bundles of `cpu` CPUs each.
PgSpec Bundles(int n, double cpu) {
  scheduler::PlacementRequest r;
  for (int i = 0; i < n; ++i) {
    r.bundles.push_back(scheduler::Bundle{{{"CPU", Units(cpu)}}, {}, ""});
  }
  auto spec = NewPgSpec(std::move(r), PgOwner(), Limits());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Records what the hub hands it, as "send|queue id:STATE", "flush" and
// "end CODE". Its `waiting`-th Send() (the first unless told) waits until
// release() (at most 30 s; a timeout is recorded as "send timed out").
class RecordingStream : public WatchHub::Stream {
 public:
  explicit RecordingStream(int waiting = 1) : waiting_(waiting) {}
  void Send(const grpc::ByteBuffer& event) override {
    if (--waiting_ == 0) {
      first_send_.Notify();
      if (!release_.WaitForNotificationWithTimeout(absl::Seconds(30))) {
        Add("send timed out");
      }
    }
    Add("send " + Describe(event));
  }
  void Queue(const grpc::ByteBuffer& event) override {
    Add("queue " + Describe(event));
  }
  void Flush() override { Add("flush"); }
  void End(const absl::Status& status) override {
    Add("end " + absl::StatusCodeToString(status.code()));
  }

  // Until the waiting Send() waits.
  void WaitForTheSend() { first_send_.WaitForNotification(); }
  void release() { release_.Notify(); }
  std::vector<std::string> log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

 private:
  static std::string Describe(const grpc::ByteBuffer& event) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(event.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    v1::PlacementGroupEvent parsed;
    EXPECT_TRUE(parsed.ParseFromString(bytes));
    return parsed.placement_group().placement_group_id() + ":" +
           v1::PlacementGroupState_Name(parsed.placement_group().state());
  }
  void Add(std::string entry) {
    absl::MutexLock lock(&mu_);
    log_.push_back(std::move(entry));
  }

  int waiting_;  // Send() runs on Add()'s thread only
  absl::Notification first_send_, release_;
  absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

class WatchHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto core = Core::Start(memory_);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
    ASSERT_TRUE(core_->Register({CpuNode("c1", 8)}).ok());
  }
  std::string Create(double cpu, std::string job_id = "") {
    auto view = core_->Create(Cpus(cpu, std::move(job_id)));
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? view->group.id : "";
  }

  storage::MemoryStore memory_;
  std::unique_ptr<Core> core_;
};

// A commit is installed while a new stream's current state is being sent
// (the writer waits for no stream), and its change follows the current
// state, flushed.
TEST_F(WatchHubTest, CommitsGoOnWhileACurrentStateIsSent) {
  const std::string a = Create(1);
  WatchHub hub(&core_->placement(), 1 << 20);
  RecordingStream stream;
  std::thread add([&] { hub.Add(&stream, "", ""); });
  stream.WaitForTheSend();
  const std::string b = Create(1);  // waits for the send with the old hub
  stream.release();
  add.join();
  hub.Remove(&stream);
  EXPECT_EQ(stream.log(),
            (std::vector<std::string>{"send " + a + ":CREATED",
                                      "queue " + b + ":CREATED", "flush"}));
}

// The changes held while the current state is sent are bounded: past the
// bound the stream ends ABORTED and gets nothing more.
TEST_F(WatchHubTest, ChangesHeldPastTheBoundEndTheStream) {
  const std::string a = Create(1);
  WatchHub hub(&core_->placement(), 1);  // less than any event
  RecordingStream stream;
  std::thread add([&] { hub.Add(&stream, "", ""); });
  stream.WaitForTheSend();
  Create(1);
  Create(1);
  stream.release();
  add.join();
  hub.Remove(&stream);
  EXPECT_EQ(stream.log(), (std::vector<std::string>{"end ABORTED",
                                                    "send " + a + ":CREATED"}));
}

// What was sent of the current state raises the bound: a group of six
// bundles sent, the creates of one-bundle groups held behind the second
// group's send pass a bound of 1 byte, up to as many bytes as were sent.
TEST_F(WatchHubTest, TheBoundGrowsWithTheStateSent) {
  auto six = core_->Create(Bundles(6, 0.5));
  ASSERT_TRUE(six.ok()) << six.status();
  std::vector<std::string> state = {six->group.id, Create(0.5)};
  for (int changes : {1, 12}) {
    WatchHub hub(&core_->placement(), 1);
    RecordingStream stream(/*waiting=*/2);
    std::thread add([&] { hub.Add(&stream, "", ""); });
    stream.WaitForTheSend();
    std::vector<std::string> created;
    for (int i = 0; i < changes; ++i) created.push_back(Create(0.01));
    stream.release();
    add.join();
    hub.Remove(&stream);
    std::vector<std::string> expected;
    for (const std::string& id : state) {
      expected.push_back("send " + id + ":CREATED");
    }
    if (changes == 1) {
      expected.push_back("queue " + created[0] + ":CREATED");
      expected.push_back("flush");
    } else {  // ended while the second group's send waited
      expected.insert(expected.begin() + 1, "end ABORTED");
    }
    EXPECT_EQ(stream.log(), expected) << changes << " changes";
    state.insert(state.end(), created.begin(), created.end());
  }
}

// A stream removed while its current state is sent gets nothing after it.
TEST_F(WatchHubTest, AStreamRemovedWhileItsStateIsSentGetsNoChanges) {
  const std::string a = Create(1);
  WatchHub hub(&core_->placement(), 1 << 20);
  RecordingStream stream;
  std::thread add([&] { hub.Add(&stream, "", ""); });
  stream.WaitForTheSend();
  Create(1);
  hub.Remove(&stream);
  Create(1);
  stream.release();
  add.join();
  EXPECT_EQ(stream.log(), (std::vector<std::string>{"send " + a + ":CREATED"}));
}

// Streams get the changes of their filter only (a job's, or one group's),
// each commit's flushed after its answers.
TEST_F(WatchHubTest, StreamsGetTheChangesTheirFilterMatches) {
  WatchHub hub(&core_->placement(), 1 << 20);
  RecordingStream all, job, one;
  for (RecordingStream* s : {&all, &job, &one}) s->release();
  const std::string a = Create(1, "j1");
  hub.Add(&all, "", "");
  hub.Add(&job, "j1", "");
  hub.Add(&one, "", a);
  const std::string b = Create(1);  // no job
  const std::string c = Create(1, "j1");
  ASSERT_TRUE(core_->Remove(a).ok());
  // A commit after that one: the writer flushed the streams before it.
  ASSERT_TRUE(core_->Register({CpuNode("c2", 8)}).ok());
  for (RecordingStream* s : {&all, &job, &one}) hub.Remove(s);
  EXPECT_EQ(all.log(), (std::vector<std::string>{
                           "send " + a + ":CREATED", "queue " + b + ":CREATED",
                           "flush", "queue " + c + ":CREATED", "flush",
                           "queue " + a + ":REMOVED", "flush"}));
  EXPECT_EQ(job.log(), (std::vector<std::string>{
                           "send " + a + ":CREATED", "queue " + c + ":CREATED",
                           "flush", "queue " + a + ":REMOVED", "flush"}));
  EXPECT_EQ(one.log(),
            (std::vector<std::string>{"send " + a + ":CREATED",
                                      "queue " + a + ":REMOVED", "flush"}));
}

}  // namespace
}  // namespace sliced::server::api
