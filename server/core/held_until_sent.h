// What a new reader gets after its first batch (a watch's current state, a
// followed tail's stored lines), which is sent once the writer's lock is
// released: the changes installed meanwhile, held in order, bounded in
// bytes. The bound is the owner's limit plus what the reader has been sent
// of its first batch so far (Allow): changes may pile up as fast as the
// first batch goes out, so a reader opened during a burst of commits is
// not ended for the burst, while one whose first batch stalls still is.
// That holds at most about the first batch's size again, which the
// reader's queue already holds. Used by WatchHub and LogStore.
//
// Not thread-safe: its owner's lock guards it.
#ifndef SLICED_SERVER_CORE_HELD_UNTIL_SENT_H_
#define SLICED_SERVER_CORE_HELD_UNTIL_SENT_H_

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace sliced::server {

template <typename T>
class HeldUntilSent {
 public:
  // Holds `item` (`bytes` of it). False the one time the held bytes pass
  // `max_bytes` plus what Allow() granted: the owner ends the reader then
  // (it fell behind), and from then on nothing is held.
  bool Hold(const T& item, size_t bytes, size_t max_bytes) {
    if (overflowed_) return true;
    bytes_ += bytes;
    if (bytes_ > max_bytes + allowed_) {
      overflowed_ = true;
      items_.clear();
      return false;
    }
    items_.push_back(item);
    return true;
  }
  // Raises the bound by `bytes` of the first batch, sent.
  void Allow(size_t bytes) { allowed_ += bytes; }
  // The bound past `max_bytes` so far.
  size_t allowed() const { return allowed_; }
  // In the order held; empty once the bound was passed.
  const std::vector<T>& items() const { return items_; }

 private:
  std::vector<T> items_;
  size_t bytes_ = 0;
  size_t allowed_ = 0;
  bool overflowed_ = false;
};

// Counts a first batch's bytes as they are sent, for its owner to Allow()
// under its lock in steps (of 64 KiB, or of the owner's limit when that is
// less), not once per item.
class SentInSteps {
 public:
  explicit SentInSteps(size_t max_bytes)
      : step_(std::max<size_t>(1, std::min<size_t>(64 << 10, max_bytes))) {}
  // Counts `bytes` sent. Returns what to Allow() now: all that is not
  // allowed yet once it reaches a step, else 0.
  size_t Sent(size_t bytes) {
    unallowed_ += bytes;
    return unallowed_ < step_ ? 0 : std::exchange(unallowed_, 0);
  }

 private:
  const size_t step_;
  size_t unallowed_ = 0;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_HELD_UNTIL_SENT_H_
