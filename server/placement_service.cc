#include "server/placement_service.h"

#include <string>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "server/grpc_status.h"
#include "server/placement.h"
#include "server/stream_reactor.h"

namespace sliced::server {
namespace {

grpc::ServerUnaryReactor* SubmitCreate(grpc::CallbackServerContext* context,
                                       Coordinator* coordinator,
                                       const PlacementPolicy& policy,
                                       absl::StatusOr<PgSpec> spec,
                                       v1::PlacementGroup* response) {
  if (!spec.ok()) return FinishUnary(context, spec.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coordinator->Submit(WriteOp{
      [spec = *std::move(spec), policy, response](Txn& txn) mutable {
        return CreatePg(txn, std::move(spec), policy, response);
      },
      [reactor](const absl::Status& s) { reactor->Finish(ToGrpcStatus(s)); }});
  return reactor;
}

bool WatchMatches(const v1::WatchPlacementGroupsRequest& filter,
                  const v1::PlacementGroup& pg) {
  return (filter.job_id().empty() || filter.job_id() == pg.job_id()) &&
         (filter.placement_group_id().empty() ||
          filter.placement_group_id() == pg.placement_group_id());
}

// One WatchPlacementGroups stream: the current state, then every change.
class WatchReactor : public StreamReactor<v1::PlacementGroupEvent>,
                     public WatchHub::Watcher {
 public:
  WatchReactor(Coordinator* coordinator, WatchHub* hub,
               v1::WatchPlacementGroupsRequest filter)
      : hub_(hub), filter_(std::move(filter)) {
    set_on_done([this] { hub_->Remove(this); });
    hub_->Add(this);  // first, so that no change falls between the two
    std::vector<v1::PlacementGroup> current =
        coordinator->Read([&](const ClusterState& state) {
          std::vector<v1::PlacementGroup> out;
          for (const auto& [id, entry] : state.pgs) {
            v1::PlacementGroup pg;
            PgToProto(entry, *state.snapshot, &pg);
            if (WatchMatches(filter_, pg)) out.push_back(std::move(pg));
          }
          return out;
        });
    for (const v1::PlacementGroup& pg : current) Deliver(pg);
  }

  void Deliver(const v1::PlacementGroup& pg) override {
    if (!WatchMatches(filter_, pg)) return;
    v1::PlacementGroupEvent event;
    *event.mutable_placement_group() = pg;
    StreamReactor::Deliver(std::move(event));
  }

 private:
  WatchHub* const hub_;
  const v1::WatchPlacementGroupsRequest filter_;
};

}  // namespace

void WatchHub::Add(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.insert(watcher);
}

void WatchHub::Remove(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

void WatchHub::Publish(const std::vector<v1::PlacementGroup>& changes) {
  absl::MutexLock lock(&mu_);
  for (Watcher* w : watchers_) {
    for (const v1::PlacementGroup& pg : changes) w->Deliver(pg);
  }
}

grpc::ServerUnaryReactor* PlacementService::CreatePlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::CreatePlacementGroupRequest* request,
    v1::PlacementGroup* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kPlacement);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  return SubmitCreate(context, coordinator_, policy_,
                      PgSpecFromCreate(*request, limits_), response);
}

grpc::ServerUnaryReactor* PlacementService::SubmitScalingConfig(
    grpc::CallbackServerContext* context,
    const v1::SubmitScalingConfigRequest* request,
    v1::PlacementGroup* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kPlacement);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  return SubmitCreate(context, coordinator_, policy_,
                      PgSpecFromScalingConfig(*request, limits_), response);
}

grpc::ServerUnaryReactor* PlacementService::GetPlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::GetPlacementGroupRequest* request, v1::PlacementGroup* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  absl::Status status = coordinator_->Read([&](const ClusterState& state) {
    auto it = state.pgs.find(request->placement_group_id());
    if (it == state.pgs.end()) {
      return absl::NotFoundError(
          absl::StrCat("placement_group_id: no placement group \"",
                       request->placement_group_id(), "\""));
    }
    PgToProto(it->second, *state.snapshot, response);
    return absl::OkStatus();
  });
  return FinishUnary(context, status);
}

