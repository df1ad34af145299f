#include "scheduler/solver.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sliced::scheduler {
namespace {

// How many fitting candidates of the best rank PACK/SPREAD/STRICT_PACK
// compare before choosing the tightest.
constexpr int kBestFitWindow = 8;
// Edge visits allowed to the STRICT_SPREAD matching before it gives up.
constexpr int64_t kMatchingBudget = 4'000'000;
// Candidates PACK examines when trying the whole gang on one node.
constexpr int64_t kPackOneNodeScan = 1024;
// Gangs up to this many bundles that land in several zones are also tried
// one zone at a time (the cost is one placement per zone).
constexpr size_t kZoneDomainMaxBundles = 64;

const std::string& TpuName() {
  static const std::string* name = new std::string(kResourceTpu);
  return *name;
}

int64_t Amount(const ResourceSet& set, const std::string& name) {
  auto it = set.find(name);
  return it == set.end() ? 0 : it->second;
}

BundleKind KindOf(const ResourceSet& resources) {
  return Amount(resources, TpuName()) > 0 ? BundleKind::kTpu
                                          : BundleKind::kCpuOnly;
}

std::string ResourcesToString(const ResourceSet& resources) {
  return absl::StrCat("{",
                      absl::StrJoin(resources, ", ",
                                    [](std::string* out, const auto& entry) {
                                      absl::StrAppend(
                                          out, entry.first, ": ",
                                          FromFixedPoint(entry.second));
                                    }),
                      "}");
}

LabelSelector And(const LabelSelector& a, const LabelSelector* b) {
  LabelSelector out = a;
  if (b != nullptr) {
    out.terms.insert(out.terms.end(), b->terms.begin(), b->terms.end());
    std::stable_sort(out.terms.begin(), out.terms.end(),
                     [](const SelectorTerm& x, const SelectorTerm& y) {
                       return x.key < y.key;
                     });
  }
  return out;
}

// "9 held, 2 not intact" from the non-zero rejections.
std::string JoinRejections(const std::vector<Rejection>& rejected) {
  std::vector<std::string> parts;
  for (const Rejection& r : rejected) {
    if (r.count > 0) parts.push_back(absl::StrCat(r.count, " ", r.reason));
  }
  return absl::StrJoin(parts, ", ");
}

// Counts rejections by reason, keeping first-seen order.
class Tally {
 public:
  void Add(const std::string& reason, int64_t n = 1) {
    if (n == 0) return;
    for (Rejection& r : rejected_) {
      if (r.reason == reason) {
        r.count += n;
        return;
      }
    }
    rejected_.push_back({reason, n});
  }
  std::vector<Rejection> Take() { return std::move(rejected_); }

 private:
  std::vector<Rejection> rejected_;
};

// Dense bitset over node indexes, local to one solve.
using Bits = std::vector<uint64_t>;

bool TestBit(const Bits& bits, uint32_t i) {
  return (bits[i >> 6] >> (i & 63)) & 1;
}

// Nodes whose labels satisfy `selector` (any state), from the label index.
Bits CandidateBits(const InventorySnapshot& snap,
                   const LabelSelector& selector) {
  const size_t n = snap.num_nodes();
  const size_t words = (n + 63) / 64;
  Bits bits(words, ~uint64_t{0});
  if (n % 64 != 0 && words > 0) bits.back() = (uint64_t{1} << (n % 64)) - 1;
  Bits term_bits(words);
  for (const SelectorTerm& term : selector.terms) {
    std::fill(term_bits.begin(), term_bits.end(), 0);
    auto key = snap.label_index().find(term.key);
    if (key != snap.label_index().end()) {
      for (const std::string& v : term.values) {
        auto it = key->second->find(v);
        if (it == key->second->end()) continue;
        for (uint32_t i : *it->second)
          term_bits[i >> 6] |= uint64_t{1} << (i & 63);
      }
    }
    const bool positive =
        term.op == SelectorOp::kEquals || term.op == SelectorOp::kIn;
    for (size_t w = 0; w < words; ++w) {
      bits[w] &= positive ? term_bits[w] : ~term_bits[w];
    }
  }
  return bits;
}

// What this decision uses on top of the snapshot, plus what a PG being
// re-placed gives back. The snapshot itself is never written.
class Overlay {
 public:
  Overlay(const InventorySnapshot& snap,
          const absl::flat_hash_map<uint32_t, ResourceSet>* released)
      : snap_(snap), released_(released) {}

  int64_t Free(uint32_t i, const std::string& name) const {
    int64_t free = Amount(snap_.node(i).free, name);
    if (released_ != nullptr) {
      auto it = released_->find(i);
      if (it != released_->end()) free += Amount(it->second, name);
    }
    auto it = used_.find(i);
    if (it != used_.end()) free -= Amount(it->second, name);
    return free;
  }
  bool Fits(uint32_t i, const ResourceSet& request) const {
    for (const auto& [name, amount] : request) {
      if (amount > 0 && Free(i, name) < amount) return false;
    }
    return true;
  }
  void Take(uint32_t i, const ResourceSet& request) {
    ResourceSet& used = used_[i];
    for (const auto& [name, amount] : request) used[name] += amount;
  }
  // Leftover of the request's dominant resource after placing it on node i,
  // in parts per million of the node's total (lower = tighter fit).
  int64_t Leftover(uint32_t i, const ResourceSet& request) const {
    int64_t worst = 0;
    for (const auto& [name, amount] : request) {
      const int64_t total = Amount(snap_.node(i).node.resources, name);
      if (total <= 0) continue;
      const __int128 left =
          static_cast<__int128>(Free(i, name) - amount) * 1'000'000;
      worst = std::max<int64_t>(worst, static_cast<int64_t>(left / total));
    }
    return worst;
  }

