// InterruptHandler: what slicectl does on Ctrl-C while it waits. While one is
// alive, SIGINT or SIGTERM runs its callback on a thread of its own (so the
// callback may make gRPC calls while the main thread is blocked in a watch),
// then ends the process with exit code 128 + the signal number. A second
// signal during the callback is ignored, and so is a signal that was ignored
// when the handler was created (a background job's SIGINT).
//
// Not thread-safe: create and destroy it on one thread, one at a time. The
// callback runs on the handler's thread.
#ifndef SLICED_CLIENT_SLICECTL_INTERRUPT_H_
#define SLICED_CLIENT_SLICECTL_INTERRUPT_H_

#include <signal.h>

#include <functional>
#include <thread>

namespace sliced::slicectl {

class InterruptHandler {
 public:
  // `on_interrupt(signal_number)` runs once, on the first SIGINT / SIGTERM.
  explicit InterruptHandler(std::function<void(int)> on_interrupt);
  // Restores the previous signal dispositions.
  ~InterruptHandler();

  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

 private:
  void Loop();

  std::function<void(int)> on_interrupt_;
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ = {};
  struct sigaction old_term_ = {};
  std::thread thread_;
};

}  // namespace sliced::slicectl

#endif  // SLICED_CLIENT_SLICECTL_INTERRUPT_H_
