#include "server/api/convert_nodes.h"

#include <cmath>
#include <string>

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
      {"empty address", [](v1::Node& n) { n.set_address(""); },
       "address: must not be empty"},
      {"bad address", [](v1::Node& n) { n.set_address("h/1"); },
       "address: must be a host name"},
      {"bad label key",
       [](v1::Node& n) { (*n.mutable_labels())["-bad"] = "x"; },
       "labels[\"-bad\"]"},
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

}  // namespace
}  // namespace sliced::server::api
