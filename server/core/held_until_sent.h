// What a new reader gets after its first batch (a watch's current state, a
// followed tail's stored lines), which is sent once the writer's lock is
// released: the changes installed meanwhile, held in order, bounded in
// bytes. Used by WatchHub and LogStore.
//
// Not thread-safe: its owner's lock guards it.
#ifndef SLICED_SERVER_CORE_HELD_UNTIL_SENT_H_
#define SLICED_SERVER_CORE_HELD_UNTIL_SENT_H_

#include <cstddef>
#include <vector>

namespace sliced::server {

template <typename T>
class HeldUntilSent {
 public:
  // Holds `item` (`bytes` of it). False the one time the held bytes pass
  // `max_bytes`: the owner ends the reader then (it fell behind), and from
  // then on nothing is held.
  bool Hold(const T& item, size_t bytes, size_t max_bytes) {
    if (overflowed_) return true;
    bytes_ += bytes;
    if (bytes_ > max_bytes) {
      overflowed_ = true;
      items_.clear();
      return false;
    }
    items_.push_back(item);
    return true;
  }
  // In the order held; empty once the bound was passed.
  const std::vector<T>& items() const { return items_; }

 private:
  std::vector<T> items_;
  size_t bytes_ = 0;
  bool overflowed_ = false;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_HELD_UNTIL_SENT_H_
