// The node record as the load reads it: NodeRecordLoad must stay NodeRecord
// field for field (a map on one side, the same repeated pair on the other),
// and what a NodeRecord writes must read back as the node it came from.
#include "storage/records.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "sliced/storage/records.pb.h"
#include "storage/store.h"

namespace sliced::storage {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;

// "name number type" of `field`; a map field as the repeated message of
// (key, value) it is on the wire.
std::string WireShape(const FieldDescriptor& field) {
  std::string shape = absl::StrCat(field.name(), " ", field.number(), " ",
                                   field.type_name(), field.is_repeated() ? "[]" : "");
  if (field.type() == FieldDescriptor::TYPE_MESSAGE) {
    const Descriptor& entry = *field.message_type();
    for (int i = 0; i < entry.field_count(); ++i) {
      absl::StrAppend(&shape, " (", WireShape(*entry.field(i)), ")");
    }
  }
  if (field.type() == FieldDescriptor::TYPE_ENUM) {
    absl::StrAppend(&shape, " ", field.enum_type()->full_name());
  }
  return shape;
}

TEST(NodeRecordLoadTest, HasNodeRecordsFieldsOnTheWire) {
  const Descriptor& written = *NodeRecord::descriptor();
  const Descriptor& read = *NodeRecordLoad::descriptor();
  ASSERT_EQ(written.field_count(), read.field_count())
      << "a field added to NodeRecord must be added to NodeRecordLoad";
  for (int i = 0; i < written.field_count(); ++i) {
    const FieldDescriptor& w = *written.field(i);
    const FieldDescriptor* r = read.FindFieldByNumber(w.number());
    ASSERT_NE(r, nullptr) << w.name();
    EXPECT_EQ(WireShape(w), WireShape(*r));
  }
}

TEST(NodeRecordLoadTest, ReadsWhatNodeRecordWrites) {
  scheduler::Node node;
  node.node_id = "tpu-host-with-a-long-id-0001";
  node.address = "10.0.0.1:6379";
  for (int i = 0; i < 20; ++i) {  // past FlatMap's small-map size
    node.labels[absl::StrCat("cloud.google.com/a-long-label-key-", i)] =
        absl::StrCat("a-value-longer-than-the-small-string-", i);
  }
  node.labels["short"] = "";
  node.resources = {{"TPU", 40000}, {"CPU", 960000}, {"memory", 1LL << 40}};
  node.state = scheduler::NodeState::kDraining;
  node.quarantine_reason = "ICI link 3 down";
  NodeRecordLoad load;
  ASSERT_TRUE(load.ParseFromString(ToRecord(node).SerializeAsString()));
  absl::StatusOr<scheduler::Node> back = FromRecord(load);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->node_id, node.node_id);
  EXPECT_EQ(back->address, node.address);
  EXPECT_EQ(back->labels, node.labels);
  EXPECT_EQ(back->resources, node.resources);
  EXPECT_EQ(back->state, node.state);
  EXPECT_EQ(back->quarantine_reason, node.quarantine_reason);
}

TEST(NodeRecordLoadTest, AStoredNodeHasItsMapsInKeyOrder) {
  scheduler::Node node;
  node.node_id = "n";
  for (int i = 0; i < 40; ++i) node.labels[absl::StrCat("key-", i)] = "v";
  node.resources = {{"TPU", 1}, {"CPU", 2}, {"memory", 3}, {"GPU", 4}};
  Mutation m;
  m.PutNode(node);
  m.PutNode(node);
  ASSERT_EQ(m.writes().size(), 2u);
  EXPECT_EQ(m.writes()[0].value, m.writes()[1].value);  // one node, one value
  NodeRecordLoad load;
  ASSERT_TRUE(load.ParseFromString(m.writes()[0].value));
  ASSERT_EQ(load.labels_size(), 40);
  for (int i = 1; i < load.labels_size(); ++i) {
    EXPECT_LT(load.labels(i - 1).key(), load.labels(i).key());
  }
  ASSERT_EQ(load.resources_size(), 4);
  for (int i = 1; i < load.resources_size(); ++i) {
    EXPECT_LT(load.resources(i - 1).key(), load.resources(i).key());
  }
}

