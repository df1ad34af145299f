// The log rings as a restart reads them back: lines past the bound are
// deleted, a removed node's lines go with it, keys that are not ours are
// dropped, and kept lines whose keys left a gap are moved onto one run (the
// ring's trimming deletes keys by sequence from its oldest).
#include "server/core/log_store.h"

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace sliced::server {
namespace {

std::string Key(const std::string& node_id, uint64_t seq) {
  return node_id + std::string(1, '\0') + absl::StrFormat("%016x", seq);
}

std::pair<std::string, LogLine> Stored(const std::string& key,
                                       const std::string& text) {
  std::pair<std::string, LogLine> out{key, LogLine()};
  out.second.text = text;
  return out;
}

std::pair<std::string, LogLine> Stored(const std::string& node_id,
                                       uint64_t seq) {
  return Stored(Key(node_id, seq), absl::StrFormat("%s-%d", node_id, seq));
}

std::vector<std::string> Texts(LogStore& logs, const std::string& node_id) {
  std::vector<std::string> texts;
  logs.Read(
      {node_id}, [](const LogLine&) { return true; },
      [&](const LogLine& line) { texts.push_back(line.text); }, nullptr);
  return texts;
}

TEST(LogStoreTest, RestoreKeepsTheNewestOnOneRunOfKeysOfKnownNodes) {
  LogStore logs(3);
  const std::vector<std::pair<std::string, LogLine>> stored = {
      Stored("a", 1),
      Stored("a", 2),
      Stored("a", 5),
      Stored("a", 6),
      Stored("a", 9),  // five lines, two gaps: keep 5, 6, 9 on 5, 6, 7
      Stored("a-no-sequence", "x"),
      Stored("gone", 0),
      Stored("gone", 1),  // a node no longer registered
  };
  storage::Mutation repair;
  logs.Restore(
      stored, [](const std::string& id) { return id == "a"; }, repair);
  EXPECT_EQ(Texts(logs, "a"), (std::vector<std::string>{"a-5", "a-6", "a-9"}));
  EXPECT_EQ(Texts(logs, "gone"), std::vector<std::string>{});

  std::set<std::string> deleted, put;
  for (const storage::Mutation::Write& w : repair.writes()) {
    (w.is_delete ? deleted : put).insert(w.key);
  }
  EXPECT_EQ(deleted, (std::set<std::string>{Key("a", 1), Key("a", 2),
                                            Key("a", 9), "a-no-sequence",
                                            Key("gone", 0), Key("gone", 1)}));
  EXPECT_EQ(put, std::set<std::string>{Key("a", 7)});
}

TEST(LogStoreTest, TheNewestLinesAreTheTailOfTheFullRead) {
  // Three nodes' rings with times out of order and ties across nodes.
  LogStore logs(50);
  std::vector<std::pair<std::string, LogLine>> stored;
  for (std::string node : {"a", "b", "c"}) {
    for (uint64_t seq = 0; seq < 40; ++seq) {
      auto line = Stored(node, seq);
      line.second.time =
          absl::FromUnixSeconds(static_cast<int64_t>((seq * 7 + node[0]) % 23));
      stored.push_back(std::move(line));
    }
  }
  storage::Mutation repair;
  logs.Restore(
      stored, [](const std::string&) { return true; }, repair);
  auto read = [&](size_t last) {
    std::vector<std::string> texts;
    logs.Read(
        {"c", "a", "b"}, [](const LogLine& l) { return l.text != "a-3"; },
        [&](const LogLine& line) { texts.push_back(line.text); }, nullptr,
        last);
    return texts;
  };
  const std::vector<std::string> all = read(1000);
  ASSERT_EQ(all.size(), 119u);
  for (size_t last : {0, 1, 5, 30, 118, 119, 500}) {
    const size_t n = std::min(last, all.size());
    EXPECT_EQ(read(last), std::vector<std::string>(
                              all.end() - static_cast<long>(n), all.end()))
        << last;
  }
}

// A re-read of the store (after a failed commit that may have landed)
// ends every follower: what it was given may not match the rings now.
TEST(LogStoreTest, ARestoreEndsEveryFollower) {
  struct Recorder : LogStore::Follower {
    void Deliver(const LogLine& line) override { texts.push_back(line.text); }
    void End(const absl::Status& why) override { ended = why; }
    std::vector<std::string> texts;
    absl::Status ended;
  };
  LogStore logs(10);
  storage::Mutation repair;
  logs.Restore(
      {Stored("a", 0)}, [](const std::string&) { return true; }, repair);
  Recorder follower;
  logs.Read(
      {"a"}, [](const LogLine&) { return true; },
      [&](const LogLine& line) { follower.texts.push_back(line.text); },
      &follower);
  EXPECT_EQ(follower.texts, std::vector<std::string>{"a-0"});
  EXPECT_TRUE(follower.ended.ok());
  logs.Restore(
      {Stored("a", 0), Stored("a", 1)}, [](const std::string&) { return true; },
      repair);
  EXPECT_EQ(follower.ended.code(), absl::StatusCode::kAborted)
      << follower.ended;
  EXPECT_NE(follower.ended.message().find("re-read its store"),
            std::string::npos);
  logs.Unfollow(&follower);
}

// Records what it gets; wants the lines of node "a" only.
struct Recorder : LogStore::Follower {
  bool Wants(const LogLine& line) const override { return line.node_id == "a"; }
  void Deliver(const LogLine& line) override { Add(line.text); }
  void End(const absl::Status& why) override {
    Add("end " + absl::StatusCodeToString(why.code()));
  }
  void Add(std::string text) {
    absl::MutexLock lock(&mu);
    texts.push_back(std::move(text));
  }
  absl::Mutex mu;
  std::vector<std::string> texts ABSL_GUARDED_BY(mu);
};

std::vector<LogLine> Lines(const std::string& node_id, int n) {
  std::vector<LogLine> lines(n);
  for (int i = 0; i < n; ++i) {
    lines[i].node_id = node_id;
    lines[i].text = absl::StrFormat("%s-new-%d", node_id, i);
  }
  return lines;
}

// Lines are installed while a follower's stored lines are emitted (the
// writer waits for no reader); those it wants follow the stored ones.
// `new_lines` of "a" (and one of "b") come while it emits "a-0"; past the
// hold bound (100 bytes here, plus what it was sent before "a-0") it ends
// ABORTED instead. With `sent_before` > 0 a stored line of that many bytes
// ("long") is emitted before "a-0".
std::vector<std::string> FollowWhileInstalling(int new_lines,
                                               size_t sent_before = 0) {
  LogStore logs(10, /*max_held_bytes=*/100);
  storage::Mutation repair;
  std::vector<std::pair<std::string, LogLine>> stored;
  if (sent_before > 0) {
    stored.push_back(Stored(Key("a", 0), std::string(sent_before, 'x')));
  }
  stored.push_back(Stored(Key("a", stored.size()), "a-0"));
  logs.Restore(
      stored, [](const std::string&) { return true; }, repair);
  Recorder follower;
  absl::Notification emitting, installed;
  std::thread reader([&] {
    logs.Read(
        {"a"}, [](const LogLine&) { return true; },
        [&](const LogLine& line) {
          if (line.text != "a-0") {
            follower.Add("long");
            return;
          }
          emitting.Notify();
          const bool in_time =
              installed.WaitForNotificationWithTimeout(absl::Seconds(30));
          follower.Deliver(line);
          if (!in_time) follower.Add("timed out");
        },
        &follower);
  });
  emitting.WaitForNotification();
  logs.Install("b", Lines("b", 1));
  logs.Install("a", Lines("a", new_lines));
  installed.Notify();
  reader.join();
  logs.Unfollow(&follower);
  absl::MutexLock lock(&follower.mu);
  return follower.texts;
}

TEST(LogStoreTest, LinesInstalledWhileAFollowerReadsFollowTheStoredOnes) {
  EXPECT_EQ(FollowWhileInstalling(2),
            (std::vector<std::string>{"a-0", "a-new-0", "a-new-1"}));
}

TEST(LogStoreTest, AFollowerHeldPastTheBoundEnds) {
  EXPECT_EQ(FollowWhileInstalling(20),  // 7-8 bytes each
            (std::vector<std::string>{"end ABORTED", "a-0"}));
}

// What was sent of the stored lines raises the bound: 20 new lines (150
// bytes) pass 100 bytes, not 100 plus the 200 bytes sent before them; 60
// (470 bytes) pass that too.
TEST(LogStoreTest, TheBoundGrowsWithTheStoredLinesSent) {
  std::vector<std::string> kept = {"long", "a-0"};
  for (int i = 0; i < 20; ++i) kept.push_back(absl::StrFormat("a-new-%d", i));
  EXPECT_EQ(FollowWhileInstalling(20, /*sent_before=*/200), kept);
  EXPECT_EQ(FollowWhileInstalling(60, /*sent_before=*/200),
            (std::vector<std::string>{"long", "end ABORTED", "a-0"}));
}

}  // namespace
}  // namespace sliced::server