 private:
  const InventorySnapshot& snap_;
  const absl::flat_hash_map<uint32_t, ResourceSet>* released_;
  absl::flat_hash_map<uint32_t, ResourceSet> used_;
};

// One attempt = one bundle list on one priority.
struct Attempt {
  bool placed = false;
  bool infeasible = false;
  std::vector<uint32_t> nodes;  // per bundle
  std::vector<std::string> slices;
  std::vector<DiagnosisStep> steps;
  std::string summary;
};

// Bundles with the same effective selector, kind and resources share a
// candidate cursor: capacity only shrinks during a solve, so a node that does
// not fit one of them now never will for the next.
struct Cursor {
  int rank = 0;
  size_t pos = 0;
};
struct Group {
  const Bits* candidates = nullptr;
  BundleKind kind = BundleKind::kCpuOnly;
  Cursor cursor;
  size_t opened_pos = 0;  // PACK: gang nodes already ruled out
};

class SolveRun {
 public:
  SolveRun(const InventorySnapshot& snap, const PlacementRequest& request)
      : snap_(snap), request_(request) {
    if (!request.replacing_pg_id.empty()) {
      for (const Allocation& a : snap.AllocationsOf(request.replacing_pg_id)) {
        ResourceSet& r =
            released_[static_cast<uint32_t>(snap.NodeIndex(a.node_id))];
        for (const auto& [name, amount] : a.resources) r[name] += amount;
      }
    }
  }

  Attempt Run(const std::vector<Bundle>& bundles, const LabelSelector* priority,
              const std::string& label) {
    label_ = label;
    return request_.slice.has_value() ? SliceAttempt(bundles, priority)
                                      : GenericAttempt(bundles, priority);
  }

