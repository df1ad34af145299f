// Open WatchPlacementGroups streams for sliced_load (issue 17, item 5): many
// watchers on one connection, each reading and discarding its events on
// gRPC's callback API (no thread per stream), as Ray job drivers holding a
// watch would.
//
// Thread-safe; the destructor cancels every stream and waits for them.
#ifndef SLICED_BENCH_LOAD_WATCHERS_H_
#define SLICED_BENCH_LOAD_WATCHERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::bench {

class Watchers {
 public:
  // Opens `n` streams; stream i watches job `job_of(i)` ("" for every
  // group).
  Watchers(const std::shared_ptr<grpc::Channel>& channel, int n,
           const std::function<std::string(int)>& job_of);
  ~Watchers();
  Watchers(const Watchers&) = delete;
  Watchers& operator=(const Watchers&) = delete;

  // Events read so far, over all streams.
  int64_t events() const { return events_.load(); }
  // Streams that ended (the server closed them) before the destructor.
  int64_t ended() const { return ended_.load(); }

 private:
  class Stream;
  std::unique_ptr<v1::Placement::Stub> stub_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::atomic<int64_t> events_{0};
  std::atomic<int64_t> ended_{0};
};

}  // namespace sliced::bench

#endif  // SLICED_BENCH_LOAD_WATCHERS_H_
