#!/usr/bin/env bash
# Fails when a layer includes what it must not (docs/architecture.md):
#  - scheduler/ (the engine): Abseil, the standard library and itself only;
#  - storage/: no gRPC, no API proto, nothing of server/ but the domain types;
#  - server/core/: no gRPC, no API proto, nothing of server/api/;
#  - scheduler/internal/ headers: only from scheduler/ (and its tests).
# Usage: layering_test.sh <source root>
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"
failed=0

# Prints includes of files under $1 matching the regex $2, as violations of $3.
forbid() {
  local dir="$1" pattern="$2" rule="$3" hits
  hits="$(grep -rnE "^#include \"($pattern)" "$dir" --include='*.h' --include='*.cc' || true)"
  if [ -n "$hits" ]; then
    echo "FAIL: $rule"
    echo "$hits"
    failed=1
  fi
}

forbid scheduler 'grpc|grpcpp/|google/protobuf|sliced/|server/|storage/|rocksdb/|prometheus/' \
  "scheduler/ depends on Abseil only"
forbid_outside_etcd() {
  local hits
  hits="$(grep -rnE "^#include \"($1)" storage --exclude-dir=etcd --include='*.h' --include='*.cc' || true)"
  if [ -n "$hits" ]; then
    echo "FAIL: $2"
    echo "$hits"
    failed=1
  fi
}
# storage/etcd/ talks to etcd over gRPC (its own generated stubs), never the API.
forbid_outside_etcd 'grpc|grpcpp/|sliced/v1/|server/api/|server/server' \
  "storage/ must not see the API proto, gRPC or the server beyond server/core domain types"
forbid storage/etcd 'sliced/v1/|server/api/|server/server' \
  "storage/etcd/ must not see the API proto or the server"
storage_core="$(grep -rnE '^#include "server/core/' storage | grep -vE 'server/core/(placement_group|telemetry)\.h"' || true)"
if [ -n "$storage_core" ]; then
  echo "FAIL: storage/ may include only the domain types of server/core"
  echo "$storage_core"
  failed=1
fi
forbid server/core 'grpc|grpcpp/|sliced/v1/|server/api/|server/server|prometheus/' \
  "server/core has no gRPC, no API proto and no edge"
if grep -rlE 'v1::' server/core; then
  echo "FAIL: server/core mentions v1:: (API types)"
  failed=1
fi
internal="$(grep -rnE '^#include "scheduler/internal/' --include='*.h' --include='*.cc' \
  server storage client bench fuzz 2>/dev/null || true)"
if [ -n "$internal" ]; then
  echo "FAIL: scheduler/internal/ is the engine's own"
  echo "$internal"
  failed=1
fi

if [ "$failed" -eq 0 ]; then echo "layering: OK"; fi
exit "$failed"