grpc::ServerUnaryReactor* PlacementService::ListPlacementGroups(
    grpc::CallbackServerContext* context,
    const v1::ListPlacementGroupsRequest* request,
    v1::ListPlacementGroupsResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  coordinator_->Read([&](const ClusterState& state) {
    for (const auto& [id, entry] : state.pgs) {
      if (!request->job_id().empty() &&
          entry.record.job_id() != request->job_id()) {
        continue;
      }
      if (request->state() != v1::PLACEMENT_GROUP_STATE_UNSPECIFIED &&
          entry.record.state() != request->state()) {
        continue;
      }
      PgToProto(entry, *state.snapshot, response->add_placement_groups());
    }
    return 0;
  });
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* PlacementService::RemovePlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::RemovePlacementGroupRequest* request,
    v1::RemovePlacementGroupResponse* /*response*/) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kPlacement);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  coordinator_->Submit(WriteOp{
      [request](Txn& txn) {
        return RemovePg(txn, request->placement_group_id());
      },
      [reactor](const absl::Status& s) { reactor->Finish(ToGrpcStatus(s)); }});
  return reactor;
}

grpc::ServerWriteReactor<v1::PlacementGroupEvent>*
PlacementService::WatchPlacementGroups(
    grpc::CallbackServerContext* context,
    const v1::WatchPlacementGroupsRequest* request) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return new FailedStream<v1::PlacementGroupEvent>(denied);
  }
  if (!streams_->TryAcquire()) {
    return new FailedStream<v1::PlacementGroupEvent>(
        absl::ResourceExhaustedError(absl::StrCat(
            "too many open streams (", streams_->max(), "); retry later")));
  }
  auto* reactor = new WatchReactor(coordinator_, hub_, *request);
  reactor->set_slot(streams_);
  return reactor;
}

grpc::ServerUnaryReactor* PlacementService::ExplainPlacementGroup(
    grpc::CallbackServerContext* context,
    const v1::ExplainPlacementGroupRequest* request,
    v1::ExplainPlacementGroupResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  absl::StatusOr<PgSpec> dry_run = absl::InvalidArgumentError(
      "target: give placement_group_id, dry_run or dry_run_scaling_config");
  if (request->has_dry_run()) {
    dry_run = PgSpecFromCreate(request->dry_run(), limits_);
  } else if (request->has_dry_run_scaling_config()) {
    dry_run =
        PgSpecFromScalingConfig(request->dry_run_scaling_config(), limits_);
  }
  absl::Status status = coordinator_->Read([&](const ClusterState& state) {
    const PgEntry* entry = nullptr;
    if (request->target_case() ==
        v1::ExplainPlacementGroupRequest::kPlacementGroupId) {
      auto it = state.pgs.find(request->placement_group_id());
      if (it == state.pgs.end()) {
        return absl::NotFoundError(
            absl::StrCat("placement_group_id: no placement group \"",
                         request->placement_group_id(), "\""));
      }
      entry = &it->second;
    } else if (dry_run.ok()) {
      entry = &dry_run->entry;
    } else {
      return dry_run.status();
    }
    if (!entry->record.compute_class().empty() &&
        !state.classes.contains(entry->record.compute_class())) {
      return absl::NotFoundError(
          absl::StrCat("compute_class: no compute class \"",
                       entry->record.compute_class(), "\""));
    }
    if (entry->record.state() == v1::CREATED) {
      // Nothing to explain: say where it is.
      response->set_outcome(
          std::string(scheduler::OutcomeName(scheduler::Decision::kPlaced)));
      absl::btree_set<std::string> nodes;
      for (const auto& b : entry->record.bundles()) {
        nodes.insert(b.node_id());
        response->add_bundles()->set_node_id(b.node_id());
      }
      response->set_summary(absl::StrCat(
          "CREATED: holds ", entry->record.bundles_size(), " bundle(s) on ",
          nodes.size(), " node(s)",
          entry->record.slice_names().empty()
              ? ""
              : absl::StrCat(
                    ", slices ",
                    absl::StrJoin(entry->record.slice_names(), ", "))));
      return absl::OkStatus();
    }
    std::vector<storage::ComputeClassRecord> classes;
    for (const auto& [name, cls] : state.classes) classes.push_back(cls);
    scheduler::Decision d = Explain(*state.snapshot, *entry, classes);
    response->set_outcome(std::string(scheduler::OutcomeName(d.outcome)));
    response->set_summary(d.diagnosis.summary);
    for (const scheduler::DiagnosisStep& step : d.diagnosis.steps) {
      std::string line = absl::StrCat(step.step, ": ", step.accepted, "/",
                                      step.considered, " accepted");
      for (const scheduler::Rejection& r : step.rejected) {
        absl::StrAppend(&line, ", ", r.count, " ", r.reason);
      }
      response->add_details(line);
    }
    for (const std::string& node : d.bundle_nodes) {
      response->add_bundles()->set_node_id(node);
    }
    return absl::OkStatus();
  });
  return FinishUnary(context, status);
}

}  // namespace sliced::server
