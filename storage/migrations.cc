#include "storage/migrations.h"

#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "scheduler/labels.h"
#include "sliced/storage/records.pb.h"
#include "storage/records.h"

namespace sliced::storage {
namespace {

// A version-1 selector (key -> expression) as structured terms.
absl::Status UpgradeSelector(SelectorRecord& selector) {
  if (selector.legacy_terms().empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      scheduler::LabelSelector parsed,
      scheduler::ParseLabelSelector(absl::btree_map<std::string, std::string>(
          selector.legacy_terms().begin(), selector.legacy_terms().end())));
  selector.clear_legacy_terms();
  selector.clear_terms();
  SelectorToRecord(parsed, &selector);
  return absl::OkStatus();
}

absl::Status UpgradeBundles(
    google::protobuf::RepeatedPtrField<BundleRecord>& bundles) {
  for (BundleRecord& b : bundles) {
    RETURN_IF_ERROR(UpgradeSelector(*b.mutable_selector()));
  }
  return absl::OkStatus();
}

absl::Status UpgradePlacementGroupV1(PlacementGroupRecord& r) {
  RETURN_IF_ERROR(UpgradeBundles(*r.mutable_bundles()));
  for (FallbackRecord& f : *r.mutable_fallbacks()) {
    RETURN_IF_ERROR(UpgradeBundles(*f.mutable_bundles()));
  }
  if (r.has_slice()) {
    RETURN_IF_ERROR(UpgradeSelector(*r.mutable_slice()->mutable_selector()));
  }
  r.clear_requested_bundles();
  for (const BundleRecord& b : r.bundles()) {
    BundleRecord* requested = r.add_requested_bundles();
    *requested = b;
    requested->clear_node_id();
  }
  return absl::OkStatus();
}

absl::Status UpgradeComputeClassV1(ComputeClassRecord& r) {
  for (SelectorRecord& p : *r.mutable_priorities()) {
    RETURN_IF_ERROR(UpgradeSelector(p));
  }
  return absl::OkStatus();
}

template <typename Record>
absl::StatusOr<std::optional<std::string>> Rewrite(
    Table table, const std::string& key, const std::string& value,
    absl::Status (*upgrade)(Record&)) {
  Record record;
  if (!record.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("stored record ", TableName(table),
                                            "/", key, " does not parse"));
  }
  absl::Status upgraded = upgrade(record);
  if (!upgraded.ok()) {
    return absl::DataLossError(
        absl::StrCat("migrating stored record ", TableName(table), "/", key,
                     " from schema 1: ", upgraded.message()));
  }
  return SerializeRecord(record);
}

}  // namespace

absl::StatusOr<std::optional<std::string>> UpgradeRecord(
    int64_t from_version, Table table, const std::string& key,
    const std::string& value) {
  if (from_version == kSchemaVersion) return std::nullopt;
  if (from_version != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no migration from schema version ", from_version, " to ",
                     kSchemaVersion));
  }
  switch (table) {
    case Table::kPlacementGroups:
      return Rewrite<PlacementGroupRecord>(table, key, value,
                                           &UpgradePlacementGroupV1);
    case Table::kComputeClasses:
      return Rewrite<ComputeClassRecord>(table, key, value,
                                         &UpgradeComputeClassV1);
    case Table::kNodes:
    case Table::kLogs:
    case Table::kCounters:
      return std::nullopt;  // unchanged in version 2 (counters are newer)
  }
  return std::nullopt;
}

}  // namespace sliced::storage
