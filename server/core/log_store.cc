#include "server/core/log_store.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sliced::server {

std::string LogStore::Key(const std::string& node_id, uint64_t seq) {
  return absl::StrCat(node_id, std::string(1, '\0'),
                      absl::StrFormat("%016x", seq));
}

void LogStore::Restore(
    const std::vector<std::pair<std::string, LogLine>>& stored,
    const std::function<bool(const std::string&)>& known,
    storage::Mutation& repair) {
  // Built aside, then swapped in under the lock.
  absl::btree_map<std::string, Ring> rings;
  // Stored keys are sorted: by node, then sequence. One node's at a time.
  std::string node_id;
  std::vector<std::pair<uint64_t, const LogLine*>> lines;
  auto take_node = [&] {
    if (lines.empty()) return;
    if (!known(node_id)) {  // a removed node's lines: gone with it
      for (const auto& [seq, line] : lines) repair.DeleteLog(Key(node_id, seq));
      lines.clear();
      return;
    }
    const size_t drop =
        lines.size() -
        std::min(lines.size(), static_cast<size_t>(lines_per_node_));
    for (size_t i = 0; i < drop; ++i) {
      repair.DeleteLog(Key(node_id, lines[i].first));
    }
    Ring& ring = rings[node_id];
    ring.oldest_seq = lines[drop].first;
    ring.next_seq = ring.oldest_seq;
    // The ring's keys run on from its oldest without a gap (trimming counts
    // on it): a kept line off that run is moved onto it.
    for (size_t i = drop; i < lines.size(); ++i) {
      const auto& [seq, stored_line] = lines[i];
      LogLine line = *stored_line;
      line.node_id = node_id;
      if (seq != ring.next_seq) {
        repair.DeleteLog(Key(node_id, seq));
        repair.PutLog(Key(node_id, ring.next_seq), line);
      }
      ++ring.next_seq;
      ring.lines.push_back(std::move(line));
    }
    lines.clear();
  };
  for (const auto& [key, stored_line] : stored) {
    const size_t zero = key.find('\0');
    uint64_t seq = 0;
    if (zero == std::string::npos ||
        !absl::SimpleHexAtoi(absl::string_view(key).substr(zero + 1), &seq)) {
      repair.DeleteLog(key);  // not ours: drop it
      continue;
    }
    if (absl::string_view(key).substr(0, zero) != node_id) {
      take_node();
      node_id = key.substr(0, zero);
    }
    lines.emplace_back(seq, &stored_line);
  }
  take_node();
  absl::MutexLock lock(&mu_);
  rings_ = std::move(rings);
  // As watch streams end (WatchHub::Restored): what a follower was given
  // may not match the rings now (a commit that failed but landed).
  const absl::Status behind = absl::AbortedError(
      "this stream fell behind: the daemon re-read its store after a failed "
      "commit, and lines since may be missing from it or doubled; open it "
      "again");
  for (Follower* f : followers_) f->End(behind);
}

std::vector<LogLine> LogStore::Stage(Txn& txn, const std::string& node_id,
                                     std::vector<LogLine> lines) {
  absl::MutexLock lock(&mu_);
  Ring& ring = rings_[node_id];
  for (LogLine& line : lines) {
    line.node_id = node_id;
    if (line.time == absl::InfinitePast()) line.time = txn.now();
    txn.PutLog(Key(node_id, ring.next_seq++), line);
  }
  while (ring.next_seq - ring.oldest_seq >
         static_cast<uint64_t>(lines_per_node_)) {
    txn.DeleteLog(Key(node_id, ring.oldest_seq++));
  }
  return lines;
}

void LogStore::Install(const std::string& node_id, std::vector<LogLine> lines) {
  absl::MutexLock lock(&mu_);
  Ring& ring = rings_[node_id];
  for (LogLine& line : lines) {
    for (Follower* f : followers_) {
      if (f->Wants(line)) DeliverOrHold(*f, line);
    }
    ring.lines.push_back(std::move(line));
  }
  while (static_cast<int>(ring.lines.size()) > lines_per_node_) {
    ring.lines.pop_front();
  }
}

