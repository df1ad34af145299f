#include "server/log_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sliced::server {
namespace {

v1::LogLine FromRecord(const storage::LogRecord& r) {
  v1::LogLine line;
  line.mutable_time()->set_seconds(r.time_ms() / 1000);
  line.mutable_time()->set_nanos(static_cast<int>(r.time_ms() % 1000) *
                                 1000000);
  line.set_severity(static_cast<v1::LogSeverity>(r.severity()));
  line.set_text(r.text());
  line.set_node_id(r.node_id());
  return line;
}

int64_t Millis(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000 + t.nanos() / 1000000;
}

}  // namespace

std::string LogStore::Key(const std::string& node_id, uint64_t seq) {
  return absl::StrCat(node_id, std::string(1, '\0'),
                      absl::StrFormat("%016x", seq));
}

void LogStore::Load(
    const std::vector<std::pair<std::string, storage::LogRecord>>& stored,
    storage::Mutation* trim) {
  absl::MutexLock lock(&mu_);
  // Stored keys are sorted: by node, then sequence.
  for (const auto& [key, record] : stored) {
    const size_t zero = key.find('\0');
    uint64_t seq = 0;
    if (zero == std::string::npos ||
        !absl::SimpleHexAtoi(absl::string_view(key).substr(zero + 1), &seq)) {
      trim->DeleteLog(key);  // not ours: drop it
      continue;
    }
    const std::string node_id = key.substr(0, zero);
    Ring& ring = rings_[node_id];
    if (ring.lines.empty()) ring.oldest_seq = seq;
    ring.next_seq = seq + 1;
    v1::LogLine line = FromRecord(record);
    line.set_node_id(node_id);
    ring.lines.push_back(std::move(line));
    while (static_cast<int>(ring.lines.size()) > lines_per_node_) {
      ring.lines.pop_front();
      trim->DeleteLog(Key(node_id, ring.oldest_seq++));
    }
  }
}

std::vector<v1::LogLine> LogStore::Stage(
    Txn& txn, const std::string& node_id,
    const google::protobuf::RepeatedPtrField<v1::LogLine>& lines) {
  absl::MutexLock lock(&mu_);
  Ring& ring = rings_[node_id];
  std::vector<v1::LogLine> out;
  for (const v1::LogLine& in : lines) {
    v1::LogLine line = in;
    line.set_node_id(node_id);
    if (!line.has_time()) {
      const int64_t ms = absl::ToUnixMillis(txn.now());
      line.mutable_time()->set_seconds(ms / 1000);
      line.mutable_time()->set_nanos(static_cast<int>(ms % 1000) * 1000000);
    }
    storage::LogRecord record;
    record.set_time_ms(Millis(line.time()));
    record.set_severity(line.severity());
    record.set_text(line.text());
    record.set_node_id(node_id);
    txn.PutLog(Key(node_id, ring.next_seq++), record);
    out.push_back(std::move(line));
  }
  while (ring.next_seq - ring.oldest_seq >
         static_cast<uint64_t>(lines_per_node_)) {
    txn.DeleteLog(Key(node_id, ring.oldest_seq++));
  }
  return out;
}

void LogStore::Install(const std::string& node_id,
                       std::vector<v1::LogLine> lines) {
  absl::MutexLock lock(&mu_);
  Ring& ring = rings_[node_id];
  for (v1::LogLine& line : lines) {
    for (Follower* f : followers_) f->Deliver(line);
    ring.lines.push_back(std::move(line));
  }
  while (static_cast<int>(ring.lines.size()) > lines_per_node_)
    ring.lines.pop_front();
}

void LogStore::StageForget(Txn& txn, const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = rings_.find(node_id);
  if (it == rings_.end()) return;
  for (uint64_t seq = it->second.oldest_seq; seq < it->second.next_seq; ++seq) {
    txn.DeleteLog(Key(node_id, seq));
  }
}

void LogStore::Forget(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  rings_.erase(node_id);
}

void LogStore::Read(const std::vector<std::string>& node_ids,
                    const Filter& filter,
                    const std::function<void(const v1::LogLine&)>& emit,
                    Follower* follower) {
  std::vector<const v1::LogLine*> out;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : node_ids) {
    auto it = rings_.find(id);
    if (it == rings_.end()) continue;
    for (const v1::LogLine& line : it->second.lines) {
      if (filter(line)) out.push_back(&line);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto* a, const auto* b) {
    return Millis(a->time()) < Millis(b->time());
  });
  for (const v1::LogLine* line : out) emit(*line);
  if (follower != nullptr) followers_.insert(follower);
}

void LogStore::Unfollow(Follower* follower) {
  absl::MutexLock lock(&mu_);
  followers_.erase(follower);
}

}  // namespace sliced::server
