#include "storage/etcd/etcd_store.h"

#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "storage/records.h"

namespace sliced::storage {
namespace {

constexpr absl::string_view kSchemaKey = "meta/schema_version";
// The write token of a fenced store (see Load and ToTxn).
constexpr absl::string_view kWriterKey = "meta/writer";
// The tables etcd holds (kLogs stays in memory: see the header).
constexpr Table kEtcdTables[] = {Table::kNodes, Table::kPlacementGroups,
                                 Table::kComputeClasses, Table::kCounters};
// Bytes of a Txn beyond its keys and values (compare, op framing), and of
// etcd's own wrapping of the request: kept free under max_request_bytes.
constexpr int64_t kPerOpBytes = 16;
constexpr int64_t kRequestSlackBytes = 1024;

// One Txn's writes, a key's last write winning.
using TxnWrites = std::map<std::string, const Mutation::Write*>;

class EtcdStore : public Store {
 public:
  EtcdStore(std::shared_ptr<EtcdClient> client, EtcdStoreOptions options)
      : client_(std::move(client)),
        options_(std::move(options)),
        mirror_(options_.mirror),
        loaded_from_(options_.loaded_from) {}

  absl::Status CheckSchema();
  absl::StatusOr<StoredState> Load() override;
  absl::Status Commit(const Mutation& mutation) override;
  absl::Status CheckUnit(const Mutation& unit) const override;
  bool shared() const override { return !options_.fence_key.empty(); }
  absl::Status Confirm() override;

 private:
  // Every table at one revision, from etcd.
  absl::StatusOr<StoredState> Read();
  std::string Key(Table table, absl::string_view key) const {
    return absl::StrCat(options_.prefix, TableName(table), "/", key);
  }
  // One Txn's limits (ops, bytes less slack); FailedPrecondition saying
  // so when one unit's `writes` exceed them.
  int64_t BytesOf(const TxnWrites& writes) const;
  bool Fits(const TxnWrites& writes) const;
  absl::Status UnitFits(const TxnWrites& unit) const;
  // The Txns for `mutation`'s etcd writes; FailedPrecondition when one
  // unit alone is above the limits.
  absl::StatusOr<std::vector<etcdserverpb::TxnRequest>> Plan(
      const Mutation& mutation) const;
  etcdserverpb::TxnRequest ToTxn(const TxnWrites& writes) const;
  // Sends `txn`, part `part` of `parts` of one commit (the parts before it
  // written), until it succeeds, is fenced, fails for sure, or retry_for has
  // passed. Returns the revision it committed at. Its errors say what of the
  // commit was written: nothing (DeposedError when fenced), or the parts
  // before it.
  absl::StatusOr<int64_t> Send(const etcdserverpb::TxnRequest& txn,
                               size_t part = 0, size_t parts = 1);
  // A fenced store's Load starts here: puts a new token under kWriterKey
  // (under the fence only) until etcd confirms it, and guards every later
  // Txn with it. So a Txn sent before (a commit whose outcome etcd never
  // confirmed, still in some member's queue) fails its compare if it
  // arrives after the Load's read instead of changing what was read.
  absl::Status RenewWriteToken();
  // Adds compare CREATE(fence_key) == fence_revision to `txn`, when fenced.
  void AddFenceCompare(etcdserverpb::TxnRequest& txn) const;
  // The error of every call once fenced: nothing was written.
  absl::Status Fenced() const {
    return DeposedError(absl::StrCat(fenced_, "; nothing was written"));
  }
  void MaybeCompact(int64_t revision);