void LogStore::StageForget(Txn& txn, const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = rings_.find(node_id);
  if (it == rings_.end()) return;
  Ring& ring = it->second;
  for (uint64_t seq = ring.oldest_seq; seq < ring.next_seq; ++seq) {
    txn.DeleteLog(Key(node_id, seq));
  }
  // Empty from here on, its keys going on past the deleted ones: a node
  // registered again and logging in the same commit group starts a ring
  // the deletes above do not touch. (A failed commit re-reads the store.)
  ring.lines.clear();
  ring.oldest_seq = ring.next_seq;
}

void LogStore::Forget(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  rings_.erase(node_id);
}

void LogStore::DeliverOrHold(Follower& follower, const LogLine& line) {
  auto it = held_.empty() ? held_.end() : held_.find(&follower);
  if (it == held_.end()) {
    follower.Deliver(line);
  } else if (!it->second.Hold(line, line.text.size(), max_held_bytes_)) {
    follower.End(absl::AbortedError(absl::StrCat(
        "this stream fell behind: more than ",
        max_held_bytes_ + it->second.allowed(),
        " bytes of lines came while its stored lines were sent "
        "(--max_watch_buffer_bytes, ",
        max_held_bytes_,
        ", plus what had been sent of those lines); open it again")));
  }
}

void LogStore::Read(const std::vector<std::string>& node_ids,
                    const Filter& filter,
                    const std::function<void(const LogLine&)>& emit,
                    Follower* follower, size_t last) {
  // By time, then in the order gathered (nodes as given, each ring oldest
  // first): a total order, so the newest `last` are the tail of the full
  // read.
  auto before = [](const auto& a, const auto& b) {
    return std::tie(a.first.time, a.second) < std::tie(b.first.time, b.second);
  };
  std::vector<std::pair<LogLine, size_t>> out;  // copies, to emit
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<const LogLine*, size_t>> matched;
    for (const std::string& id : node_ids) {
      auto it = rings_.find(id);
      if (it == rings_.end()) continue;
      for (const LogLine& line : it->second.lines) {
        if (filter(line)) matched.emplace_back(&line, matched.size());
      }
    }
    auto first = matched.begin();
    if (last < matched.size()) {
      first = matched.end() - static_cast<std::ptrdiff_t>(last);
      std::nth_element(matched.begin(), first, matched.end(),
                       [](const auto& a, const auto& b) {
                         return std::tie(a.first->time, a.second) <
                                std::tie(b.first->time, b.second);
                       });
    }
    out.reserve(static_cast<size_t>(matched.end() - first));
    for (auto it = first; it != matched.end(); ++it) {
      out.emplace_back(*it->first, it->second);
    }
    if (follower != nullptr) {
      followers_.insert(follower);
      held_[follower];
    }
  }
  std::sort(out.begin(), out.end(), before);
  // What is emitted raises the bound on the lines held meanwhile.
  SentInSteps sent(max_held_bytes_);
  for (auto& [line, order] : out) {
    emit(line);
    const size_t allow = sent.Sent(line.text.size());
    line = LogLine();  // what was emitted is held by the stream now
    if (allow > 0 && follower != nullptr) {
      absl::MutexLock lock(&mu_);
      if (auto it = held_.find(follower); it != held_.end()) {
        it->second.Allow(allow);
      }
    }
  }
  if (follower == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(follower);
  if (it == held_.end()) return;  // unfollowed meanwhile
  for (const LogLine& line : it->second.items()) follower->Deliver(line);
  held_.erase(it);
}

void LogStore::Unfollow(Follower* follower) {
  absl::MutexLock lock(&mu_);
  followers_.erase(follower);
  held_.erase(follower);
}

}  // namespace sliced::server