 private:
  // --- Slice requests ------------------------------------------------------
  Attempt SliceAttempt(const std::vector<Bundle>& given,
                       const LabelSelector* priority) {
    const SliceRequirement& req = *request_.slice;
    Attempt out;
    overlay_.emplace(snap_, &released_);
    const TpuShape shape = *ResolveTpuShape(req.generation, req.topology);
    const int64_t hosts = shape.hosts;
    const int64_t needed = req.num_slices;
    // Bundles per (slice row, worker). When every slice asks the same of its
    // hosts (the usual case) there is one row, shared by all slices.
    std::vector<Bundle> bundles;
    int64_t rows = 1;
    if (given.empty()) {
      Bundle b;
      b.resources =
          req.resources_per_host.empty()
              ? ResourceSet{{TpuName(), shape.chips_per_host * kResourceScale}}
              : req.resources_per_host;
      bundles.assign(hosts, b);
    } else {
      for (int64_t k = 1; k < needed && rows == 1; ++k) {
        for (int64_t w = 0; w < hosts; ++w) {
          if (!(given[k * hosts + w] == given[w])) {
            rows = needed;
            break;
          }
        }
      }
      bundles.assign(given.begin(), given.begin() + rows * hosts);
    }
    auto at = [&](int64_t k, int64_t w) {
      return (rows == 1 ? 0 : k) * hosts + w;
    };
    // A slice's tier and zone are those of its worker 0 (its index key):
    // selector terms on them are decided per key; the remaining terms
    // ("residual") are checked on every host.
    std::vector<LabelSelector> keyed(bundles.size());
    std::vector<LabelSelector> residual(bundles.size());
    bool any_keyed = false;
    bool any_residual = false;
    for (size_t j = 0; j < bundles.size(); ++j) {
      const LabelSelector sel =
          And(And(bundles[j].selector, &req.selector), priority);
      for (const SelectorTerm& t : sel.terms) {
        const bool on_key = t.key == kLabelCapacityTier || t.key == kLabelZone;
        (on_key ? keyed[j] : residual[j]).terms.push_back(t);
      }
      any_keyed = any_keyed || !keyed[j].empty();
      any_residual = any_residual || !residual[j].empty();
    }
    auto key_matches = [&](const SliceKey& key) {
      if (!any_keyed) return true;
      Labels labels;
      if (!key.tier.empty()) labels[std::string(kLabelCapacityTier)] = key.tier;
      if (!key.zone.empty()) labels[std::string(kLabelZone)] = key.zone;
      for (const LabelSelector& sel : keyed) {
        if (!Matches(sel, labels)) return false;
      }
      return true;
    };
    auto host_matches = [&](uint32_t h, int64_t k, int64_t w) {
      return !any_residual ||
             Matches(residual[at(k, w)], snap_.node(h).node.labels);
    };
    // Whether slice s can be the k-th chosen slice (hosts match and fit).
    auto slice_fits = [&](uint32_t s, int64_t k) {
      const InventorySnapshot::SliceEntry& se = snap_.slice(s);
      for (int64_t w = 0; w < hosts; ++w) {
        const uint32_t h = se.hosts[w];
        if (!host_matches(h, k, w)) return false;
        if (!overlay().Fits(h, bundles[at(k, w)].resources)) return false;
      }
      return true;
    };

    // 1. Pre-filter from the index: keys of this shape, by zone.
    struct ZonePool {
      std::vector<const CowBitset*> sets;  // one per tier key, tier order
      int64_t count = 0;
    };
    absl::btree_map<std::string, ZonePool> zones;
    const SliceKey first{req.generation, shape.topology, "", ""};
    for (auto it = snap_.free_slices().lower_bound(first);
         it != snap_.free_slices().end() &&
         it->first.generation == req.generation &&
         it->first.topology == shape.topology;
         ++it) {
      if (!key_matches(it->first)) continue;
      ZonePool& pool = zones[it->first.zone];
      pool.sets.push_back(it->second.get());
      pool.count += it->second->count();
    }
    // 2. Domains: zones that hold the whole request first. A single slice
    //    comes from the zone with the most free slices of the shape, which
    //    keeps every zone's pool as large as possible for requests pinned to
    //    a zone. A multi-slice request takes the zone with the fewest that
    //    still holds all of them (best fit), which keeps bigger pools for
    //    bigger multi-slice requests. Zones that cannot hold it all (the
    //    multi-zone fallback) are taken largest first. Ties: zone name.
    std::vector<std::pair<std::string, const ZonePool*>> order;
    for (const auto& [zone, pool] : zones) order.emplace_back(zone, &pool);
    std::stable_sort(order.begin(), order.end(),
                     [&](const auto& a, const auto& b) {
                       const int64_t ca = a.second->count, cb = b.second->count;
                       const bool fa = ca >= needed, fb = cb >= needed;
                       if (fa != fb) return fa;
                       if (fa && needed > 1) return ca < cb;
                       return ca > cb;
                     });
    // 3. Fit: slices in (tier, name) order within each zone.
    std::vector<uint32_t> chosen;
    auto take_from = [&](const ZonePool& pool, std::vector<uint32_t>& into) {
      for (const CowBitset* set : pool.sets) {
        for (size_t s = set->NextSet(0);
             s < set->bits() && static_cast<int64_t>(into.size()) < needed;
             s = set->NextSet(s + 1)) {
          if (slice_fits(static_cast<uint32_t>(s),
                         static_cast<int64_t>(into.size()))) {
            into.push_back(static_cast<uint32_t>(s));
          }
        }
      }
    };
    int64_t total_free = 0;
    for (const auto& [zone, pool] : order) total_free += pool->count;
    for (const auto& [zone, pool] : order) {
      if (pool->count < needed) break;
      std::vector<uint32_t> in_zone;
      take_from(*pool, in_zone);
      if (static_cast<int64_t>(in_zone.size()) == needed) {
        chosen = std::move(in_zone);
        break;
      }
    }
    if (chosen.empty() && needed > 1 && total_free >= needed) {
      for (const auto& [zone, pool] : order) {
        take_from(*pool, chosen);
        if (static_cast<int64_t>(chosen.size()) == needed) break;
      }
    }
    if (static_cast<int64_t>(chosen.size()) == needed) {
      out.placed = true;
      absl::btree_map<std::string, int> used_zones;
      for (int64_t k = 0; k < needed; ++k) {
        const InventorySnapshot::SliceEntry& se = snap_.slice(chosen[k]);
        out.slices.push_back(se.info.name);
        ++used_zones[se.zone];
        for (int64_t w = 0; w < hosts; ++w) out.nodes.push_back(se.hosts[w]);
      }
      std::vector<std::string> zone_names;
      for (const auto& [z, c] : used_zones)
        zone_names.push_back(z.empty() ? "(no zone)" : z);
      out.summary = absl::StrCat("placed ", needed, " ", shape.pod_type,
                                 " slice", needed == 1 ? "" : "s", " in zone",
                                 zone_names.size() == 1 ? " " : "s ",
                                 absl::StrJoin(zone_names, ", "));
      return out;
    }

    // Failure: explain every slice of the shape. Keys the tier/zone terms
    // exclude are counted whole; the slices of the other keys are checked
    // one by one (slow path, O(slices in the allowed keys)).
    DiagnosisStep step;
    step.step = absl::StrCat(label_, shape.pod_type, " slices (",
                             TpuGenerationName(req.generation), " ",
                             shape.topology, ")");
    int64_t could_ever = 0;
    int64_t held = 0, broken = 0, too_small = 0;
    absl::btree_map<std::string, int64_t> excluded_in_zone;  // zone -> slices
    for (auto it = snap_.slices_by_key().lower_bound(first);
         it != snap_.slices_by_key().end() &&
         it->first.generation == req.generation &&
         it->first.topology == shape.topology;
         ++it) {
      const int64_t in_key = static_cast<int64_t>(it->second.size());
      step.considered += in_key;
      if (!key_matches(it->first)) {
        excluded_in_zone[it->first.zone] += in_key;
        continue;
      }
      for (uint32_t s : it->second) {
        const InventorySnapshot::SliceEntry& se = snap_.slice(s);
        bool excluded = false;
        bool ever = true;
        const int64_t present = std::min<int64_t>(hosts, se.hosts.size());
        for (int64_t w = 0; w < present && !excluded; ++w) {
          const Node& host = snap_.node(se.hosts[w]).node;
          for (int64_t k = 0; k < rows; ++k) {
            if (!host_matches(se.hosts[w], k, w)) {
              excluded = true;
              break;
            }
            for (const auto& [name, amount] : bundles[at(k, w)].resources) {
              if (Amount(host.resources, name) < amount) ever = false;
            }
          }
        }
        if (excluded) {
          ++excluded_in_zone[se.zone];
        } else if (!ever) {
          ++too_small;
        } else {
          ++could_ever;
          if (!se.info.intact) {
            ++broken;
          } else if (!se.free()) {
            ++held;
          } else {
            ++step.accepted;
          }
        }
      }
    }
    Tally tally;
    tally.Add("held", held);
    tally.Add("not intact", broken);
    tally.Add("with hosts too small for the bundles", too_small);
    for (const auto& [zone, count] : excluded_in_zone) {
      tally.Add(zone.empty()
                    ? std::string("excluded by selector")
                    : absl::StrCat("in zone ", zone, " excluded by selector"),
                count);
    }
    step.rejected = tally.Take();
    const int64_t total = step.considered;
    out.infeasible = could_ever < needed;
    std::string detail = JoinRejections(step.rejected);
    out.summary = absl::StrCat(
        step.accepted, "/", total, " ", shape.pod_type, " slices free",
        needed > 1 ? absl::StrCat(", ", needed, " needed") : "",
        detail.empty() ? "" : ": ", detail);
    if (total == 0) {
      out.summary = absl::StrCat("no ", shape.pod_type, " slice (",
                                 TpuGenerationName(req.generation), " ",
                                 shape.topology, ") exists in this inventory");
    } else if (out.infeasible && could_ever > 0) {
      absl::StrAppend(&out.summary, "; only ", could_ever,
                      " could ever match this request");
    }
    out.steps.push_back(std::move(step));
    return out;
  }

