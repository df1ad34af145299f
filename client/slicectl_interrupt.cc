#include "client/slicectl_interrupt.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

namespace sliced::slicectl {
namespace {

// The write end of the live handler's pipe; the signal handler may only make
// async-signal-safe calls, so it forwards the signal number as one byte.
int g_signal_pipe = -1;

extern "C" void ForwardSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  const ssize_t written = write(g_signal_pipe, &byte, 1);
  (void)written;
}

}  // namespace

InterruptHandler::InterruptHandler(std::function<void(int)> on_interrupt)
    : on_interrupt_(std::move(on_interrupt)) {
  if (pipe(pipe_) != 0) return;  // no pipe: signals keep their defaults
  g_signal_pipe = pipe_[1];
  struct sigaction action = {};
  action.sa_handler = ForwardSignal;
  sigemptyset(&action.sa_mask);
  // A signal the parent left ignored stays ignored, as a shell leaves
  // SIGINT ignored for a job it starts in the background (and Python keeps
  // it so): that Ctrl-C was not meant for this process.
  for (auto [signal_number, old] :
       {std::pair{SIGINT, &old_int_}, std::pair{SIGTERM, &old_term_}}) {
    sigaction(signal_number, nullptr, old);
    if (old->sa_handler != SIG_IGN) sigaction(signal_number, &action, nullptr);
  }
  thread_ = std::thread([this] { Loop(); });
}

InterruptHandler::~InterruptHandler() {
  if (!thread_.joinable()) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  const unsigned char stop = 0;
  const ssize_t written = write(pipe_[1], &stop, 1);
  (void)written;
  thread_.join();
  g_signal_pipe = -1;
  close(pipe_[0]);
  close(pipe_[1]);
}

void InterruptHandler::Loop() {
  unsigned char byte = 0;
  ssize_t n;
  do {
    n = read(pipe_[0], &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1 || byte == 0) return;  // stopped by the destructor
  on_interrupt_(byte);
  std::fflush(nullptr);
  _exit(128 + byte);
}

}  // namespace sliced::slicectl
