// FlatMap: an ordered map kept as one sorted vector of (key, value) pairs.
//
// For the small maps every node carries (its ~10 labels, its ~4 resources):
// one allocation holding its entries, where a btree_map spends a 256-byte
// node per three labels (docs/engine.md, "Memory"). Lookups scan a small
// map (up to 16 entries) and binary-search a larger one; an insert or erase
// moves the entries after it, so keep these maps small.
//
// The interface is the part of std::map / absl::btree_map this codebase
// uses, with the same meaning: iteration in key order, find / contains /
// count / at taking any type comparable with the key (absl::string_view
// for std::string keys), operator[], insert / emplace / try_emplace keep an
// existing entry, insert_or_assign replaces it, erase by key or iterator.
// Differences: entries are `std::pair<K, V>` (the key is not const: do not
// change it through an iterator), and any insert or erase invalidates every
// iterator and reference.
//
// Not thread-safe; a plain value type.
#ifndef SLICED_BASE_FLAT_MAP_H_
#define SLICED_BASE_FLAT_MAP_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sliced {

template <typename K, typename V>
class FlatMap {
 public:
  using key_type = K;
  using mapped_type = V;
  using value_type = std::pair<K, V>;
  using size_type = size_t;
  using iterator = typename std::vector<value_type>::iterator;
  using const_iterator = typename std::vector<value_type>::const_iterator;

  FlatMap() = default;
  FlatMap(std::initializer_list<value_type> entries)
      : FlatMap(entries.begin(), entries.end()) {}
  // The first entry of each key wins, as for std::map's range constructor.
  template <typename It>
  FlatMap(It first, It last) {
    insert(first, last);
  }

