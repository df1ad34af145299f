// The auth table covers every method of every sliced.v1 service, once.
#include "server/api/gate.h"

#include <set>
#include <string>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server::api {
namespace {

TEST(GateTest, EveryServiceMethodHasExactlyOneRule) {
  (void)v1::Node::descriptor();  // links the file's descriptors in
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  std::set<std::string> methods;
  for (const char* service :
       {"sliced.v1.Inventory", "sliced.v1.Placement", "sliced.v1.Telemetry"}) {
    const auto* descriptor = pool->FindServiceByName(service);
    ASSERT_NE(descriptor, nullptr) << service;
    for (int i = 0; i < descriptor->method_count(); ++i) {
      methods.insert(std::string(service) + "/" +
                     descriptor->method(i)->name());
    }
  }
  std::set<std::string> ruled;
  for (const RpcRule& rule : kRpcRules) {
    EXPECT_TRUE(ruled.insert(std::string(rule.method)).second)
        << rule.method << " has two rules";
    EXPECT_EQ(&RuleOf(rule.rpc), &rule) << rule.method;
  }
  EXPECT_EQ(ruled, methods);
}

TEST(GateTest, WithoutAuthEveryoneIsAdmitted) {
  Gate gate(nullptr);
  grpc::ServerContext context;
  for (const RpcRule& rule : kRpcRules) {
    EXPECT_TRUE(gate.Admit(context, rule.rpc, {"any-node"}).ok());
  }
}

TEST(GateTest, ARefusingGateAnswersEveryCallWithTheRefusal) {
  Gate gate(nullptr);
  const absl::Status refusal =
      WithLeader(absl::UnavailableError("not the leader"), "127.0.0.1:9");
  gate.Refuse(refusal);
  grpc::ServerContext context;
  for (const RpcRule& rule : kRpcRules) {
    EXPECT_EQ(gate.Admit(context, rule.rpc, {"any-node"}), refusal);
  }
}

}  // namespace
}  // namespace sliced::server::api
