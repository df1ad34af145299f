// How a slicectl command ends: exit codes with their stderr message, server
// errors mapped to exit 3 (rejected) or 4 (unreachable), JSON input files,
// and --wait (watch until CREATED; give the group back on timeout or
// Ctrl-C unless --keep). Single-threaded, as slicectl is (the Ctrl-C
// handler runs GiveUp on a thread of its own while the main thread waits).
#ifndef SLICED_CLIENT_SLICECTL_OUTCOME_H_
#define SLICED_CLIENT_SLICECTL_OUTCOME_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/slicectl_cli.h"
#include "client/slicectl_print.h"
#include "google/protobuf/message.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::slicectl {

// A command's outcome: an exit code and what to print on stderr.
struct Failure {
  int code;
  std::string message;
};

// Prints "slicectl: <message>" on stderr; returns the code.
int Fail(const Failure& failure);
// Exit 2 with `message`.
int Usage(absl::string_view message);
// A server error: exit 4 (unreachable: UNAVAILABLE, DEADLINE_EXCEEDED,
// saying where) or 3 (rejected), with the server's code name and message.
int ServerError(const Context& ctx, const absl::Status& status);

// Reads a JSON file ("-" for stdin) into `message`; unknown fields are an
// error (usually a typo). InvalidArgument on failure (exit 2 material).
absl::Status ReadJsonFile(const std::string& path,
                          google::protobuf::Message* message);
// Its two halves, for input parsed as more than one message: the text of
// `path` ("-" for stdin, which can be read once), and its parse.
absl::StatusOr<std::string> ReadInput(const std::string& path);
absl::Status ParseJson(const std::string& text, const std::string& path,
                       google::protobuf::Message* message);

// True for the states a --wait ends on.
bool Settled(v1::PlacementGroupState state);
// What a --wait that gives up does with its group: removes it unless
// `keep`. Returns the sentence that says which group it leaves, or removed.
std::string GiveUp(Context& ctx, const std::string& id, bool keep);
// --wait: watches until CREATED (0) or INFEASIBLE (3). --wait-timeout (5)
// removes the group unless `keep`.
int WaitAndPrint(Context& ctx, const v1::PlacementGroup& created,
                 absl::Duration timeout, bool keep);
// Runs `create` (submit / pg create, sent with `request_id`) and prints its
// reply, or waits for the group with --wait. A failure that leaves it
// unknown whether the group was created says to run again with that request
// id. Ctrl-C (130) during the call says the same; during --wait it removes
// the group unless --keep.
int PlacementResult(
    Context& ctx, const ParsedFlags& flags, const std::string& request_id,
    const std::function<absl::StatusOr<v1::PlacementGroup>()>& create);
// --keep and --wait-timeout need --wait; the timeout must parse and be > 0.
absl::Status CheckWaitFlags(const ParsedFlags& flags);

}  // namespace sliced::slicectl

#endif  // SLICED_CLIENT_SLICECTL_OUTCOME_H_
