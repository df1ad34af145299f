#include "server/core/telemetry_store.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"

namespace sliced::server {
namespace {

absl::Status CheckPercent(double value, const std::string& field) {
  if (!std::isfinite(value) || value < 0 || value > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a percentage in 0..100, got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckChip(const ChipMetrics& chip, const std::string& where) {
  if (chip.chip_index < 0 || chip.chip_index > 63) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".chip_index: must be 0..63, got ", chip.chip_index));
  }
  for (const auto& [value, name] :
       {std::pair{chip.tensorcore_utilization, "tensorcore_utilization"},
        std::pair{chip.duty_cycle, "duty_cycle"},
        std::pair{chip.memory_bandwidth_utilization,
                  "memory_bandwidth_utilization"}}) {
    if (!value) continue;
    absl::Status s = CheckPercent(*value, absl::StrCat(where, ".", name));
    if (!s.ok()) return s;
  }
  for (const auto& [value, name] :
       {std::pair{chip.hbm_used_bytes, "hbm_used_bytes"},
        std::pair{chip.hbm_total_bytes, "hbm_total_bytes"}}) {
    if (!value) continue;
    if (!std::isfinite(*value) || *value < 0 || *value > 1e15) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".", name, ": must be finite, >= 0 and <= 1e15 bytes, got ",
          *value));
    }
  }
  if (chip.hbm_used_bytes && chip.hbm_total_bytes &&
      *chip.hbm_used_bytes > *chip.hbm_total_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".hbm_used_bytes: exceeds hbm_total_bytes (",
                     *chip.hbm_used_bytes, " > ", *chip.hbm_total_bytes, ")"));
  }
  return absl::OkStatus();
}

constexpr uint8_t kUnset = 255;

uint8_t Percent(std::optional<double> value) {
  if (!value) return kUnset;
  return static_cast<uint8_t>(std::lround(std::clamp(*value, 0.0, 100.0)));
}

std::optional<int> Unpack(uint8_t value) {
  if (value == kUnset) return std::nullopt;
  return value;
}

}  // namespace

absl::Status TelemetryStore::Put(const std::vector<NodeTpuMetrics>& nodes,
                                 absl::Time now) {
  std::vector<std::pair<std::string, Report>> valid;
  absl::flat_hash_set<std::string> ids;
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) {
    const NodeTpuMetrics& node = nodes[n];
    const std::string where = absl::StrCat("nodes[", n, "]");
    if (!ids.insert(node.node_id).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".node_id: ", Quote(node.node_id), " appears twice"));
    }
    Report report{now, {node.chips.begin(), node.chips.end()}};
    absl::flat_hash_set<int> seen;
    for (int c = 0; c < static_cast<int>(node.chips.size()); ++c) {
      const std::string chip_where = absl::StrCat(where, ".chips[", c, "]");
      absl::Status s = CheckChip(node.chips[c], chip_where);
      if (!s.ok()) return s;
      if (!seen.insert(node.chips[c].chip_index).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(chip_where, ".chip_index: ", node.chips[c].chip_index,
                         " appears twice"));
      }
    }
    std::sort(report.chips.begin(), report.chips.end(),
              [](const auto& a, const auto& b) {
                return a.chip_index < b.chip_index;
              });
    valid.emplace_back(node.node_id, std::move(report));
  }
  absl::MutexLock lock(&mu_);
  for (auto& [id, report] : valid) {
    Packed packed{absl::ToUnixSeconds(now), {}};
    for (const ChipMetrics& chip : report.chips) {
      std::optional<double> hbm;
      if (chip.hbm_used_bytes && chip.hbm_total_bytes &&
          *chip.hbm_total_bytes > 0) {
        hbm = 100.0 * *chip.hbm_used_bytes / *chip.hbm_total_bytes;
      }
      packed.chips.push_back({static_cast<uint8_t>(chip.chip_index),
                              Percent(chip.tensorcore_utilization),
                              Percent(chip.duty_cycle), Percent(hbm),
                              Percent(chip.memory_bandwidth_utilization)});
    }
    std::deque<Packed>& series = series_[id];
    series.push_back(std::move(packed));
    while (series.size() > kSeriesSamples) series.pop_front();
    reports_[id] = std::move(report);
  }
  // Prune stale reports so memory stays bounded by the live fleet.
  for (auto it = reports_.begin(); it != reports_.end();) {
    if (now - it->second.time > max_age_) {
      series_.erase(it->first);
      it = reports_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

absl::btree_map<std::string, TelemetryStore::Report> TelemetryStore::Fresh(
    absl::Time now) const {
  absl::MutexLock lock(&mu_);
  absl::btree_map<std::string, Report> out;
  for (const auto& [id, report] : reports_) {
    if (now - report.time <= max_age_) out.emplace(id, report);
  }
  return out;
}

TelemetryStore::Series TelemetryStore::SeriesOf(const std::string& node_id,
                                                absl::Time now) const {
  absl::MutexLock lock(&mu_);
  Series out;
  auto report = reports_.find(node_id);
  if (report == reports_.end() || now - report->second.time > max_age_) {
    return out;
  }
  out.latest = report->second;
  auto series = series_.find(node_id);
  if (series == series_.end()) return out;
  for (const Packed& packed : series->second) {
    Sample& sample = out.samples.emplace_back();
    sample.time = absl::FromUnixSeconds(packed.unix_seconds);
    for (const auto& c : packed.chips) {
      sample.chips[c[0]] = {Unpack(c[1]), Unpack(c[2]), Unpack(c[3]),
                            Unpack(c[4])};
    }
  }
  return out;
}

void TelemetryStore::Forget(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  reports_.erase(node_id);
  series_.erase(node_id);
}

}  // namespace sliced::server