  // --- Generic requests ----------------------------------------------------
  // Places the gang across the whole cluster; then, for small gangs spread
  // over several zones, tries each zone alone and keeps the best placement
  // by DomainScore.
  Attempt GenericAttempt(const std::vector<Bundle>& bundles,
                         const LabelSelector* priority) {
    Attempt base = PlaceGang(bundles, priority, nullptr);
    if (request_.strategy == Strategy::kPack && bundles.size() > 1) {
      // Ray's PACK puts the gang on one node when it can; keep that unless it
      // costs more (e.g. CPU bundles on a TPU host while CPU nodes hold them).
      Attempt one = PlaceOnOneNode(bundles, priority);
      if (one.placed &&
          (!base.placed || !(Score(bundles, base) < Score(bundles, one)))) {
        base = std::move(one);
      }
    }
    if (!base.placed || request_.strategy == Strategy::kStrictPack ||
        bundles.size() > kZoneDomainMaxBundles) {
      return base;
    }
    DomainScore best = Score(bundles, base);
    if (best.zones <= 1) return base;
    auto zones = snap_.label_index().find(kLabelZone);
    if (zones == snap_.label_index().end()) return base;
    Attempt chosen = std::move(base);
    for (const auto& [zone, nodes] : *zones->second) {
      LabelSelector domain;
      domain.terms.push_back(
          {std::string(kLabelZone), SelectorOp::kEquals, {zone}});
      Attempt attempt = PlaceGang(bundles, priority, &domain);
      if (!attempt.placed) continue;
      const DomainScore score = Score(bundles, attempt);
      if (score < best) {
        best = score;
        absl::StrAppend(&attempt.summary, " in zone ", zone);
        chosen = std::move(attempt);
      }
    }
    return chosen;
  }

  // How much a placement costs, compared lexicographically (lower is
  // better): whole free slices it breaks, CPU-only bundles it puts on TPU
  // nodes, how far it strays from the strategy (PACK: nodes used; SPREAD:
  // bundles sharing a node), zones it spans, idle nodes it opens, then the
  // sum of the nodes' ranks.
  struct DomainScore {
    int64_t slices_broken = 0;
    int64_t cpu_on_tpu = 0;
    int64_t strategy_cost = 0;
    int64_t zones = 0;
    int64_t fresh_nodes = 0;
    int64_t rank_sum = 0;
    friend auto operator<=>(const DomainScore&, const DomainScore&) = default;
  };

  DomainScore Score(const std::vector<Bundle>& bundles,
                    const Attempt& a) const {
    DomainScore score;
    absl::btree_set<int32_t> broken;
    absl::btree_set<std::string> zones;
    absl::btree_set<uint32_t> fresh;
    for (size_t b = 0; b < bundles.size(); ++b) {
      const uint32_t i = a.nodes[b];
      const InventorySnapshot::NodeEntry& e = snap_.node(i);
      const BundleKind kind = KindOf(bundles[b].resources);
      if (e.slice >= 0 && snap_.slice(e.slice).info.intact &&
          snap_.slice(e.slice).free()) {
        broken.insert(e.slice);
      }
      if (kind == BundleKind::kCpuOnly && e.tpu) ++score.cpu_on_tpu;
      auto zone = e.node.labels.find(kLabelZone);
      zones.insert(zone == e.node.labels.end() ? std::string() : zone->second);
      if (e.allocations.empty()) fresh.insert(i);
      score.rank_sum += snap_.Rank(kind, i);
    }
    const int64_t distinct = static_cast<int64_t>(
        absl::btree_set<uint32_t>(a.nodes.begin(), a.nodes.end()).size());
    if (request_.strategy == Strategy::kPack) score.strategy_cost = distinct;
    if (request_.strategy == Strategy::kSpread) {
      score.strategy_cost = static_cast<int64_t>(bundles.size()) - distinct;
    }
    score.slices_broken = static_cast<int64_t>(broken.size());
    score.zones = static_cast<int64_t>(zones.size());
    score.fresh_nodes = static_cast<int64_t>(fresh.size());
    return score;
  }

  // PACK's one-node placement: every bundle on one node, best fit, looking
  // at no more than kPackOneNodeScan candidates. Not with pinned bundles.
  Attempt PlaceOnOneNode(const std::vector<Bundle>& bundles,
                         const LabelSelector* priority) {
    Attempt out;
    Reset();
    ResourceSet sum;
    LabelSelector all = priority == nullptr ? LabelSelector() : *priority;
    std::vector<const LabelSelector*> seen;
    for (const Bundle& b : bundles) {
      if (!b.pinned_node_id.empty()) return out;
      for (const auto& [name, amount] : b.resources) sum[name] += amount;
      if (std::none_of(seen.begin(), seen.end(), [&](const LabelSelector* x) {
            return *x == b.selector;
          })) {
        seen.push_back(&b.selector);
        all = And(all, &b.selector);
      }
    }
    Group& g = groups_[GroupFor(all, KindOf(sum), sum)];
    const int64_t node =
        BestFit(g, sum, /*fresh_only=*/false, kPackOneNodeScan);
    if (node < 0) return out;
    out.nodes.assign(bundles.size(), static_cast<uint32_t>(node));
    out.placed = true;
    out.summary =
        absl::StrCat("placed ", bundles.size(), " bundles on 1 node (PACK)");
    return out;
  }

  void Reset() {
    overlay_.emplace(snap_, &released_);
    groups_.clear();
    group_of_.clear();
    bits_cache_.clear();
    opened_.clear();
    opened_set_.clear();
  }

