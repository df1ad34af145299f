// How a slicectl command ends; see slicectl_outcome.h.
#include "client/slicectl_outcome.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/slicectl_interrupt.h"
#include "google/protobuf/util/json_util.h"

namespace sliced::slicectl {

int Fail(const Failure& failure) {
  std::fprintf(stderr, "slicectl: %s\n", failure.message.c_str());
  return failure.code;
}

int Usage(absl::string_view message) {
  return Fail({kExitUsage, std::string(message)});
}

// A server error -> exit code 3 (rejected) or 4 (unreachable), with the
// server's code name and message as given.
int ServerError(const Context& ctx, const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  // CANCELLED: the call was cut off (a daemon shutting down), as transient
  // as UNAVAILABLE once the retries are spent.
  if (status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kDeadlineExceeded ||
      status.code() == absl::StatusCode::kCancelled) {
    return Fail({kExitUnreachable,
                 absl::StrCat("cannot reach sliced at ", ctx.server, ": ", code,
                              ": ", status.message(),
                              "\n  is the daemon running there? Set --server "
                              "or SLICED_SERVER (host:port).")});
  }
  return Fail({kExitRejected, absl::StrCat(code, ": ", status.message())});
}

// Reads a JSON file into `message` (unknown fields are an error: they are
// usually a typo). Exit 2 material on failure.
absl::Status ReadJsonFile(const std::string& path,
                          google::protobuf::Message* message) {
  absl::StatusOr<std::string> text = ReadInput(path);
  if (!text.ok()) return text.status();
  return ParseJson(*text, path, message);
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("-f FILE is required (a JSON file)");
  }
  std::stringstream contents;
  if (path == "-") {
    contents << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read \"", path, "\": ", std::strerror(errno)));
    }
    contents << in.rdbuf();
  }
  return contents.str();
}

absl::Status ParseJson(const std::string& text, const std::string& path,
                       google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  auto status =
      google::protobuf::util::JsonStringToMessage(text, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a valid ", message->GetDescriptor()->name(),
                     " (JSON): ", std::string(status.message())));
  }
  return absl::OkStatus();
}

bool Settled(v1::PlacementGroupState state) {
  return state == v1::CREATED || state == v1::INFEASIBLE ||
         state == v1::REMOVED;
}

// What a --wait that gives up does with its group: removes it unless --keep.
// Returns the sentence that says which group it leaves, or removed.
std::string GiveUp(Context& ctx, const std::string& id, bool keep) {
  if (keep) {
    return absl::StrCat("placement group ", id,
                        " stays queued (--keep): see `slicectl pg explain ", id,
                        "`");
  }
  absl::Status removed = ctx.client->RemovePlacementGroup(id);
  if (removed.ok() || removed.code() == absl::StatusCode::kNotFound) {
    return absl::StrCat("removed placement group ", id, " (--keep keeps it)");
  }
  return absl::StrCat("could not remove placement group ", id,
                      ", it stays queued: ", removed.ToString());
}

// --wait: watches until CREATED (0) or INFEASIBLE (3). --wait-timeout (5)
// removes the group unless `keep` (Ctrl-C: PlacementResult's handler).
int WaitAndPrint(Context& ctx, const v1::PlacementGroup& created,
                 absl::Duration timeout, bool keep) {
  const std::string& id = created.placement_group_id();
  if (!ctx.json && !Settled(created.state())) {
    Print(absl::StrCat("submitted ", id, " (",
                       v1::PlacementGroupState_Name(created.state()),
                       "); waiting until it is CREATED...\n"));
    std::fflush(stdout);
  }
  absl::StatusOr<v1::PlacementGroup> pg =
      ctx.client->WaitForPlacementGroup(id, timeout);
  if (!pg.ok()) {
    if (pg.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return Fail({kExitWaitTimeout,
                   absl::StrCat(pg.status().message(), " (--wait-timeout); ",
                                GiveUp(ctx, id, keep))});
    }
    // The group exists (or did): name it, also with --json, where nothing
    // was printed yet.
    return ServerError(
        ctx,
        absl::Status(
            pg.status().code(),
            absl::StrCat(
                "waiting for placement group ", id, ": ", pg.status().message(),
                pg.status().code() == absl::StatusCode::kNotFound
                    ? ""
                    : absl::StrCat("; it stays as it is: see `slicectl "
                                   "pg get ",
                                   id, "`"))));
  }
  if (ctx.json) {
    PrintJson(*pg);
  } else {
    PrintPlacementGroup(ctx, *pg);
  }
  if (pg->state() != v1::CREATED) {
    return Fail({kExitRejected,
                 absl::StrCat("placement group ", pg->placement_group_id(),
                              " is ", v1::PlacementGroupState_Name(pg->state()),
                              pg->pending_reason().empty() ? "" : ": ",
                              pg->pending_reason())});
  }
  return kExitOk;
}

