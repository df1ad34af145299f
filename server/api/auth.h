// Bearer-token authentication and role checks (DESIGN §6).
//
// Tokens come from a file (`--auth_tokens`), one per line:
//     <token> <role> [<node_id>]      # comments and blank lines allowed
// with role admin, scheduler, agent or viewer; an agent token names the one
// node it speaks for. Clients send `authorization: Bearer <token>`.
//
// Per-node agent tokens without a file line each (100k hosts): with
// `--agent_token_secret_file`, a token `<node_id>.<hex HMAC-SHA256(secret,
// node_id)>` is an agent token for <node_id> (the secret is the file's
// content without surrounding whitespace, at least 32 bytes). Mint one with
//     printf %s "$NODE" | openssl dgst -sha256 -hmac "$(cat secret)" -r
// (docs/agent.md). Verified with OpenSSL's HMAC in constant time.
//
// Which RPC needs which access is the table in server/api/gate.h.
//
// Thread-safe: the table and secret are swapped atomically on Reload
// (SIGHUP).
#ifndef SLICED_SERVER_API_AUTH_H_
#define SLICED_SERVER_API_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

// The per-node agent token for `node_id`: "<node_id>.<hex HMAC-SHA256>".
std::string AgentToken(absl::string_view secret, absl::string_view node_id);

class Authenticator {
 public:
  // Loads the token file and/or the agent-token secret (either path may be
  // empty, not both). InvalidArgument names the line and what is wrong
  // (unknown role, token shorter than 16 characters, agent without node id,
  // duplicate token) or the secret's rule; NotFound when a file can't be
  // read.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Load(
      const std::string& tokens_path, const std::string& secret_path = "");

  // Re-reads both files; on error keeps the current ones and returns why.
  absl::Status Reload();

  // Checks the call's bearer token and role. `node_ids` are the nodes a
  // kNodeAgent call speaks for. Returns Unauthenticated (no or unknown
  // token) or PermissionDenied (wrong role, another node's id).
  absl::Status Check(const grpc::ServerContextBase& context, Access access,
                     const std::vector<std::string>& node_ids = {}) const;

  // The same check for a token that came another way (the web view's
  // `Authorization: Bearer` header or cookie): Unauthenticated for an
  // unknown token, PermissionDenied for a wrong role.
  absl::Status CheckToken(absl::string_view token, Access access,
                          const std::vector<std::string>& node_ids = {}) const;

  size_t size() const;

 private:
  using Table = absl::flat_hash_map<std::string, Principal>;
  struct Keys {
    Table table;
    std::string secret;  // "" without --agent_token_secret_file
  };
  static absl::StatusOr<Table> Parse(const std::string& path);
  static absl::StatusOr<std::string> ReadSecret(const std::string& path);
  // The principal `token` names: a table entry, or a derived agent token.
  static const Principal* Find(const Keys& keys, absl::string_view token,
                               Principal* derived);
  Authenticator(std::string tokens_path, std::string secret_path)
      : tokens_path_(std::move(tokens_path)),
        secret_path_(std::move(secret_path)) {}

  const std::string tokens_path_;
  const std::string secret_path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Keys> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_AUTH_H_
