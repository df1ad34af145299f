// Mutation, table names, and the in-memory store.
#include "storage/store.h"

#include <array>
#include <cstddef>
#include <iterator>
#include <map>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "storage/records.h"

namespace sliced::storage {

absl::string_view TableName(Table table) {
  switch (table) {
    case Table::kNodes:
      return "nodes";
    case Table::kPlacementGroups:
      return "placement_groups";
    case Table::kComputeClasses:
      return "compute_classes";
    case Table::kLogs:
      return "logs";
    case Table::kCounters:
      return "counters";
  }
  return "unknown";
}

namespace {
// The payload that marks a DeposedError (never sent as it is).
constexpr char kDeposedPayload[] = "sliced.dev/deposed";
}  // namespace

absl::Status DeposedError(absl::string_view message) {
  absl::Status status = absl::UnavailableError(message);
  status.SetPayload(kDeposedPayload, absl::Cord());
  return status;
}

bool IsDeposed(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kDeposedPayload).has_value();
}

namespace {
Mutation::Write Put(Table table, absl::string_view key,
                    const google::protobuf::MessageLite& record) {
  return {table, std::string(key), SerializeRecord(record), false};
}
Mutation::Write Delete(Table table, absl::string_view key) {
  return {table, std::string(key), "", true};
}
}  // namespace

void Mutation::PutNode(const scheduler::Node& node) {
  writes_.push_back(
      {Table::kNodes, node.node_id, SerializeNodeRecord(node), false});
}
void Mutation::DeleteNode(absl::string_view id) {
  writes_.push_back(Delete(Table::kNodes, id));
}
void Mutation::PutPlacementGroup(const server::PlacementGroup& group) {
  // Built on an arena whose first block is on the stack: a group's record
  // (dozens of strings and nested messages) then costs no allocation to
  // build and free unless it outgrows the block.
  alignas(std::max_align_t) char block[16 * 1024];
  google::protobuf::ArenaOptions options;
  options.initial_block = block;
  options.initial_block_size = sizeof(block);
  google::protobuf::Arena arena(options);
  auto* record =
      google::protobuf::Arena::CreateMessage<PlacementGroupRecord>(&arena);
  ToRecord(group, record);
  writes_.push_back(Put(Table::kPlacementGroups, group.id, *record));
}
void Mutation::DeletePlacementGroup(absl::string_view id) {
  writes_.push_back(Delete(Table::kPlacementGroups, id));
}
void Mutation::PutComputeClass(const server::ComputeClass& compute_class) {
  writes_.push_back(
      Put(Table::kComputeClasses, compute_class.name, ToRecord(compute_class)));
}
void Mutation::DeleteComputeClass(absl::string_view name) {
  writes_.push_back(Delete(Table::kComputeClasses, name));
}
void Mutation::PutLog(absl::string_view key, const server::LogLine& line) {
  writes_.push_back(Put(Table::kLogs, key, ToRecord(line)));
}
void Mutation::DeleteLog(absl::string_view key) {
  writes_.push_back(Delete(Table::kLogs, key));
}
void Mutation::PutNextPgSequence(uint64_t next) {
  writes_.push_back({Table::kCounters, std::string(kCounterNextPgSequence),
                     absl::StrCat(next), false});
}
void Mutation::CloseUnit() {
  if (!writes_.empty() &&
      (unit_ends_.empty() || unit_ends_.back() != writes_.size())) {
    unit_ends_.push_back(writes_.size());
  }
}
void Mutation::Append(const Mutation& other) { Append(Mutation(other)); }

void Mutation::Append(Mutation&& other) {
  CloseUnit();
  const size_t offset = writes_.size();
  for (size_t end : other.unit_ends_) unit_ends_.push_back(offset + end);
  writes_.insert(writes_.end(), std::make_move_iterator(other.writes_.begin()),
                 std::make_move_iterator(other.writes_.end()));
  CloseUnit();
  other = Mutation();
}
std::vector<size_t> Mutation::UnitEnds() const {
  std::vector<size_t> ends = unit_ends_;
  if (!writes_.empty() && (ends.empty() || ends.back() != writes_.size())) {
    ends.push_back(writes_.size());
  }
  return ends;
}

struct MemoryStore::Tables {
  std::array<std::map<std::string, std::string>, kNumTables> by_table;
};

absl::StatusOr<StoredState> MemoryStore::Load() {
  StoredState state;
  if (tables_ == nullptr) return state;
  for (int t = 0; t < kNumTables; ++t) {
    for (const auto& [key, value] : tables_->by_table[t]) {
      absl::Status added = AddRecord(static_cast<Table>(t), key, value, state);
      if (!added.ok()) return added;
    }
  }
  return state;
}

absl::Status MemoryStore::Commit(const Mutation& mutation) {
  if (mutation.empty()) return absl::OkStatus();
  // Copy-then-swap keeps the commit all-or-nothing.
  auto next =
      tables_ ? std::make_shared<Tables>(*tables_) : std::make_shared<Tables>();
  for (const Mutation::Write& w : mutation.writes()) {
    auto& table = next->by_table[static_cast<int>(w.table)];
    if (w.is_delete) {
      table.erase(w.key);
    } else {
      table[w.key] = w.value;
    }
  }
  tables_ = std::move(next);
  return absl::OkStatus();
}

}  // namespace sliced::storage
