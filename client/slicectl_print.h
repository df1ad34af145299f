// slicectl's human output: tables and detail views of nodes, slices,
// placement groups, compute classes and the cluster summary (--json prints
// the API's JSON instead, PrintJson). Single-threaded, as slicectl is.
#ifndef SLICED_CLIENT_SLICECTL_PRINT_H_
#define SLICED_CLIENT_SLICECTL_PRINT_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "client/slicectl_cli.h"
#include "client/sliced_client.h"
#include "google/protobuf/message.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::slicectl {

namespace v1 = ::sliced::v1;

// What every command runs with: the server, output mode and client.
struct Context {
  std::string server;
  bool json = false;
  bool color = false;
  std::unique_ptr<client::SlicedClient> client;
};

// The API's JSON of `message` on stdout (proto3 JSON names).
void PrintJson(const google::protobuf::Message& message, bool pretty = true);
void Print(const std::string& text);

// Whole numbers in full (memory bytes), others as the shortest %g.
std::string Num(double v);
std::string OrDash(absl::string_view s);
std::string TimeText(const google::protobuf::Timestamp& t);
// A state name, colored when the terminal takes colors.
Table::Cell State(const Context& ctx, absl::string_view state);
std::string Colored(const Context& ctx, absl::string_view state);
// "free/total" of a node's resource, "-" when it has none.
std::string Capacity(const v1::Node& node, const std::string& resource);
std::string Label(const v1::Node& node, const std::string& key);
std::string SliceState(const v1::Slice& s);
std::string SelectorText(
    const google::protobuf::Map<std::string, std::string>& m);
std::string ResourcesText(const google::protobuf::Map<std::string, double>& m);

void PrintNodes(const Context& ctx,
                const google::protobuf::RepeatedPtrField<v1::Node>& nodes);
void PrintNode(const Context& ctx, const v1::Node& n);
void PrintSlices(const Context& ctx, const v1::ListSlicesResponse& response);
void PrintPlacementGroup(const Context& ctx, const v1::PlacementGroup& pg);
void PrintPlacementGroups(const Context& ctx,
                          const v1::ListPlacementGroupsResponse& response);
void PrintExplain(const Context& ctx,
                  const v1::ExplainPlacementGroupResponse& r);
void PrintComputeClasses(const Context& ctx,
                         const v1::ListComputeClassesResponse& response);
void PrintSummary(const Context& ctx, const v1::GetClusterSummaryResponse& r);

}  // namespace sliced::slicectl

#endif  // SLICED_CLIENT_SLICECTL_PRINT_H_
