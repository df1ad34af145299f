#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (default 20) on a scratch copy of its
# seed corpus (fuzz/corpus/<name>), so the repo's corpus is never rewritten.
# Needs the sanitizer build: scripts/test.sh makes it in build-asan.
#   scripts/fuzz.sh 20              # what CI runs
#   scripts/fuzz.sh 3600 rpc        # a longer run of one target
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(selector scaling_config rpc)
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  cp -r "fuzz/corpus/$t" "$scratch/$t"
  echo "fuzz: $t for ${seconds}s"
  if ! "build-asan/fuzz/${t}_fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$scratch/$t-" "$scratch/$t" >"$scratch/$t.log" 2>&1; then
    tail -n 60 "$scratch/$t.log"
    mkdir -p fuzz-artifacts && cp "$scratch/$t-"* fuzz-artifacts/ 2>/dev/null || true
    echo "fuzz: $t FAILED (reproducer in fuzz-artifacts/)"
    exit 1
  fi
  grep -E '^stat::number_of_executed_units' "$scratch/$t.log" || true
done
echo "fuzz: all targets ran clean"