int PlacementResult(
    Context& ctx, const ParsedFlags& flags, const std::string& request_id,
    const std::function<absl::StatusOr<v1::PlacementGroup>()>& create) {
  const bool wait = flags.Has("wait");
  const bool keep = flags.Has("keep");
  // Ctrl-C from the call on: before the answer the group may exist (the
  // request id finds it); with --wait, after it, the group is given up.
  absl::Mutex mu;
  std::string created_id;  // guarded by mu; set once the daemon answered
  InterruptHandler interrupt([&](int) {
    std::string id;
    {
      absl::MutexLock lock(&mu);
      id = created_id;
    }
    if (id.empty()) {
      std::fprintf(stderr,
                   "slicectl: interrupted before sliced answered; the group "
                   "may exist: run again with --request-id %s to get it, not "
                   "a second one\n",
                   request_id.c_str());
    } else if (wait) {
      std::fprintf(stderr, "slicectl: interrupted; %s\n",
                   GiveUp(ctx, id, keep).c_str());
    } else {
      std::fprintf(stderr, "slicectl: interrupted; placement group %s exists\n",
                   id.c_str());
    }
  });
  const absl::StatusOr<v1::PlacementGroup> pg = create();
  if (pg.ok()) {
    absl::MutexLock lock(&mu);
    created_id = pg->placement_group_id();
  }
  if (!pg.ok()) {
    // No answer that says whether it was created: the same request id gets
    // the same group, a new one a second group.
    const absl::StatusCode code = pg.status().code();
    const bool unknown = code == absl::StatusCode::kUnavailable ||
                         code == absl::StatusCode::kDeadlineExceeded ||
                         code == absl::StatusCode::kCancelled ||
                         code == absl::StatusCode::kUnknown ||
                         code == absl::StatusCode::kInternal;
    if (!unknown) return ServerError(ctx, pg.status());
    return ServerError(
        ctx, absl::Status(code, absl::StrCat(pg.status().message(),
                                             "; the group may exist: run again "
                                             "with --request-id ",
                                             request_id,
                                             " to get it, not a second one")));
  }
  if (wait) {
    // Checked before the call (parses, > 0); none: no limit.
    auto timeout = ParseDurationFlag("wait-timeout", flags.Get("wait-timeout"));
    const absl::Duration d = flags.Has("wait-timeout") && timeout.ok()
                                 ? *timeout
                                 : absl::InfiniteDuration();
    return WaitAndPrint(ctx, *pg, d, keep);
  }
  if (ctx.json) {
    PrintJson(*pg);
  } else {
    PrintPlacementGroup(ctx, *pg);
  }
  return kExitOk;
}

absl::Status CheckWaitFlags(const ParsedFlags& flags) {
  if (flags.Has("keep") && !flags.Has("wait")) {
    return absl::InvalidArgumentError("--keep needs --wait");
  }
  if (flags.Has("wait-timeout")) {
    if (!flags.Has("wait")) {
      return absl::InvalidArgumentError("--wait-timeout needs --wait");
    }
    auto d = ParseDurationFlag("wait-timeout", flags.Get("wait-timeout"));
    if (!d.ok()) return d.status();
    if (*d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "--wait-timeout must be > 0 (leave it out to wait without a limit)");
    }
  }
  return absl::OkStatus();
}

}  // namespace sliced::slicectl