  const std::shared_ptr<EtcdClient> client_;
  const EtcdStoreOptions options_;
  // Set once the fence failed: this store never writes again.
  std::string fenced_;
  std::map<std::string, std::string> logs_;  // key -> serialized LogRecord
  // The standby's copy until the first Load takes it.
  std::shared_ptr<EtcdMirror> mirror_;
  // Where the first Load says how it loaded; null after it.
  std::string* loaded_from_;
  int64_t compacted_to_ = 0;
  // The token every Txn compares (empty until the first Load of a fenced
  // store), and the next one until etcd confirms it.
  std::string write_token_;
  std::string next_token_;
  int64_t tokens_ = 0;
};

absl::Status EtcdStore::CheckSchema() {
  const std::string key = absl::StrCat(options_.prefix, kSchemaKey);
  etcdserverpb::TxnRequest txn;
  auto* compare = txn.add_compare();
  compare->set_key(key);
  compare->set_target(etcdserverpb::Compare::CREATE);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_create_revision(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(absl::StrCat(kSchemaVersion));
  txn.add_failure()->mutable_request_range()->set_key(key);
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_->Txn(txn));
  if (response.succeeded()) return absl::OkStatus();  // a new cluster prefix
  const auto& kvs = response.responses(0).response_range().kvs();
  int64_t version = 0;
  if (kvs.empty() || !absl::SimpleAtoi(kvs[0].value(), &version)) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd key ", key, ": unreadable schema version"));
  }
  if (version != kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd prefix ", options_.prefix, " was written with schema version ",
        version, "; this sliced reads and writes version ", kSchemaVersion));
  }
  return absl::OkStatus();
}

absl::Status EtcdStore::RenewWriteToken() {
  // Unique per store and per renewal; kept until confirmed, so that a
  // renewal that lands late puts the token this store then uses.
  if (next_token_.empty()) {
    next_token_ = absl::StrCat(options_.fence_revision, ".",
                               absl::ToUnixNanos(absl::Now()), ".", ++tokens_);
  }
  // The fence only: whether an earlier renewal landed is not known.
  etcdserverpb::TxnRequest txn;
  AddFenceCompare(txn);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(absl::StrCat(options_.prefix, kWriterKey));
  put->set_value(next_token_);
  absl::StatusOr<int64_t> sent = Send(txn);
  if (!sent.ok()) {
    if (IsDeposed(sent.status())) return sent.status();
    return absl::UnavailableError(
        absl::StrCat("renewing the write token before reading etcd: ",
                     sent.status().message()));
  }
  write_token_ = std::move(next_token_);
  next_token_.clear();
  return absl::OkStatus();
}

absl::StatusOr<StoredState> EtcdStore::Load() {
  if (!fenced_.empty()) return Fenced();
  if (shared()) RETURN_IF_ERROR(RenewWriteToken());
  std::shared_ptr<EtcdMirror> mirror = std::move(mirror_);
  mirror_ = nullptr;
  std::string* loaded_from = loaded_from_;
  loaded_from_ = nullptr;
  const absl::Time start = absl::Now();
  auto took = [&start] {
    return absl::FormatDuration(
        absl::Trunc(absl::Now() - start, absl::Milliseconds(1)));
  };
  if (mirror != nullptr) {
    absl::StatusOr<StoredState> taken =
        mirror->Take(options_.fence_revision, options_.mirror_wait);
    if (taken.ok()) {
      if (loaded_from != nullptr) {
        *loaded_from = absl::StrCat(
            "the standby's copy (watched to revision ",
            mirror->stats().revision, ", taken in ", took(), ")");
      }
      for (const auto& [key, value] : logs_) {
        RETURN_IF_ERROR(AddRecord(Table::kLogs, key, value, *taken));
      }
      return taken;
    }
    if (loaded_from != nullptr) {
      *loaded_from = absl::StrCat("etcd (the standby's copy was not used: ",
                                  taken.status().message(), ")");
    }
  } else if (loaded_from != nullptr) {
    *loaded_from = "etcd";
  }
  absl::StatusOr<StoredState> read = Read();
  if (loaded_from != nullptr) absl::StrAppend(loaded_from, " in ", took());
  return read;
}

absl::StatusOr<StoredState> EtcdStore::Read() {
  // A linearizable read fixes the revision; every table is read at it.
  etcdserverpb::RangeRequest head;
  head.set_key(absl::StrCat(options_.prefix, kSchemaKey));
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse first, client_->Range(head));
  const int64_t revision = first.header().revision();

  // Read raw, then parsed on every core, as the RocksDB store does.
  std::vector<std::pair<Table, std::vector<RawRecord>>> raw;
  for (Table table : kEtcdTables) {
    const std::string table_prefix = Key(table, "");
    std::vector<RawRecord>& records =
        raw.emplace_back(table, std::vector<RawRecord>{}).second;
    absl::StatusOr<int64_t> read = client_->Scan(
        table_prefix, PrefixEnd(table_prefix), revision,
        [&](const mvccpb::KeyValue& kv) {
          records.push_back({kv.key().substr(table_prefix.size()), kv.value()});
          return absl::OkStatus();
        });
    if (!read.ok()) return read.status();
  }
  ASSIGN_OR_RETURN(StoredState state, DecodeRecords(std::move(raw)));
  for (const auto& [key, value] : logs_) {
    RETURN_IF_ERROR(AddRecord(Table::kLogs, key, value, state));
  }
  return state;
}

