#include "server/core/leases.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace sliced::server {

Leases::Shard& Leases::ShardOf(absl::string_view node_id) const {
  return shards_[absl::Hash<absl::string_view>()(node_id) % kShards];
}

void Leases::Reserve(size_t nodes) {
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    shard.last.reserve(shard.last.size() + nodes / kShards + nodes / 64);
  }
}

void Leases::Renew(absl::string_view node_id, absl::Time at) {
  Shard& shard = ShardOf(node_id);
  absl::MutexLock lock(&shard.mu);
  auto [it, fresh] = shard.last.try_emplace(node_id, at);
  if (!fresh) it->second = std::max(it->second, at);
}

absl::Time Leases::Last(absl::string_view node_id) const {
  Shard& shard = ShardOf(node_id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.last.find(node_id);
  return it == shard.last.end() ? epoch_ : std::max(epoch_, it->second);
}

std::vector<std::string> Leases::Stale(absl::Time deadline) const {
  std::vector<std::string> out;
  if (epoch_ >= deadline) return out;  // nobody can be late yet
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, last] : shard.last) {
      if (last < deadline) out.push_back(id);
    }
  }
  return out;
}

void Leases::Forget(absl::string_view node_id) {
  Shard& shard = ShardOf(node_id);
  absl::MutexLock lock(&shard.mu);
  shard.last.erase(node_id);
}

void Leases::ForgetIfStale(absl::string_view node_id, absl::Time deadline) {
  Shard& shard = ShardOf(node_id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.last.find(node_id);
  if (it != shard.last.end() && std::max(epoch_, it->second) < deadline) {
    shard.last.erase(it);
  }
}

}  // namespace sliced::server
