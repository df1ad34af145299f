// Size limits on requests; documented in docs/api.md. Plain values.
#ifndef SLICED_SERVER_CORE_LIMITS_H_
#define SLICED_SERVER_CORE_LIMITS_H_

#include <cstdint>

namespace sliced::server {

struct Limits {
  // Largest request message accepted by the gRPC server.
  int max_message_bytes = 16 << 20;
  // Nodes in one RegisterNodes or Heartbeat batch.
  int max_nodes_per_batch = 1000;
  // Labels on one node (after GKE translation adds its derived labels).
  int max_labels_per_node = 64;
  // Distinct resource names on one node or bundle.
  int max_resources_per_node = 64;
  // Length of node ids and resource names.
  int max_id_length = 128;
  // Bundles in one placement group (each fallback list too).
  int max_bundles_per_pg = 10000;
  // Fallback bundle lists of one placement group.
  int max_fallback_lists = 16;
  // Keys of one label selector (a bundle's, a compute-class priority's),
  // and values of one in(...).
  int max_selector_keys = 64;
  int max_selector_values = 256;
  // Slices in one slice requirement.
  int max_slices_per_pg = 1024;
  // job_id, name, request_id, compute-class names.
  int max_name_length = 256;
  // Placement groups waiting in the queue; a create that would wait beyond
  // this is RESOURCE_EXHAUSTED.
  int max_pending_pgs = 100000;
  // Open WatchPlacementGroups + TailLogs streams; more are RESOURCE_EXHAUSTED.
  int max_streams = 1000;
  // Bytes a WatchPlacementGroups (or TailLogs) stream may hold for a client
  // that reads too slowly (past the size of the current state or stored
  // lines it sent first), and of the changes held while those are built
  // (past what is built); beyond, it ends ABORTED and the client watches
  // again.
  int max_watch_buffer_bytes = 4 << 20;
  // Page size of ListNodes: default and maximum.
  int default_page_size = 500;
  int max_page_size = 5000;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_LIMITS_H_
