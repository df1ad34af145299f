#include "server/api/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/quote.h"

namespace sliced::server::api {
namespace {

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kScheduler:
      return "scheduler";
    case Role::kAgent:
      return "agent";
    case Role::kViewer:
      return "viewer";
  }
  return "unknown";
}

absl::string_view AccessName(Access access) {
  switch (access) {
    case Access::kRead:
      return "any role";
    case Access::kInventory:
      return "role admin";
    case Access::kPlacement:
      return "role scheduler";
    case Access::kNodeAgent:
      return "role agent (for its own node) or admin";
  }
  return "unknown";
}

constexpr size_t kMinAgentSecret = 32;

}  // namespace

std::string AgentToken(absl::string_view secret, absl::string_view node_id) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(node_id.data()), node_id.size(),
       mac, &length);
  return absl::StrCat(node_id, ".",
                      absl::BytesToHexString(absl::string_view(
                          reinterpret_cast<const char*>(mac), length)));
}

absl::StatusOr<Authenticator::Table> Authenticator::Parse(
    const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("--auth_tokens: can't read ", Quote(path)));
  Table table;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = line;
    if (size_t hash = text.find('#'); hash != absl::string_view::npos) {
      text = text.substr(0, hash);
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.empty()) continue;
    const std::string where = absl::StrCat(path, ":", number, ": ");
    if (fields.size() < 2 || fields.size() > 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected '<token> <role> [<node_id>]'"));
    }
    if (fields[0].size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "token must be at least 16 characters"));
    }
    if (absl::StrContains(fields[0], '%')) {
      // The web API's HTTP server URL-decodes header values: such a token
      // would work on gRPC and never on /api/v1.
      return absl::InvalidArgumentError(
          absl::StrCat(where, "token may not contain '%'"));
    }
    Principal p;
    if (fields[1] == "admin") {
      p.role = Role::kAdmin;
    } else if (fields[1] == "scheduler") {
      p.role = Role::kScheduler;
    } else if (fields[1] == "agent") {
      p.role = Role::kAgent;
    } else if (fields[1] == "viewer") {
      p.role = Role::kViewer;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "unknown role ", Quote(fields[1], '\''),
                       "; use admin, scheduler, agent or viewer"));
    }
    if (p.role == Role::kAgent) {
      if (fields.size() != 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "an agent token names its node: '<token> agent <node_id>'"));
      }
      p.node_id = std::string(fields[2]);
    } else if (fields.size() == 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "only agent tokens name a node"));
    }
    if (!table.emplace(std::string(fields[0]), std::move(p)).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "duplicate token"));
    }
  }
  return table;
}

absl::StatusOr<std::string> Authenticator::ReadSecret(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--agent_token_secret_file: can't read ", Quote(path)));
  }
  std::stringstream content;
  content << in.rdbuf();
  std::string secret(absl::StripAsciiWhitespace(content.str()));
  if (secret.size() < kMinAgentSecret) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--agent_token_secret_file: ", Quote(path), " must hold a secret of ",
        "at least ", kMinAgentSecret, " bytes (e.g. `openssl rand -hex 32`), ",
        "got ", secret.size()));
  }
  return secret;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Load(
    const std::string& tokens_path, const std::string& secret_path) {
  if (tokens_path.empty() && secret_path.empty()) {
    return absl::InvalidArgumentError(
        "give --auth_tokens and/or --agent_token_secret_file");
  }
  std::unique_ptr<Authenticator> auth(
      new Authenticator(tokens_path, secret_path));
  absl::Status loaded = auth->Reload();
  if (!loaded.ok()) return loaded;
  return auth;
}

absl::Status Authenticator::Reload() {
  auto keys = std::make_shared<Keys>();
  if (!tokens_path_.empty()) {
    absl::StatusOr<Table> table = Parse(tokens_path_);
    if (!table.ok()) return table.status();
    keys->table = *std::move(table);
  }
  if (!secret_path_.empty()) {
    absl::StatusOr<std::string> secret = ReadSecret(secret_path_);
    if (!secret.ok()) return secret.status();
    keys->secret = *std::move(secret);
  }
  absl::MutexLock lock(&mu_);
  keys_ = std::move(keys);
  return absl::OkStatus();
}

size_t Authenticator::size() const {
  absl::MutexLock lock(&mu_);
  return keys_->table.size();
}

const Principal* Authenticator::Find(const Keys& keys, absl::string_view token,
                                     Principal* derived) {
  auto found = keys.table.find(token);
  if (found != keys.table.end()) return &found->second;
  if (keys.secret.empty()) return nullptr;
  const size_t dot = token.rfind('.');
  if (dot == absl::string_view::npos || dot == 0) return nullptr;
  const absl::string_view node = token.substr(0, dot);
  const std::string expected = AgentToken(keys.secret, node);
  if (expected.size() != token.size() ||
      CRYPTO_memcmp(expected.data(), token.data(), token.size()) != 0) {
    return nullptr;
  }
  derived->role = Role::kAgent;
  derived->node_id = std::string(node);
  return derived;
}

absl::Status Authenticator::Check(
    const grpc::ServerContextBase& context, Access access,
    const std::vector<std::string>& node_ids) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "missing 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return absl::UnauthenticatedError(
        "authorization metadata must be 'Bearer <token>'");
  }
  return CheckToken(absl::StripAsciiWhitespace(value), access, node_ids);
}

absl::Status Authenticator::CheckToken(
    absl::string_view token, Access access,
    const std::vector<std::string>& node_ids) const {
  std::shared_ptr<const Keys> keys;
  {
    absl::MutexLock lock(&mu_);
    keys = keys_;
  }
  Principal derived;
  const Principal* principal = Find(*keys, token, &derived);
  if (principal == nullptr)
    return absl::UnauthenticatedError("unknown bearer token");
  const Principal& who = *principal;
  bool allowed = false;
  switch (access) {
    case Access::kRead:
      allowed = true;
      break;
    case Access::kInventory:
      allowed = who.role == Role::kAdmin;
      break;
    case Access::kPlacement:
      allowed = who.role == Role::kScheduler;
      break;
    case Access::kNodeAgent:
      allowed = who.role == Role::kAdmin || who.role == Role::kAgent;
      break;
  }
  if (!allowed) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a ", RoleName(who.role), " token may not call this; it needs ",
        AccessName(access)));
  }
  if (access == Access::kNodeAgent && who.role == Role::kAgent) {
    for (const std::string& node : node_ids) {
      if (node != who.node_id) {
        return absl::PermissionDeniedError(
            absl::StrCat("this agent token speaks for node ",
                         Quote(who.node_id), ", not ", Quote(node)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sliced::server::api