  // One placement of the gang, optionally confined to `domain` (a selector
  // ANDed with every bundle's).
  Attempt PlaceGang(const std::vector<Bundle>& bundles,
                    const LabelSelector* priority,
                    const LabelSelector* domain) {
    Attempt out;
    Reset();
    const size_t b_count = bundles.size();
    std::vector<int> group(b_count);
    std::vector<LabelSelector> selectors(b_count);
    // Bundles of a gang repeat a few shapes: look at the last few distinct
    // ones before building a group key.
    std::vector<size_t> recent;
    for (size_t b = 0; b < b_count; ++b) {
      auto same = std::find_if(recent.rbegin(), recent.rend(), [&](size_t r) {
        return bundles[b].selector == bundles[r].selector &&
               bundles[b].resources == bundles[r].resources;
      });
      if (same != recent.rend()) {
        selectors[b] = selectors[*same];
        group[b] = group[*same];
        continue;
      }
      if (recent.size() == 4) recent.erase(recent.begin());
      recent.push_back(b);
      selectors[b] = And(bundles[b].selector, priority);
      if (domain != nullptr) selectors[b] = And(selectors[b], domain);
      group[b] = GroupFor(selectors[b], KindOf(bundles[b].resources),
                          bundles[b].resources);
    }
    out.nodes.assign(b_count, 0);
    std::vector<bool> done(b_count, false);

    // Pinned bundles first, on their node.
    for (size_t b = 0; b < b_count; ++b) {
      if (bundles[b].pinned_node_id.empty()) continue;
      const int64_t i = snap_.NodeIndex(bundles[b].pinned_node_id);
      std::string why;
      if (i < 0) {
        out.infeasible = true;
        why = "is not in the inventory";
      } else if (snap_.node(i).node.state != NodeState::kAlive) {
        why = absl::StrCat("is ", NodeStateName(snap_.node(i).node.state));
      } else if (!Matches(selectors[b], snap_.node(i).node.labels)) {
        why = "no longer matches the selector";
      } else if (!overlay().Fits(i, bundles[b].resources)) {
        why = absl::StrCat("has no room for ",
                           ResourcesToString(bundles[b].resources));
      } else if (request_.strategy == Strategy::kStrictSpread &&
                 opened_set_.contains(i)) {
        out.infeasible = true;
        why = "already holds another pinned bundle (STRICT_SPREAD)";
      }
      if (!why.empty()) {
        out.summary = absl::StrCat("bundle ", b, " is pinned to node ",
                                   bundles[b].pinned_node_id, ", which ", why);
        out.steps.push_back({absl::StrCat(label_, "bundle ", b, " pinned node"),
                             1,
                             0,
                             {{why, 1}}});
        return out;
      }
      Place(out, b, static_cast<uint32_t>(i), bundles[b].resources);
      done[b] = true;
    }

    switch (request_.strategy) {
      case Strategy::kStrictPack:
        StrictPack(out, bundles, selectors, done);
        break;
      case Strategy::kStrictSpread:
        StrictSpread(out, bundles, selectors, group, done);
        break;
      case Strategy::kPack:
      case Strategy::kSpread:
        PackOrSpread(out, bundles, selectors, group, done);
        break;
    }
    if (out.placed) {
      out.summary = absl::StrCat(
          "placed ", b_count, " bundle", b_count == 1 ? "" : "s", " on ",
          opened_.size(), " node", opened_.size() == 1 ? "" : "s", " (",
          StrategyName(request_.strategy), ")");
    }
    return out;
  }

  void PackOrSpread(Attempt& out, const std::vector<Bundle>& bundles,
                    const std::vector<LabelSelector>& selectors,
                    const std::vector<int>& group, std::vector<bool>& done) {
    const bool pack = request_.strategy == Strategy::kPack;
    size_t round_robin = 0;
    for (size_t b : LargestFirst(bundles)) {
      if (done[b]) continue;
      Group& g = groups_[group[b]];
      const ResourceSet& res = bundles[b].resources;
      int64_t node = -1;
      if (pack) {
        // Nodes this gang already uses, in opening order.
        for (; g.opened_pos < opened_.size(); ++g.opened_pos) {
          const uint32_t i = opened_[g.opened_pos];
          if (InGroup(g, i) && overlay().Fits(i, res)) {
            node = i;
            break;
          }
        }
      }
      if (node < 0) {
        node = BestFit(g, res, /*fresh_only=*/!pack);
      }
      if (node < 0 && !pack) {
        for (size_t k = 0; k < opened_.size() && node < 0; ++k) {
          const uint32_t i = opened_[(round_robin + k) % opened_.size()];
          if (InGroup(g, i) && overlay().Fits(i, res)) {
            node = i;
            round_robin = (round_robin + k + 1) % opened_.size();
          }
        }
      }
      if (node < 0) {
        Fail(out, b, bundles[b], selectors[b], /*distinct=*/false);
        return;
      }
      Place(out, b, static_cast<uint32_t>(node), res);
      done[b] = true;
    }
    out.placed = true;
  }

  void StrictPack(Attempt& out, const std::vector<Bundle>& bundles,
                  const std::vector<LabelSelector>& selectors,
                  std::vector<bool>& done) {
    ResourceSet sum;
    LabelSelector all;
    for (size_t b = 0; b < bundles.size(); ++b) {
      if (done[b]) continue;
      for (const auto& [name, amount] : bundles[b].resources)
        sum[name] += amount;
      all = And(all, &selectors[b]);
    }
    if (sum.empty() && opened_.size() <= 1) {
      out.placed = true;
      return;
    }
    int64_t node = -1;
    if (!opened_.empty()) {
      // Pinned bundles fix the node.
      const uint32_t i = opened_[0];
      if (opened_.size() == 1 && Matches(all, snap_.node(i).node.labels) &&
          overlay().Fits(i, sum)) {
        node = i;
      }
    } else {
      Group& g = groups_[GroupFor(all, KindOf(sum), sum)];
      node = BestFit(g, sum, /*fresh_only=*/false);
    }
    if (node < 0) {
      Bundle gang;
      gang.resources = sum;
      Fail(out, -1, gang, all, /*distinct=*/false);
      if (opened_.size() > 1) {
        out.infeasible = true;
        out.summary = "STRICT_PACK bundles are pinned to different nodes";
      }
      return;
    }
    for (size_t b = 0; b < bundles.size(); ++b) {
      if (done[b]) continue;
      Place(out, b, static_cast<uint32_t>(node), bundles[b].resources);
      done[b] = true;
    }
    out.placed = true;
  }