void EtcdStore::AddFenceCompare(etcdserverpb::TxnRequest& txn) const {
  if (options_.fence_key.empty()) return;
  auto* compare = txn.add_compare();
  compare->set_key(options_.fence_key);
  compare->set_target(etcdserverpb::Compare::CREATE);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_create_revision(options_.fence_revision);
}

etcdserverpb::TxnRequest EtcdStore::ToTxn(const TxnWrites& writes) const {
  etcdserverpb::TxnRequest txn;
  AddFenceCompare(txn);
  if (!write_token_.empty()) {
    auto* token = txn.add_compare();
    token->set_key(absl::StrCat(options_.prefix, kWriterKey));
    token->set_target(etcdserverpb::Compare::VALUE);
    token->set_result(etcdserverpb::Compare::EQUAL);
    token->set_value(write_token_);
  }
  for (const auto& [key, write] : writes) {
    if (write->is_delete) {
      txn.add_success()->mutable_request_delete_range()->set_key(key);
    } else {
      auto* put = txn.add_success()->mutable_request_put();
      put->set_key(key);
      put->set_value(write->value);
    }
  }
  return txn;
}

int64_t EtcdStore::BytesOf(const TxnWrites& writes) const {
  int64_t bytes = 0;
  for (const auto& [key, write] : writes) {
    bytes += kPerOpBytes + static_cast<int64_t>(key.size()) +
             static_cast<int64_t>(write->value.size());
  }
  return bytes;
}

bool EtcdStore::Fits(const TxnWrites& writes) const {
  return static_cast<int64_t>(writes.size()) <= options_.max_txn_ops &&
         BytesOf(writes) <= options_.max_request_bytes - kRequestSlackBytes;
}

absl::Status EtcdStore::UnitFits(const TxnWrites& unit) const {
  if (Fits(unit)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "one operation writes ", unit.size(), " keys (", BytesOf(unit),
      " bytes), above the etcd limits sliced was given (", options_.max_txn_ops,
      " ops, ", options_.max_request_bytes,
      " bytes); nothing was written. Raise etcd's --max-txn-ops and "
      "--max-request-bytes and pass the same to sliced's "
      "--etcd_max_txn_ops / --etcd_max_request_bytes (docs/ha.md)"));
}

absl::Status EtcdStore::CheckUnit(const Mutation& unit) const {
  TxnWrites writes;
  for (const Mutation::Write& w : unit.writes()) {
    if (w.table != Table::kLogs) writes[Key(w.table, w.key)] = &w;
  }
  return UnitFits(writes);
}

absl::StatusOr<std::vector<etcdserverpb::TxnRequest>> EtcdStore::Plan(
    const Mutation& mutation) const {
  std::vector<etcdserverpb::TxnRequest> txns;
  TxnWrites current;
  size_t begin = 0;
  for (size_t end : mutation.UnitEnds()) {
    TxnWrites unit;
    for (size_t i = begin; i < end; ++i) {
      const Mutation::Write& w = mutation.writes()[i];
      if (w.table != Table::kLogs) unit[Key(w.table, w.key)] = &w;
    }
    begin = end;
    if (unit.empty()) continue;
    // The coordinator's CheckUnit failed such an op alone; this stays for
    // any other caller.
    RETURN_IF_ERROR(UnitFits(unit));
    TxnWrites joined = current;
    for (const auto& [key, write] : unit) joined[key] = write;
    if (Fits(joined)) {
      current = std::move(joined);
    } else {
      txns.push_back(ToTxn(current));
      current = std::move(unit);
    }
  }
  if (!current.empty()) txns.push_back(ToTxn(current));
  return txns;
}

