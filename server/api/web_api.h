// The web view's read-only JSON API (`GET /api/v1/...`, docs/ui.md): each
// endpoint reads the core (the same managers the gRPC services call, and
// server/core/fleet_view.h for the aggregated map and the queue page),
// fills a message of proto/sliced/v1/web.proto or sliced.proto and prints
// it as JSON with the proto field names. Knows nothing of HTTP beyond a
// status code: server/api/http_server.h serves it.
//
//   GET summary                        GetClusterSummaryResponse
//   GET slice_groups                   ListSliceGroupsResponse
//   GET slices?accelerator_type=&topology=&tier=&zone=&status=
//              &page_size=&page_token= ListSliceMapResponse (<= 500 a page)
//   GET queue?offset=&page_size=&explain=
//                                      ListQueueResponse (<= 200 a page);
//                                      each group's reason is the engine's
//                                      diagnosis at its last try;
//                                      explain=true re-runs Explain for each
//                                      (a solve each: ms at 100k nodes)
//   GET placement_groups/<id>          PlacementGroupDetail
//   GET nodes/<id>                     NodeDetail (telemetry series, logs)
//
// Thread-safe.
#ifndef SLICED_SERVER_API_WEB_API_H_
#define SLICED_SERVER_API_WEB_API_H_

#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/cluster.h"
#include "server/core/coordinator.h"
#include "server/core/node_manager.h"
#include "server/core/placement_manager.h"
#include "server/core/telemetry_manager.h"

namespace sliced::server::api {

struct WebReply {
  int http_status = 200;
  std::string body;  // JSON
};

// The HTTP status of an absl::Status (OK 200, InvalidArgument 400,
// Unauthenticated 401, PermissionDenied 403, NotFound 404, Unavailable 503,
// others 500), and the JSON error body {"code": "NOT_FOUND", "message": ...}.
WebReply ErrorReply(const absl::Status& status);

class WebApi {
 public:
  struct Options {
    int default_page_size = 50;
    int max_slice_page_size = 500;
    int max_queue_page_size = 200;
    int recent_log_lines = 30;
    // summary and slice_groups are whole-fleet passes (hundreds of ms at
    // 100k nodes): one answer serves every page that polls within this
    // long. Zero: no cache. Default 2 s (pages poll every 3 s).
    absl::Duration cache_for = absl::Seconds(2);
  };
  // REQUIRES: every pointer outlives the API.
  WebApi(const Cluster* cluster, const Coordinator* clock,
         const NodeManager* nodes, const PlacementManager* placement,
         const TelemetryManager* telemetry, Options options);
  WebApi(const Cluster* cluster, const Coordinator* clock,
         const NodeManager* nodes, const PlacementManager* placement,
         const TelemetryManager* telemetry)
      : WebApi(cluster, clock, nodes, placement, telemetry, Options()) {}

  // `path` is what follows "/api/v1/"; `params` the decoded query.
  WebReply Get(absl::string_view path,
               const std::map<std::string, std::string>& params) const;

 private:
  using Params = std::map<std::string, std::string>;
  absl::StatusOr<std::string> Summary() const;
  absl::StatusOr<std::string> SliceGroups() const;
  absl::StatusOr<std::string> Slices(const Params& params) const;
  absl::StatusOr<std::string> Queue(const Params& params) const;
  absl::StatusOr<std::string> Group(const std::string& id) const;
  absl::StatusOr<std::string> Node(const std::string& id) const;

  // The cached answer of a whole-fleet endpoint, or `compute()`'s (cached
  // when OK).
  absl::StatusOr<std::string> Cached(
      const std::string& path,
      const std::function<absl::StatusOr<std::string>()>& compute) const;

  const Cluster* const cluster_;
  const Coordinator* const clock_;
  const NodeManager* const nodes_;
  const PlacementManager* const placement_;
  const TelemetryManager* const telemetry_;
  const Options options_;

  struct CacheEntry {
    absl::Time time;
    std::string json;
  };
  mutable absl::Mutex cache_mu_;
  mutable std::map<std::string, CacheEntry> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_WEB_API_H_
