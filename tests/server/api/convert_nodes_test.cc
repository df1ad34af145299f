#include "server/api/convert_nodes.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sliced::server::api {
namespace {

v1::Node GoodNode(const std::string& id) {
  v1::Node n;
  n.set_node_id(id);
  n.set_address("10.0.0.1");
  (*n.mutable_resources())["CPU"] = 8;
  (*n.mutable_resources())["memory"] = 1 << 30;
  (*n.mutable_labels())["ray.io/availability-zone"] = "us-east5-b";
  return n;
}

TEST(NodesFromProtoTest, AcceptsAndConvertsAGoodBatch) {
  v1::RegisterNodesRequest nodes;
  *nodes.add_nodes() = GoodNode("a");
  *nodes.add_nodes() = GoodNode("b");
  auto out = NodesFromProto(nodes, Limits());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].resources.at("CPU"), 80000);
  EXPECT_EQ((*out)[0].labels.at("ray.io/node-id"), "a");
}

TEST(NodesFromProtoTest, RejectsBadInputNamingNodeFieldAndRule) {
  struct Case {
    const char* name;
    std::function<void(v1::Node&)> mutate;
    const char* expect;  // substring of the message
  };
  const std::string long_value(64, 'a');
  const Case cases[] = {
      {"empty id", [](v1::Node& n) { n.set_node_id(""); },
       "node_id: must not be empty"},
      {"bad id char", [](v1::Node& n) { n.set_node_id("a b"); },
       "node_id: 'a b' may only hold"},
      {"id starts with dash", [](v1::Node& n) { n.set_node_id("-a"); },
       "must start with a letter or digit"},
      {"long id", [](v1::Node& n) { n.set_node_id(std::string(129, 'a')); },
       "at most 128"},
      // The id is also the ray.io/node-id label: its value's syntax applies.
      {"id past a label value's 63",
       [](v1::Node& n) { n.set_node_id(std::string(64, 'a')); },
       "is also its ray.io/node-id label"},
      {"id with ':'", [](v1::Node& n) { n.set_node_id("10.0.0.5:8076"); },
       "node_id: '10.0.0.5:8076' is also its ray.io/node-id label"},
      {"empty address", [](v1::Node& n) { n.set_address(""); },
       "address: must not be empty"},
      {"bad address", [](v1::Node& n) { n.set_address("h/1"); },
       "address: must be a host name"},
      {"bad label key",
       [](v1::Node& n) { (*n.mutable_labels())["-bad"] = "x"; },
       "labels[\"-bad\"]"},
      {"position not x-y-z",
       [](v1::Node& n) {
         (*n.mutable_labels())["sliced.io/tpu-host-coords"] = "1.0.0";
       },
       "labels[\"sliced.io/tpu-host-coords\"]: \"1.0.0\" is not a position"},
      {"position outside its slice's host grid",
       [](v1::Node& n) {
         (*n.mutable_labels())["ray.io/accelerator-type"] = "TPU-V6E";
         (*n.mutable_labels())["ray.io/tpu-topology"] = "4x4";
         (*n.mutable_labels())["sliced.io/tpu-host-coords"] = "2-0-0";
       },
       "\"2-0-0\" is outside the slice's 2x2x1 host grid"},
      {"long label value",
       [&](v1::Node& n) { (*n.mutable_labels())["k"] = long_value; },
       "labels[\"k\"] value"},
      {"negative resource",
       [](v1::Node& n) { (*n.mutable_resources())["CPU"] = -1; },
       "resources[\"CPU\"]: must be >= 0"},
      {"NaN resource",
       [](v1::Node& n) { (*n.mutable_resources())["CPU"] = std::nan(""); },
       "resources[\"CPU\"]: must be a finite number"},
      {"inf resource",
       [](v1::Node& n) { (*n.mutable_resources())["GPU"] = INFINITY; },
       "resources[\"GPU\"]: must be a finite number"},
      {"too fine",
       [](v1::Node& n) { (*n.mutable_resources())["CPU"] = 0.00001; },
       "precision"},
      {"fractional TPU capacity",
       [](v1::Node& n) { (*n.mutable_resources())["TPU"] = 0.5; },
       "must be a whole number"},
      {"fractional memory",
       [](v1::Node& n) { (*n.mutable_resources())["memory"] = 1.5; },
       "must be a whole number"},
      {"bad resource name",
       [](v1::Node& n) { (*n.mutable_resources())["a b"] = 1; },
       "resource name 'a b'"},
      {"registers DEAD", [](v1::Node& n) { n.set_state(v1::DEAD); },
       "state: a node registers ALIVE"},
      {"unknown GKE TPU",
       [](v1::Node& n) {
         (*n.mutable_labels())["cloud.google.com/gke-tpu-accelerator"] =
             "tpu-v9";
       },
       "unknown TPU accelerator"},
      {"too many labels",
       [](v1::Node& n) {
         for (int i = 0; i < 70; ++i)
           (*n.mutable_labels())["k" + std::to_string(i)] = "v";
       },
       "at most 64 labels"},
  };
  for (const Case& c : cases) {
    v1::RegisterNodesRequest nodes;
    *nodes.add_nodes() = GoodNode("ok");
    v1::Node bad = GoodNode("n2");
    c.mutate(bad);
    *nodes.add_nodes() = bad;
    auto out = NodesFromProto(nodes, Limits());
    ASSERT_FALSE(out.ok()) << c.name;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name;
    const std::string message(out.status().message());
    EXPECT_NE(message.find("nodes[1]"), std::string::npos)
        << c.name << ": " << message;
    EXPECT_NE(message.find(c.expect), std::string::npos)
        << c.name << ": " << message;
  }
}

