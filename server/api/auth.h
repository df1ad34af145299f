// Bearer-token authentication and role checks (DESIGN §6).
//
// Tokens come from a file (`--auth_tokens`), one per line:
//     <token> <role> [<node_id>]      # comments and blank lines allowed
// with role admin, scheduler, agent or viewer; an agent token names the one
// node it speaks for. Clients send `authorization: Bearer <token>`.
//
// Which RPC needs which access is the table in server/api/gate.h.
//
// Thread-safe: the table is swapped atomically on Reload (SIGHUP).
#ifndef SLICED_SERVER_API_AUTH_H_
#define SLICED_SERVER_API_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"

namespace sliced::server::api {

enum class Role { kAdmin, kScheduler, kAgent, kViewer };

struct Principal {
  Role role = Role::kViewer;
  std::string node_id;  // agents only
};

// What an RPC needs.
enum class Access {
  kRead,       // any role
  kInventory,  // admin
  kPlacement,  // scheduler
  kNodeAgent,  // agent (for its own node) or admin (any node)
};

class Authenticator {
 public:
  // Loads the token file. InvalidArgument names the line and what is wrong
  // (unknown role, token shorter than 16 characters, agent without node id,
  // duplicate token); NotFound when the file can't be read.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Load(
      const std::string& path);

  // Re-reads the file; on error keeps the current table and returns why.
  absl::Status Reload();

  // Checks the call's bearer token and role. `node_ids` are the nodes a
  // kNodeAgent call speaks for. Returns Unauthenticated (no or unknown
  // token) or PermissionDenied (wrong role, another node's id).
  absl::Status Check(const grpc::ServerContextBase& context, Access access,
                     const std::vector<std::string>& node_ids = {}) const;

  size_t size() const;

 private:
  using Table = absl::flat_hash_map<std::string, Principal>;
  static absl::StatusOr<Table> Parse(const std::string& path);
  explicit Authenticator(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Table> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_AUTH_H_