  void StrictSpread(Attempt& out, const std::vector<Bundle>& bundles,
                    const std::vector<LabelSelector>& selectors,
                    const std::vector<int>& group, std::vector<bool>& done) {
    // Most constrained first: fewest candidate nodes, then bundle order.
    std::vector<int64_t> reach(groups_.size(), -1);
    std::vector<size_t> order;
    for (size_t b = 0; b < bundles.size(); ++b) {
      if (done[b]) continue;
      order.push_back(b);
      if (reach[group[b]] < 0) reach[group[b]] = Reach(groups_[group[b]]);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return reach[group[a]] < reach[group[b]];
    });
    std::vector<size_t> unplaced;
    for (size_t b : order) {
      const int64_t node = BestFit(groups_[group[b]], bundles[b].resources,
                                   /*fresh_only=*/true);
      if (node < 0) {
        unplaced.push_back(b);
        continue;
      }
      Place(out, b, static_cast<uint32_t>(node), bundles[b].resources);
      done[b] = true;
    }
    if (!unplaced.empty() && !Match(out, bundles, group, done)) {
      const size_t b = unplaced[0];
      Fail(out, b, bundles[b], selectors[b], /*distinct=*/true);
      // Infeasible when even an empty cluster lacks distinct nodes.
      absl::flat_hash_set<uint32_t> able;
      std::vector<bool> seen(groups_.size(), false);
      for (size_t k = 0; k < bundles.size(); ++k) {
        if (seen[group[k]]) continue;
        seen[group[k]] = true;
        const Bits& cand = *groups_[group[k]].candidates;
        for (size_t w = 0; w < cand.size(); ++w) {
          for (uint64_t word = cand[w]; word != 0; word &= word - 1) {
            const uint32_t i = (w << 6) + std::countr_zero(word);
            if (FitsTotal(i, bundles[k].resources)) able.insert(i);
          }
        }
      }
      if (able.size() < bundles.size()) {
        out.infeasible = true;
        out.summary = absl::StrCat(
            "STRICT_SPREAD needs ", bundles.size(), " distinct nodes, only ",
            able.size(), " match and are large enough; ", out.summary);
      }
      return;
    }
    out.placed = true;
  }

  // Kuhn's augmenting paths over (bundle, node) edges where the node matches
  // the bundle's selector and has room for it alone. Starts from the greedy
  // assignment in `out`. Returns true when every bundle is matched.
  bool Match(Attempt& out, const std::vector<Bundle>& bundles,
             const std::vector<int>& group, std::vector<bool>& done) {
    Overlay base(snap_, &released_);
    absl::flat_hash_map<uint32_t, int64_t> owner;  // node -> bundle
    absl::flat_hash_set<uint32_t> pinned_nodes;
    std::vector<int64_t> at(bundles.size(), -1);
    for (size_t b = 0; b < bundles.size(); ++b) {
      if (!done[b]) continue;
      at[b] = out.nodes[b];
      owner[out.nodes[b]] = b;
      if (!bundles[b].pinned_node_id.empty()) {
        pinned_nodes.insert(out.nodes[b]);
        base.Take(out.nodes[b], bundles[b].resources);
      }
    }
    int64_t budget = kMatchingBudget;
    absl::flat_hash_set<uint32_t> visited;
    std::function<bool(size_t)> augment = [&](size_t b) -> bool {
      const Group& g = groups_[group[b]];
      Cursor c;
      for (int64_t i = Peek(g, c); i >= 0; ++c.pos, i = Peek(g, c)) {
        if (--budget < 0) return false;
        const uint32_t n = static_cast<uint32_t>(i);
        if (pinned_nodes.contains(n) || visited.contains(n)) continue;
        if (!base.Fits(n, bundles[b].resources)) continue;
        visited.insert(n);
        auto it = owner.find(n);
        if (it == owner.end() || (bundles[it->second].pinned_node_id.empty() &&
                                  augment(it->second))) {
          owner[n] = b;
          at[b] = n;
          return true;
        }
      }
      return false;
    };
    for (size_t b = 0; b < bundles.size(); ++b) {
      if (at[b] >= 0) continue;
      visited.clear();
      if (!augment(b) || budget < 0) return false;
    }
    // Re-derive the placement from the matching.
    overlay_.emplace(snap_, &released_);
    opened_.clear();
    opened_set_.clear();
    for (size_t b = 0; b < bundles.size(); ++b) {
      Place(out, b, static_cast<uint32_t>(at[b]), bundles[b].resources);
      done[b] = true;
    }
    return true;
  }

  // --- Candidates ------------------------------------------------------------
  int GroupFor(const LabelSelector& selector, BundleKind kind,
               const ResourceSet& resources) {
    const std::string sel_key = SelectorToString(selector);
    const std::string key = absl::StrCat(sel_key, "|", static_cast<int>(kind),
                                         "|", ResourcesToString(resources));
    auto it = group_of_.find(key);
    if (it != group_of_.end()) return it->second;
    auto bits = bits_cache_.find(sel_key);
    if (bits == bits_cache_.end()) {
      bits =
          bits_cache_
              .emplace(sel_key,
                       std::make_unique<Bits>(CandidateBits(snap_, selector)))
              .first;
    }
    Group g;
    g.candidates = bits->second.get();
    g.kind = kind;
    groups_.push_back(g);
    group_of_[key] = static_cast<int>(groups_.size() - 1);
    return static_cast<int>(groups_.size() - 1);
  }

  // The candidate at or after g's cursor, in rank order; -1 when exhausted.
  int64_t Peek(const Group& g, Cursor& c) const {
    const size_t words = g.candidates->size();
    while (c.rank < kNumRanks) {
      const CowBitset& ranked = snap_.rank_set(g.kind, c.rank);
      size_t w = c.pos >> 6;
      if (w < words) {
        uint64_t word = ranked.word(w) & (*g.candidates)[w] &
                        (~uint64_t{0} << (c.pos & 63));
        while (true) {
          if (word != 0) {
            c.pos = (w << 6) + std::countr_zero(word);
            return static_cast<int64_t>(c.pos);
          }
          if (++w >= words) break;
          word = ranked.word(w) & (*g.candidates)[w];
        }
      }
      ++c.rank;
      c.pos = 0;
    }
    return -1;
  }

  bool InGroup(const Group& g, uint32_t i) const {
    return TestBit(*g.candidates, i) && snap_.Rank(g.kind, i) < kNumRanks;
  }