// A huge input is rejected with a short message: no value is echoed whole.
TEST(NodesFromProtoTest, ErrorsQuoteAtMost64BytesOfAValue) {
  const std::string big(5 << 20, 'x');
  struct Case {
    const char* name;
    std::function<void(v1::Node&)> mutate;
  };
  const Case cases[] = {
      {"label value",
       [&](v1::Node& n) { (*n.mutable_labels())["k"] = big + "-"; }},
      {"label key",
       [&](v1::Node& n) { (*n.mutable_labels())[big + "-"] = "v"; }},
      {"node id", [&](v1::Node& n) { n.set_node_id(big + " "); }},
      {"resource name",
       [&](v1::Node& n) { (*n.mutable_resources())[big + " "] = 1; }},
      {"GKE accelerator",
       [&](v1::Node& n) {
         (*n.mutable_labels())["cloud.google.com/gke-tpu-accelerator"] = big;
       }},
  };
  Limits limits;
  limits.max_id_length = 10 << 20;  // let the syntax checks see the values
  for (const Case& c : cases) {
    v1::RegisterNodesRequest nodes;
    v1::Node bad = GoodNode("n1");
    c.mutate(bad);
    *nodes.add_nodes() = bad;
    auto out = NodesFromProto(nodes, limits);
    ASSERT_FALSE(out.ok()) << c.name;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name;
    EXPECT_LT(out.status().message().size(), 600u)
        << c.name << ": " << out.status().message().substr(0, 600);
    EXPECT_NE(out.status().message().find("bytes)"), std::string::npos)
        << c.name << ": " << out.status().message().substr(0, 600);
  }
}

TEST(NodesFromProtoTest, RejectsDuplicateIdsEmptyAndOversizedBatches) {
  v1::RegisterNodesRequest nodes;
  EXPECT_NE(NodesFromProto(nodes, Limits())
                .status()
                .message()
                .find("must not be empty"),
            std::string::npos);
  *nodes.add_nodes() = GoodNode("a");
  *nodes.add_nodes() = GoodNode("a");
  EXPECT_NE(
      NodesFromProto(nodes, Limits()).status().message().find("appears twice"),
      std::string::npos);
  Limits small;
  small.max_nodes_per_batch = 1;
  nodes.mutable_nodes()->RemoveLast();
  *nodes.add_nodes() = GoodNode("b");
  EXPECT_NE(NodesFromProto(nodes, small)
                .status()
                .message()
                .find("at most 1 nodes per batch"),
            std::string::npos);
}

TEST(BeatsFromProtoTest, HealthIsOptionalAndChecked) {
  v1::HeartbeatRequest request;
  request.add_heartbeats()->set_node_id("a");  // no health: no change
  v1::NodeHeartbeat* healthy = request.add_heartbeats();
  healthy->set_node_id("b");
  healthy->mutable_health();  // present, empty: healthy
  v1::NodeHeartbeat* sick = request.add_heartbeats();
  sick->set_node_id("c");
  sick->mutable_health()->add_problems("slice.error.detected.gauge=1");
  auto beats = BeatsFromProto(request, Limits());
  ASSERT_TRUE(beats.ok()) << beats.status();
  EXPECT_FALSE((*beats)[0].health.has_value());
  ASSERT_TRUE((*beats)[1].health.has_value());
  EXPECT_TRUE((*beats)[1].health->empty());
  EXPECT_EQ((*beats)[2].health,
            std::vector<std::string>{"slice.error.detected.gauge=1"});

  for (const std::string& bad :
       {std::string(), std::string(257, 'x'), std::string("two\nlines")}) {
    v1::HeartbeatRequest r;
    v1::NodeHeartbeat* beat = r.add_heartbeats();
    beat->set_node_id("a");
    beat->mutable_health()->add_problems(bad);
    auto out = BeatsFromProto(r, Limits());
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find(
                  "heartbeats[0].health.problems[0]: must be one line"),
              std::string::npos)
        << out.status();
  }
  v1::HeartbeatRequest many;
  v1::NodeHeartbeat* beat = many.add_heartbeats();
  beat->set_node_id("a");
  for (int i = 0; i < 17; ++i) beat->mutable_health()->add_problems("p");
  auto out = BeatsFromProto(many, Limits());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("at most 16 problems"),
            std::string::npos)
      << out.status();
}

TEST(QuarantineReasonTest, JoinsAndBounds) {
  EXPECT_EQ(QuarantineReason({}), "");
  EXPECT_EQ(QuarantineReason({"a", "b"}), "a; b");
  const std::string long_reason =
      QuarantineReason(std::vector<std::string>(16, std::string(256, 'x')));
  EXPECT_EQ(long_reason.size(), kMaxQuarantineReason);
  EXPECT_EQ(long_reason.substr(long_reason.size() - 3), "...");
  // A cut never splits a UTF-8 character ("é" is 2 bytes).
  std::string accents;
  for (int i = 0; i < 600; ++i) accents += "\xc3\xa9";
  const std::string cut = QuarantineReason({accents});
  EXPECT_LE(cut.size(), kMaxQuarantineReason);
  EXPECT_EQ(cut.substr(0, cut.size() - 3).size() % 2, 0u);
  EXPECT_NE(static_cast<unsigned char>(cut[cut.size() - 4]), 0xc3);
}

}  // namespace
}  // namespace sliced::server::api
