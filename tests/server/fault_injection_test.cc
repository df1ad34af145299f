// The whole server in-process over real gRPC on loopback, on a store that
// fails: a failed commit answers UNAVAILABLE, changes nothing that a restart
// would not see, never lets capacity be held twice, and the daemon goes on
// once writes succeed again.
#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "sliced/v1/sliced.grpc.pb.h"
#include "storage/fault_injecting_store.h"

namespace sliced::server {
namespace {

class FaultInjectionTest : public testing::Test {
 protected:
  void Start() {
    auto faulty = std::make_unique<storage::FaultInjectingStore>(&memory_);
    faults_ = faulty.get();
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.heartbeat_timeout = absl::ZeroDuration();
    auto server = SlicedServer::StartWithStore(options, std::move(faulty));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                            grpc::InsecureChannelCredentials());
    inventory_ = v1::Inventory::NewStub(channel);
    placement_ = v1::Placement::NewStub(channel);
  }

  // Registers a v6e 4x4 slice (4 hosts) of each name.
  void RegisterSlices(std::initializer_list<const char*> slices) {
    v1::RegisterNodesRequest fleet;
    for (const char* slice : slices) {
      for (int w = 0; w < 4; ++w) {
        v1::Node* n = fleet.add_nodes();
        n->set_node_id(std::string(slice) + "-w" + std::to_string(w));
        n->set_address(n->node_id());
        (*n->mutable_labels())["ray.io/accelerator-type"] = "TPU-V6E";
        (*n->mutable_labels())["ray.io/tpu-topology"] = "4x4";
        (*n->mutable_labels())["ray.io/tpu-slice-name"] = slice;
        (*n->mutable_labels())["ray.io/tpu-worker-id"] = std::to_string(w);
        (*n->mutable_resources())["TPU"] = 4;
      }
    }
    grpc::ClientContext context;
    v1::RegisterNodesResponse response;
    ASSERT_TRUE(inventory_->RegisterNodes(&context, fleet, &response).ok());
  }

  grpc::Status Submit(v1::PlacementGroup* out,
                      grpc::ClientContext* context = nullptr) {
    v1::SubmitScalingConfigRequest request;
    v1::ScalingConfig* c = request.mutable_scaling_config();
    c->set_num_workers(4);
    c->set_use_tpu(true);
    c->set_topology("4x4");
    c->set_accelerator_type("TPU-V6E");
    grpc::ClientContext own;
    return placement_->SubmitScalingConfig(context ? context : &own, request,
                                           out);
  }

  std::vector<v1::PlacementGroup> List() {
    grpc::ClientContext context;
    v1::ListPlacementGroupsResponse response;
    EXPECT_TRUE(placement_->ListPlacementGroups(&context, {}, &response).ok());
    return {response.placement_groups().begin(),
            response.placement_groups().end()};
  }

