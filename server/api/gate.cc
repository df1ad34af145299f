#include "server/api/gate.h"

#include <cstdlib>

namespace sliced::server::api {

const RpcRule& RuleOf(Rpc rpc) {
  for (const RpcRule& rule : kRpcRules) {
    if (rule.rpc == rpc) return rule;
  }
  std::abort();  // every Rpc has a rule (tests/server/api/gate_test.cc)
}

absl::Status Gate::Admit(const grpc::ServerContextBase& context, Rpc rpc,
                         const std::vector<std::string>& node_ids) const {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!refusal_.ok()) return refusal_;
  }
  if (auth_ == nullptr) return absl::OkStatus();
  return auth_->Check(context, RuleOf(rpc).access, node_ids);
}

void Gate::Refuse(const absl::Status& refusal) {
  absl::MutexLock lock(&mu_);
  refusal_ = refusal;
}

}  // namespace sliced::server::api