// The node record is written by hand (SerializeNodeRecord); it must be the
// bytes protobuf writes for the same NodeRecord, so that a data dir reads
// the same whichever wrote it.
TEST(NodeRecordLoadTest, AStoredNodeIsTheBytesProtobufWrites) {
  std::vector<scheduler::Node> nodes(6);
  nodes[0].node_id = "n";  // only an id: every other field left out
  nodes[1].node_id = "tpu-host-with-a-long-id-0001";
  nodes[1].address = "10.0.0.1:6379";
  for (int i = 0; i < 40; ++i) {  // past FlatMap's small-map size
    nodes[1].labels[absl::StrCat("cloud.google.com/label-", i)] =
        std::string(i * 7, 'v');  // "" first; past 127 bytes (2-byte length)
  }
  nodes[1].labels[""] = "";
  nodes[1].labels["zone"] = "caf\xc3\xa9";
  nodes[1].resources = {{"TPU", 40000},
                        {"CPU", 0},
                        {"memory", 1LL << 40},
                        {"neg", -1},
                        {std::string(200, 'r'), 127},
                        {"x", 128}};
  nodes[1].state = scheduler::NodeState::kDraining;
  nodes[1].quarantine_reason = std::string(300, 'q');
  nodes[2].node_id = "dead";
  nodes[2].state = scheduler::NodeState::kDead;
  nodes[2].drain_kept = true;
  nodes[3].node_id = "alive";
  nodes[3].state = scheduler::NodeState::kAlive;
  nodes[4].node_id = std::string(20000, 'i');  // a 3-byte length
  nodes[5].labels["only"] = "a label";         // no id: left out too
  for (const scheduler::Node& node : nodes) {
    EXPECT_EQ(SerializeNodeRecord(node), SerializeRecord(ToRecord(node)))
        << node.node_id.substr(0, 40);
  }
}

TEST(NodeRecordLoadTest, RandomNodesAreTheBytesProtobufWrites) {
  std::mt19937_64 rng(17);
  auto text = [&rng](size_t max_length) {
    std::string s(std::uniform_int_distribution<size_t>(0, max_length)(rng),
                  '\0');
    // Printable ASCII: protobuf complains of a string field that is not
    // UTF-8 (the daemon's validation lets no such string in).
    for (char& c : s) c = static_cast<char>(0x20 + rng() % 95);
    return s;
  };
  const int64_t extremes[] = {0, 1, -1, 127, 128, INT64_MAX, INT64_MIN};
  for (int n = 0; n < 500; ++n) {
    scheduler::Node node;
    node.node_id = text(40);
    node.address = text(20);
    for (int i = rng() % 30; i > 0; --i) node.labels[text(30)] = text(200);
    for (int i = rng() % 8; i > 0; --i) {
      node.resources[text(24)] =
          rng() % 2 ? extremes[rng() % 7] : static_cast<int64_t>(rng());
    }
    node.state = static_cast<scheduler::NodeState>(rng() % 3);
    node.quarantine_reason = text(60);
    node.drain_kept = rng() % 2;
    ASSERT_EQ(SerializeNodeRecord(node), SerializeRecord(ToRecord(node)))
        << "node " << n;
  }
}

TEST(NodeRecordLoadTest, ARepeatedMapKeyKeepsItsLastValueAsProtobufDoes) {
  // Two entries for one key on the wire (a writer never sends it; protobuf's
  // map parse keeps the last).
  NodeRecordLoad twice;
  twice.set_node_id("n");
  twice.set_state(NODE_ALIVE);
  for (const char* v : {"first", "last"}) {
    NodeRecordLoad::Label* l = twice.add_labels();
    l->set_key("k");
    l->set_value(v);
  }
  const std::string bytes = twice.SerializeAsString();
  NodeRecord as_map;
  ASSERT_TRUE(as_map.ParseFromString(bytes));
  EXPECT_EQ(as_map.labels().at("k"), "last");
  NodeRecordLoad load;
  ASSERT_TRUE(load.ParseFromString(bytes));
  absl::StatusOr<scheduler::Node> node = FromRecord(load);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->labels, (scheduler::Labels{{"k", "last"}}));
}

TEST(NodeRecordLoadTest, UnknownStateIsDataLossNamingTheNode) {
  NodeRecordLoad load;
  load.set_node_id("host-7");
  load.set_state(static_cast<NodeStateRecord>(42));
  absl::StatusOr<scheduler::Node> node = FromRecord(load);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(node.status().message().find("host-7"), std::string::npos);
  EXPECT_NE(node.status().message().find("42"), std::string::npos);
}

}  // namespace
}  // namespace sliced::storage