  // Best fit among the first kBestFitWindow fitting candidates of the best
  // rank; moves g's cursor to the first fitting one. fresh_only skips nodes
  // this gang already uses. -1 when nothing fits.
  int64_t BestFit(Group& g, const ResourceSet& res, bool fresh_only,
                  int64_t scan_limit = -1) {
    int64_t best = -1;
    int64_t best_score = 0;
    int found = 0;
    int first_rank = -1;
    Cursor scan = g.cursor;
    for (int64_t i = Peek(g, scan); i >= 0; ++scan.pos, i = Peek(g, scan)) {
      if (first_rank >= 0 && scan.rank != first_rank) break;
      if (scan_limit >= 0 && --scan_limit < 0) break;
      const uint32_t n = static_cast<uint32_t>(i);
      if ((fresh_only && opened_set_.contains(n)) || !overlay().Fits(n, res)) {
        // Never fits again in this solve: move the group's cursor past it.
        if (first_rank < 0) g.cursor = Cursor{scan.rank, scan.pos + 1};
        continue;
      }
      if (first_rank < 0) {
        first_rank = scan.rank;
        g.cursor = scan;
      }
      const int64_t score = overlay().Leftover(n, res);
      if (best < 0 || score < best_score) {
        best = i;
        best_score = score;
      }
      if (++found >= kBestFitWindow) break;
    }
    return best;
  }

  // Number of ranked candidates of g (for most-constrained-first ordering).
  int64_t Reach(const Group& g) const {
    int64_t count = 0;
    for (int r = 0; r < kNumRanks; ++r) {
      const CowBitset& ranked = snap_.rank_set(g.kind, r);
      for (size_t w = 0; w < g.candidates->size(); ++w) {
        count += std::popcount(ranked.word(w) & (*g.candidates)[w]);
      }
    }
    return count;
  }

  bool FitsTotal(uint32_t i, const ResourceSet& res) const {
    for (const auto& [name, amount] : res) {
      if (Amount(snap_.node(i).node.resources, name) < amount) return false;
    }
    return true;
  }

  // Bundles largest first: TPU, then CPU, then memory, then bundle order.
  static std::vector<size_t> LargestFirst(const std::vector<Bundle>& bundles) {
    static const std::string cpu(kResourceCpu), memory(kResourceMemory);
    std::vector<std::tuple<int64_t, int64_t, int64_t>> size(bundles.size());
    std::vector<size_t> order(bundles.size());
    for (size_t b = 0; b < order.size(); ++b) {
      order[b] = b;
      const ResourceSet& r = bundles[b].resources;
      size[b] = {Amount(r, TpuName()), Amount(r, cpu), Amount(r, memory)};
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return size[a] > size[b]; });
    return order;
  }

  void Place(Attempt& out, size_t b, uint32_t node, const ResourceSet& res) {
    out.nodes[b] = node;
    overlay().Take(node, res);
    if (opened_set_.insert(node).second) opened_.push_back(node);
  }

  Overlay& overlay() {
    if (!overlay_.has_value()) overlay_.emplace(snap_, &released_);
    return *overlay_;
  }

  // Explains why bundle b (or the summed gang when b < 0) fits nowhere.
  // Slow path only: O(n / 64) for the selector, then one look at every node
  // that matches it.
  void Fail(Attempt& out, int64_t b, const Bundle& bundle,
            const LabelSelector& selector, bool distinct) {
    DiagnosisStep step;
    step.step = absl::StrCat(
        label_,
        b < 0 ? std::string("gang (STRICT_PACK)") : absl::StrCat("bundle ", b),
        " ", ResourcesToString(bundle.resources),
        selector.empty() ? "" : " on ",
        selector.empty() ? "" : SelectorToString(selector));
    const Bits candidates = CandidateBits(snap_, selector);
    std::vector<const std::string*> names;
    std::vector<int64_t> amounts;
    for (const auto& [name, amount] : bundle.resources) {
      names.push_back(&name);
      amounts.push_back(amount);
    }
    std::vector<int64_t> short_total(names.size()), short_free(names.size());
    int64_t matched = 0, dead = 0, draining = 0, in_gang = 0;
    for (size_t w = 0; w < candidates.size(); ++w) {
      for (uint64_t word = candidates[w]; word != 0; word &= word - 1) {
        const uint32_t i = (w << 6) + std::countr_zero(word);
        const InventorySnapshot::NodeEntry& e = snap_.node(i);
        ++matched;
        size_t r = 0;
        while (r < names.size() &&
               Amount(e.node.resources, *names[r]) >= amounts[r])
          ++r;
        if (r < names.size()) {
          ++short_total[r];
          continue;
        }
        if (e.node.state == NodeState::kDead) {
          ++dead;
          continue;
        }
        if (e.node.state == NodeState::kDraining) {
          ++draining;
          continue;
        }
        r = 0;
        while (
            r < names.size() &&
            (amounts[r] <= 0 || overlay().Free(i, *names[r]) >= amounts[r])) {
          ++r;
        }
        if (r < names.size()) {
          ++short_free[r];
          continue;
        }
        if (distinct && opened_set_.contains(i)) {
          ++in_gang;
          continue;
        }
        ++step.accepted;
      }
    }
    step.considered = static_cast<int64_t>(snap_.num_nodes());
    Tally tally;
    tally.Add("selector mismatch", step.considered - matched);
    for (size_t r = 0; r < names.size(); ++r) {
      tally.Add(absl::StrCat("insufficient total ", *names[r]), short_total[r]);
    }
    tally.Add("DEAD", dead);
    tally.Add("DRAINING", draining);
    for (size_t r = 0; r < names.size(); ++r) {
      tally.Add(absl::StrCat("insufficient free ", *names[r]), short_free[r]);
    }
    tally.Add("already used by this gang", in_gang);
    step.rejected = tally.Take();
    int64_t ever = matched;
    for (int64_t n : short_total) ever -= n;
    out.infeasible = out.infeasible || ever == 0;
    const std::string detail = JoinRejections(step.rejected);
    out.summary = absl::StrCat(
        step.step.substr(label_.size()), ": ", step.accepted, "/",
        step.considered, " nodes fit", detail.empty() ? "" : ": ", detail);
    out.steps.push_back(std::move(step));
  }

  const InventorySnapshot& snap_;
  const PlacementRequest& request_;
  absl::flat_hash_map<uint32_t, ResourceSet> released_;
  std::string label_;
  std::optional<Overlay> overlay_;
  std::vector<Group> groups_;
  absl::flat_hash_map<std::string, int> group_of_;
  absl::flat_hash_map<std::string, std::unique_ptr<Bits>> bits_cache_;
  std::vector<uint32_t> opened_;  // gang nodes in opening order
  absl::flat_hash_set<uint32_t> opened_set_;
};

