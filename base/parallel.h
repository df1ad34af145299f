// ParallelChunks: a loop over [0, n) split into chunks that threads take in
// turn, the calling thread among them. For the start-up work that runs once
// over every record, node or slice (storage/records.cc, the snapshot's full
// build), not for the serving path.
//
// Thread-safe as `body` is: chunks never overlap.
#ifndef SLICED_BASE_PARALLEL_H_
#define SLICED_BASE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace sliced {

// Threads for start-up work: one per core, at least 2 (a second thread
// overlaps the first one's page faults and allocator locks even on one core).
inline int StartupThreads() {
  return static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
}

// Calls body(begin, end) for consecutive chunks of at most `chunk` (> 0)
// indexes covering [0, n), on up to `threads` threads (<= 0: StartupThreads())
// including the caller's; returns when every chunk has run.
inline void ParallelChunks(size_t n, size_t chunk, int threads,
                           absl::FunctionRef<void(size_t, size_t)> body) {
  const size_t chunks = (n + chunk - 1) / chunk;
  if (threads <= 0) threads = StartupThreads();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks;) {
      body(c * chunk, std::min(n, (c + 1) * chunk));
    }
  };
  std::vector<std::thread> helpers;
  const size_t extra = std::min<size_t>(threads, chunks);
  for (size_t t = 1; t < extra; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
}

}  // namespace sliced

#endif  // SLICED_BASE_PARALLEL_H_