  // Takes `entries` as the map's storage, sorted stably by key; of equal
  // keys the last one stays, as when protobuf parses a map field (the
  // store's load moves a record's labels in this way, copying nothing).
  static FlatMap FromUnsorted(std::vector<value_type> entries) {
    SortStably(entries.data(), entries.size(), 0, ByKey);
    // Keep the last of each run of equal keys.
    auto out = entries.begin();
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (std::next(it) != entries.end() && !(it->first < std::next(it)->first)) {
        continue;
      }
      if (out != it) *out = std::move(*it);
      ++out;
    }
    entries.erase(out, entries.end());
    FlatMap map;
    map.entries_ = std::move(entries);
    return map;
  }

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  const_iterator cbegin() const { return entries_.cbegin(); }
  const_iterator cend() const { return entries_.cend(); }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void clear() { entries_.clear(); }

  template <typename Key>
  iterator lower_bound(const Key& key) {
    return std::lower_bound(entries_.begin(), entries_.end(), key, Less());
  }
  template <typename Key>
  const_iterator lower_bound(const Key& key) const {
    return std::lower_bound(entries_.begin(), entries_.end(), key, Less());
  }
  // A small map is scanned for an equal key (a length check rules out most
  // entries without touching their characters); a larger one is searched.
  template <typename Key>
  iterator find(const Key& key) {
    return begin() + (std::as_const(*this).find(key) - cbegin());
  }
  template <typename Key>
  const_iterator find(const Key& key) const {
    if (entries_.size() <= kScanBelow) {
      for (const_iterator it = begin(); it != end(); ++it) {
        if (it->first == key) return it;
      }
      return end();
    }
    const_iterator it = lower_bound(key);
    return it != end() && !(key < it->first) ? it : end();
  }
  template <typename Key>
  bool contains(const Key& key) const {
    return find(key) != end();
  }
  template <typename Key>
  size_t count(const Key& key) const {
    return contains(key) ? 1 : 0;
  }
  // Throws std::out_of_range when absent, as std::map does.
  template <typename Key>
  const V& at(const Key& key) const {
    const_iterator it = find(key);
    if (it == end()) throw std::out_of_range("FlatMap::at: no such key");
    return it->second;
  }
  template <typename Key>
  V& at(const Key& key) {
    iterator it = find(key);
    if (it == end()) throw std::out_of_range("FlatMap::at: no such key");
    return it->second;
  }

  template <typename Key>
  V& operator[](Key&& key) {
    return try_emplace(std::forward<Key>(key)).first->second;
  }
  template <typename Key, typename... Args>
  std::pair<iterator, bool> try_emplace(Key&& key, Args&&... args) {
    iterator it = lower_bound(key);
    if (it != end() && !(key < it->first)) return {it, false};
    it = entries_.emplace(it, std::piecewise_construct,
                          std::forward_as_tuple(K(std::forward<Key>(key))),
                          std::forward_as_tuple(std::forward<Args>(args)...));
    return {it, true};
  }
  template <typename Key, typename Value>
  std::pair<iterator, bool> emplace(Key&& key, Value&& value) {
    return try_emplace(std::forward<Key>(key), std::forward<Value>(value));
  }
  std::pair<iterator, bool> insert(const value_type& entry) {
    return try_emplace(entry.first, entry.second);
  }
  std::pair<iterator, bool> insert(value_type&& entry) {
    return try_emplace(std::move(entry.first), std::move(entry.second));
  }
  // Entries already present win, then the first of each new key: the
  // range is appended, then sorted stably (small maps by an insertion sort,
  // which allocates nothing).
  template <typename It>
  void insert(It first, It last) {
    if constexpr (std::is_base_of_v<
                      std::forward_iterator_tag,
                      typename std::iterator_traits<It>::iterator_category>) {
      if (entries_.empty()) return Assign(first, last);
      entries_.reserve(entries_.size() + std::distance(first, last));
    }
    const size_t sorted = entries_.size();
    for (; first != last; ++first) entries_.emplace_back(*first);
    SortStably(entries_.data(), entries_.size(), sorted, ByKey);
    entries_.erase(std::unique(entries_.begin(), entries_.end(),
                               [](const value_type& a, const value_type& b) {
                                 return a.first == b.first;
                               }),
                   entries_.end());
  }

  template <typename Key, typename Value>
  std::pair<iterator, bool> insert_or_assign(Key&& key, Value&& value) {
    auto [it, inserted] = try_emplace(std::forward<Key>(key));
    it->second = std::forward<Value>(value);
    return {it, inserted};
  }

  iterator erase(iterator pos) { return entries_.erase(pos); }
  iterator erase(const_iterator pos) { return entries_.erase(pos); }
  iterator erase(const_iterator first, const_iterator last) {
    return entries_.erase(first, last);
  }
  template <typename Key>
  size_t erase(const Key& key) {
    const_iterator it = std::as_const(*this).find(key);
    if (it == end()) return 0;
    entries_.erase(it);
    return 1;
  }

  // Erases the entries for which `pred(entry)` holds; returns how many.
  template <typename Pred>
  friend size_t erase_if(FlatMap& map, Pred pred) {
    auto first = std::remove_if(map.entries_.begin(), map.entries_.end(), pred);
    const size_t n = map.entries_.end() - first;
    map.entries_.erase(first, map.entries_.end());
    return n;
  }

  // Releases spare capacity (after a map is built by inserts).
  void shrink_to_fit() { entries_.shrink_to_fit(); }

  friend bool operator==(const FlatMap& a, const FlatMap& b) {
    return a.entries_ == b.entries_;
  }
  friend bool operator<(const FlatMap& a, const FlatMap& b) {
    return a.entries_ < b.entries_;
  }

 private:
  static constexpr size_t kScanBelow = 16;

  struct Less {
    template <typename Key>
    bool operator()(const value_type& entry, const Key& key) const {
      return entry.first < key;
    }
  };

  static bool ByKey(const value_type& a, const value_type& b) {
    return a.first < b.first;
  }

  // Sorts [first, first + n) stably by `less`; [first, first + from) is
  // sorted already. A small map by an insertion sort, which allocates
  // nothing; a larger one by std::stable_sort, so that the cost is not
  // quadratic in what a caller sends (a request's map is converted before
  // its size is validated).
  template <typename T, typename Less>
  static void SortStably(T* first, size_t n, size_t from, Less less) {
    if (n > kScanBelow) {
      std::stable_sort(first, first + n, less);
      return;
    }
    for (size_t i = std::max<size_t>(from, 1); i < n; ++i) {
      T moving = std::move(first[i]);
      size_t j = i;
      for (; j > 0 && less(moving, first[j - 1]); --j) {
        first[j] = std::move(first[j - 1]);
      }
      first[j] = std::move(moving);
    }
  }

  // insert(first, last) into an empty map, the common case (a map converted
  // from another): the source's entries are ordered by reference, then each
  // is copied once, in place (a node's labels on every restart and
  // registration).
  template <typename It>
  void Assign(It first, It last) {
    const size_t n = std::distance(first, last);
    std::array<It, kScanBelow> few;
    std::vector<It> many;
    It* order = few.data();
    if (n > kScanBelow) {
      many.resize(n);
      order = many.data();
    }
    for (size_t i = 0; i < n; ++i, ++first) order[i] = first;
    SortStably(order, n, 0,
               [](const It& a, const It& b) { return a->first < b->first; });
    entries_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      // Equal keys sit together, the first of them first.
      if (i > 0 && !(order[i - 1]->first < order[i]->first)) continue;
      entries_.emplace_back(std::piecewise_construct,
                            std::forward_as_tuple(order[i]->first),
                            std::forward_as_tuple(order[i]->second));
    }
  }

  std::vector<value_type> entries_;
};

}  // namespace sliced

#endif  // SLICED_BASE_FLAT_MAP_H_
