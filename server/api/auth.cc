#include "server/api/auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
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

}  // namespace

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

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Load(
    const std::string& path) {
  std::unique_ptr<Authenticator> auth(new Authenticator(path));
  absl::Status loaded = auth->Reload();
  if (!loaded.ok()) return loaded;
  return auth;
}

absl::Status Authenticator::Reload() {
  absl::StatusOr<Table> table = Parse(path_);
  if (!table.ok()) return table.status();
  auto shared = std::make_shared<const Table>(*std::move(table));
  absl::MutexLock lock(&mu_);
  table_ = std::move(shared);
  return absl::OkStatus();
}

size_t Authenticator::size() const {
  absl::MutexLock lock(&mu_);
  return table_->size();
}

absl::Status Authenticator::Check(
    const grpc::ServerContextBase& context, Access access,
    const std::vector<std::string>& node_ids) const {
  std::shared_ptr<const Table> table;
  {
    absl::MutexLock lock(&mu_);
    table = table_;
  }
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
  auto found = table->find(absl::StripAsciiWhitespace(value));
  if (found == table->end())
    return absl::UnauthenticatedError("unknown bearer token");
  const Principal& who = found->second;
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
