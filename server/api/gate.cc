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
  if (auth_ == nullptr) return absl::OkStatus();
  return auth_->Check(context, RuleOf(rpc).access, node_ids);
}

}  // namespace sliced::server::api
