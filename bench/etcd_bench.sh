#!/usr/bin/env bash
# Durable create throughput on the etcd store (one member) beside RocksDB's,
# in one run (issue 19, docs/ha.md): the same sliced binary twice, once
# --store=rocksdb and once --store=etcd, each driven by sliced_load --target
# (closed loop, create_remove, against the health-check ceiling of that same
# daemon), one after the other on this machine. etcd runs on a temp dir on
# loopback ports with --max-txn-ops/--max-request-bytes raised (the load
# registers 1,000 nodes in one call; sliced is told the same limits).
#
#   bench/etcd_bench.sh [--quick] [--build-dir DIR]   (default build; needs
#   -DSLICED_WITH_ETCD=ON and the targets sliced, sliced_load)
# Prints both Markdown tables and writes them to bench/results/etcd.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
QUICK=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=(--quick) ;;
    --build-dir) BUILD=$2; shift ;;
    *) echo "usage: bench/etcd_bench.sh [--quick] [--build-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
SLICED=$BUILD/server/sliced
LOAD=$BUILD/bench/sliced_load
TMP=$(mktemp -d /tmp/sliced-etcd-bench-XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits for a line holding $2 in file $1; prints it.
wait_line() {
  for _ in $(seq 200); do
    if grep -q "$2" "$1"; then grep -m1 "$2" "$1"; return 0; fi
    sleep 0.1
  done
  echo "no '$2' in $1:" >&2; cat "$1" >&2; return 1
}

EC=$(free_port); EP=$(free_port)
etcd --name b --data-dir "$TMP/etcd" \
  --listen-client-urls "http://127.0.0.1:$EC" --advertise-client-urls "http://127.0.0.1:$EC" \
  --listen-peer-urls "http://127.0.0.1:$EP" --initial-advertise-peer-urls "http://127.0.0.1:$EP" \
  --initial-cluster "b=http://127.0.0.1:$EP" \
  --max-txn-ops 4096 --max-request-bytes 10485760 >"$TMP/etcd.log" 2>&1 &
PIDS+=($!)

run() {  # name, extra daemon flags...
  local name=$1; shift
  "$SLICED" --listen=127.0.0.1:0 --metrics_listen= --heartbeat_timeout=0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  local port
  port=$(wait_line "$TMP/$name.out" "serving on" | sed -E 's/.*serving on [0-9.]+:([0-9]+).*/\1/')
  mkdir -p "$TMP/$name"
  echo "etcd_bench: $name on 127.0.0.1:$port" >&2
  "$LOAD" --target="127.0.0.1:$port" --workloads=create_remove "${QUICK[@]}" \
    --out_dir="$TMP/$name" >"$TMP/$name.load.log" 2>&1
  kill "${PIDS[-1]}"
}
run rocksdb --store=rocksdb --data_dir="$TMP/rocksdb-data"
run etcd --store=etcd --etcd_endpoints="127.0.0.1:$EC" --etcd_max_txn_ops=4096 \
  --etcd_max_request_bytes=10485760

mkdir -p "$ROOT/bench/results"
{
  echo "# Durable creates: RocksDB vs etcd (1 member), one run"
  echo
  echo "\`bench/etcd_bench.sh ${QUICK[*]}\` at $(git -C "$ROOT" rev-parse --short HEAD), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "The binary of $BUILD ($(grep -m1 CMAKE_BUILD_TYPE: "$BUILD/CMakeCache.txt" | cut -d= -f2)); etcd $(etcd --version | head -1 | cut -d' ' -f3), one member"
  echo "on this machine's disk, \`--max-txn-ops 4096 --max-request-bytes 10485760\`."
  echo "sliced_load ran with --target, so its text below cannot know the store (it says"
  echo "RocksDB and shows no daemon CPU); the section title says which store it was."
  echo
  echo "## --store=rocksdb"
  echo
  cat "$TMP/rocksdb/load.md"
  echo
  echo "## --store=etcd (one member, same machine)"
  echo
  cat "$TMP/etcd/load.md"
} | tee "$ROOT/bench/results/etcd.md"