  storage::MemoryStore memory_;
  storage::FaultInjectingStore* faults_ = nullptr;
  std::unique_ptr<SlicedServer> server_;
  std::unique_ptr<v1::Inventory::Stub> inventory_;
  std::unique_ptr<v1::Placement::Stub> placement_;
};

TEST_F(FaultInjectionTest, FailedCommitsNeverHoldASliceTwice) {
  Start();
  RegisterSlices({"a", "b"});
  v1::PlacementGroup pg;
  faults_->FailWrites(1);
  EXPECT_EQ(Submit(&pg).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(List().empty());  // a failed write left nothing

  faults_->FailSyncs(1);
  EXPECT_EQ(Submit(&pg).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The failed sync still wrote the group; memory now says so too, so the
  // next job gets the other slice, not the same one again.
  std::vector<v1::PlacementGroup> after_sync = List();
  ASSERT_EQ(after_sync.size(), 1u);
  ASSERT_TRUE(Submit(&pg).ok());
  EXPECT_EQ(pg.state(), v1::CREATED);
  EXPECT_NE(pg.slice_names(0), after_sync[0].slice_names(0));
  ASSERT_TRUE(Submit(&pg).ok());
  EXPECT_EQ(pg.state(), v1::PENDING);

  // A restart on the same data agrees and finds nothing held twice.
  server_->Shutdown();
  server_.reset();
  Start();
  std::vector<v1::PlacementGroup> restarted = List();
  ASSERT_EQ(restarted.size(), 3u);
  int created = 0;
  for (const auto& g : restarted) created += g.state() == v1::CREATED;
  EXPECT_EQ(created, 2);
}

// A commit whose sync failed may still have landed; the daemon re-reads its
// store, and a watch stream that could not see that commit's changes ends
// ABORTED, saying it fell behind (the Python client opens it again); a watch
// opened then starts from the state re-read.
TEST_F(FaultInjectionTest, AReReadEndsTheWatchStreamsThatFellBehind) {
  Start();
  RegisterSlices({"a", "b"});
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  std::unique_ptr<grpc::ClientReader<v1::PlacementGroupEvent>> watch =
      placement_->WatchPlacementGroups(&context, {});
  v1::PlacementGroup first;
  ASSERT_TRUE(Submit(&first).ok());
  v1::PlacementGroupEvent event;
  ASSERT_TRUE(watch->Read(&event));
  EXPECT_EQ(event.placement_group().placement_group_id(),
            first.placement_group_id());

  faults_->FailSyncs(1);
  v1::PlacementGroup landed;
  EXPECT_EQ(Submit(&landed).error_code(), grpc::StatusCode::UNAVAILABLE);
  while (watch->Read(&event)) {
  }
  grpc::Status ended = watch->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(ended.error_message().find("fell behind"), std::string::npos)
      << ended.error_message();

  grpc::ClientContext again;
  again.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
  auto reopened = placement_->WatchPlacementGroups(&again, {});
  int current = 0;
  for (; current < 2 && reopened->Read(&event); ++current) {
  }
  EXPECT_EQ(current, 2);  // both groups, the one that landed included
  again.TryCancel();
}

// What an answer's trailing metadata `sliced-leader` says; nullopt without it.
std::optional<std::string> LeaderNamed(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find("sliced-leader");
  if (it == trailers.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

// A leader whose shared store refuses to write because another daemon leads
// now (etcd's fence, docs/ha.md) answers UNAVAILABLE with an empty
// `sliced-leader`: nothing was done, and the clients go and look for the
// leader. A failure that may have written (a failed sync) has no such mark,
// and neither does an answer read from state a deposed leader can't vouch
// for: a remove of a missing group is refused the same way, not NOT_FOUND.
TEST_F(FaultInjectionTest, ADeposedLeadersAnswersSayNothingWasDone) {
  Start();
  faults_->SetShared();
  RegisterSlices({"a", "b", "c"});
  v1::PlacementGroup held;
  ASSERT_TRUE(Submit(&held).ok());

  {
    faults_->FailSyncs(1);
    grpc::ClientContext context;
    v1::PlacementGroup pg;
    EXPECT_EQ(Submit(&pg, &context).error_code(),
              grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(LeaderNamed(context), std::nullopt);
  }

  faults_->Depose();
  {
    grpc::ClientContext context;
    v1::PlacementGroup pg;
    grpc::Status s = Submit(&pg, &context);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(s.error_message().find("deposed"), std::string::npos)
        << s.error_message();
    EXPECT_EQ(LeaderNamed(context), "");
  }
  for (const std::string& id :
       {held.placement_group_id(), std::string("pg-none")}) {
    grpc::ClientContext context;
    v1::RemovePlacementGroupRequest request;
    request.set_placement_group_id(id);
    v1::RemovePlacementGroupResponse response;
    grpc::Status s =
        placement_->RemovePlacementGroup(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << id;
    EXPECT_EQ(LeaderNamed(context), "") << id;
  }
  {
    grpc::ClientContext context;
    v1::DrainNodeRequest request;
    request.set_node_id("b-w0");
    v1::DrainNodeResponse response;
    EXPECT_EQ(inventory_->DrainNode(&context, request, &response).error_code(),
              grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(LeaderNamed(context), "");
  }
}

}  // namespace
}  // namespace sliced::server