absl::Status ValidateBundles(const std::vector<Bundle>& bundles,
                             absl::string_view field, bool slice) {
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (!slice && bundles[b].resources.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", b, "].resources: must not be empty"));
    }
    for (const auto& [name, amount] : bundles[b].resources) {
      if (amount < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", b, "].resources[", name, "]: must be >= 0"));
      }
    }
    if (slice && !bundles[b].pinned_node_id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", b,
          "].pinned_node_id: not allowed with a slice requirement (slices are "
          "re-placed whole)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kPack:
      return "PACK";
    case Strategy::kSpread:
      return "SPREAD";
    case Strategy::kStrictPack:
      return "STRICT_PACK";
    case Strategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "UNKNOWN";
}

absl::string_view OutcomeName(Decision::Outcome outcome) {
  switch (outcome) {
    case Decision::kPlaced:
      return "PLACED";
    case Decision::kUnschedulable:
      return "UNSCHEDULABLE";
    case Decision::kInfeasible:
      return "INFEASIBLE";
  }
  return "UNKNOWN";
}

absl::Status ValidateRequest(const PlacementRequest& request) {
  const bool slice = request.slice.has_value();
  if (!slice && request.bundles.empty()) {
    return absl::InvalidArgumentError(
        "bundles: at least one bundle is required");
  }
  absl::Status s = ValidateBundles(request.bundles, "bundles", slice);
  if (!s.ok()) return s;
  for (size_t f = 0; f < request.fallbacks.size(); ++f) {
    const std::string field = absl::StrCat("fallbacks[", f, "]");
    if (!slice && request.fallbacks[f].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": at least one bundle is required"));
    }
    s = ValidateBundles(request.fallbacks[f], field, slice);
    if (!s.ok()) return s;
  }
  if (slice) {
    const SliceRequirement& req = *request.slice;
    if (req.num_slices < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice.num_slices: must be >= 1, got ", req.num_slices));
    }
    auto shape = ResolveTpuShape(req.generation, req.topology);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice.topology: ", shape.status().message()));
    }
    const int64_t want = shape->hosts * req.num_slices;
    auto check_count = [&](const std::vector<Bundle>& list,
                           const std::string& field) -> absl::Status {
      if (list.empty() || static_cast<int64_t>(list.size()) == want) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a slice requirement of ", req.num_slices,
                       " x ", shape->pod_type, " needs one bundle per host (",
                       want, "), got ", list.size()));
    };
    s = check_count(request.bundles, "bundles");
    if (!s.ok()) return s;
    for (size_t f = 0; f < request.fallbacks.size(); ++f) {
      s = check_count(request.fallbacks[f], absl::StrCat("fallbacks[", f, "]"));
      if (!s.ok()) return s;
    }
    for (const auto& [name, amount] : req.resources_per_host) {
      if (amount < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("slice.resources_per_host[", name, "]: must be >= 0"));
      }
    }
  }
  return absl::OkStatus();
}

Decision Solve(const InventorySnapshot& snapshot,
               const PlacementRequest& request) {
  Decision decision;
  absl::Status valid = ValidateRequest(request);
  if (!valid.ok()) {
    decision.outcome = Decision::kInfeasible;
    decision.diagnosis.summary =
        absl::StrCat("invalid request: ", valid.message());
    return decision;
  }
  SolveRun run(snapshot, request);
  const int lists = 1 + static_cast<int>(request.fallbacks.size());
  const int priorities = std::max<int>(1, request.priorities.size());
  bool all_infeasible = true;
  std::vector<std::string> summaries;
  for (int f = 0; f < lists; ++f) {
    const std::vector<Bundle>& bundles =
        f == 0 ? request.bundles : request.fallbacks[f - 1];
    for (int p = 0; p < priorities; ++p) {
      const LabelSelector* priority =
          request.priorities.empty() ? nullptr : &request.priorities[p];
      std::string label;
      if (lists > 1)
        absl::StrAppend(&label,
                        f == 0 ? "primary" : absl::StrCat("fallback ", f - 1));
      if (priority != nullptr) {
        absl::StrAppend(&label, label.empty() ? "" : ", ", "priority ", p, " ",
                        SelectorToString(*priority));
      }
      if (!label.empty()) label += ": ";
      Attempt attempt = run.Run(bundles, priority, label);
      for (DiagnosisStep& step : attempt.steps) {
        decision.diagnosis.steps.push_back(std::move(step));
      }
      if (attempt.placed) {
        decision.outcome = Decision::kPlaced;
        decision.fallback_index = f - 1;
        decision.priority_index = priority == nullptr ? -1 : p;
        decision.bundle_nodes.reserve(attempt.nodes.size());
        for (uint32_t i : attempt.nodes) {
          decision.bundle_nodes.push_back(snapshot.node(i).node.node_id);
        }
        decision.slice_names = std::move(attempt.slices);
        decision.diagnosis.summary = label + attempt.summary;
        return decision;
      }
      all_infeasible = all_infeasible && attempt.infeasible;
      summaries.push_back(label + attempt.summary);
    }
  }
  decision.outcome =
      all_infeasible ? Decision::kInfeasible : Decision::kUnschedulable;
  decision.diagnosis.summary = absl::StrJoin(summaries, " | ");
  return decision;
}

}  // namespace sliced::scheduler