absl::StatusOr<int64_t> EtcdStore::Send(const etcdserverpb::TxnRequest& txn,
                                        size_t part, size_t parts) {
  // What of the commit stands written when this part fails for sure.
  const std::string written =
      part == 0 ? "nothing was written"
                : absl::StrCat("of its ", parts, " etcd Txns only the first ",
                               part, " were written (whole operations)");
  // What this part may have done, once an attempt went unanswered: etcd
  // may have applied it, and a retry that then fails its fence says nothing
  // of that first attempt.
  const std::string unknown =
      part == 0 ? "it may or may not have been applied"
                : absl::StrCat("of its ", parts, " etcd Txns the first ", part,
                               " were written and the next may or may not "
                               "have been");
  bool ambiguous = false;
  const absl::Time give_up = absl::Now() + options_.retry_for;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::StatusOr<etcdserverpb::TxnResponse> response = client_->Txn(txn);
    if (response.ok()) {
      if (response->succeeded()) return response->header().revision();
      fenced_ = absl::StrCat("this daemon lost leadership: its election key ",
                             options_.fence_key, " (revision ",
                             options_.fence_revision,
                             ") is gone or its write token was replaced, "
                             "another daemon leads");
      if (options_.on_fenced) options_.on_fenced(fenced_);
      // Not a refusal after which nothing was done (no DeposedError) when
      // an earlier attempt of this Txn may have landed.
      if (ambiguous) {
        return absl::UnavailableError(absl::StrCat(fenced_, "; ", unknown));
      }
      if (part == 0) return Fenced();
      return absl::UnavailableError(absl::StrCat(fenced_, "; ", written));
    }
    if (!IsAmbiguous(response.status())) {
      return absl::UnavailableError(absl::StrCat("etcd refused the commit; ",
                                                 written, ": ",
                                                 response.status().message()));
    }
    if (absl::Now() + backoff > give_up) {
      return absl::UnavailableError(
          absl::StrCat("etcd did not confirm the commit within ",
                       absl::FormatDuration(options_.retry_for), "; ", unknown,
                       ": ", response.status().message()));
    }
    ambiguous = true;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

void EtcdStore::MaybeCompact(int64_t revision) {
  if (options_.keep_revisions <= 0) return;
  const int64_t target = revision - options_.keep_revisions;
  if (target <= compacted_to_ + options_.keep_revisions) return;
  // Best effort: a failed compaction is retried after the next commit.
  if (client_->Compact(target).ok()) compacted_to_ = target;
}

absl::Status EtcdStore::Commit(const Mutation& mutation) {
  if (!fenced_.empty()) return Fenced();
  if (mirror_ != nullptr) {
    // The copy catches up with the election, not with this store's own
    // writes: after a commit, only etcd has the state.
    mirror_->Stop();
    mirror_ = nullptr;
  }
  ASSIGN_OR_RETURN(std::vector<etcdserverpb::TxnRequest> txns,
                   Plan(mutation));
  if (txns.empty() && shared()) {
    // Only log lines, which stay here: nothing for etcd, but the ops of this
    // commit are answered from this daemon's state, which the fence must
    // still vouch for (as Confirm() does for a commit of nothing).
    txns.push_back(ToTxn({}));
  }
  int64_t revision = 0;
  for (size_t i = 0; i < txns.size(); ++i) {
    ASSIGN_OR_RETURN(revision, Send(txns[i], i, txns.size()));
  }
  for (const Mutation::Write& w : mutation.writes()) {
    if (w.table != Table::kLogs) continue;
    if (w.is_delete) {
      logs_.erase(w.key);
    } else {
      logs_[w.key] = w.value;
    }
  }
  if (revision > 0) MaybeCompact(revision);
  return absl::OkStatus();
}

absl::Status EtcdStore::Confirm() {
  if (!fenced_.empty()) return Fenced();
  if (!shared()) return absl::OkStatus();
  // The fence's compare and nothing to write: it succeeds only while the
  // election key this store was opened under is still there.
  return Send(ToTxn({})).status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenEtcdStore(
    std::shared_ptr<EtcdClient> client, const EtcdStoreOptions& options) {
  if (!absl::EndsWith(options.prefix, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd prefix '", options.prefix, "' must end with '/'"));
  }
  if (options.mirror != nullptr && options.fence_key.empty()) {
    return absl::InvalidArgumentError(
        "EtcdStoreOptions.mirror needs fence_key and fence_revision (the "
        "copy catches up to the leader's election key)");
  }
  auto store = std::make_unique<EtcdStore>(std::move(client), options);
  RETURN_IF_ERROR(store->CheckSchema());
  return store;
}

}  // namespace sliced::storage
