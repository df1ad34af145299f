#!/usr/bin/env bash
# The demo: the daemon (as scripts/run.sh starts it) plus a simulated fleet of
# node agents in one process (python3 -m sliced_agent.sim): a v6e 4x4 slice
# (4 hosts, metrics from a fake libtpu), a v4 2x2x2 slice (2 hosts, metrics
# from a fake GKE device plugin) and 2 CPU nodes, all heartbeating, with
# live TPU series and libtpu log lines. Everything on 127.0.0.1; Ctrl-C
# stops both (what has not stopped 15 s later is killed, and the demo exits
# 1). Extra arguments go to the daemon.
#   SLICED_DEMO_SKIP_BUILD=1   don't install/build (already built)
#   SLICED_LISTEN, SLICED_METRICS_LISTEN, SLICED_DEMO_DATA   where to serve/keep data
#   SLICED_BIN, SLICECTL_BIN, SLICED_PY   another build's daemon, slicectl and stubs
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SLICED_DEMO_SKIP_BUILD:-}" != 1 ]; then
  scripts/install-deps.sh
  scripts/build.sh
fi
LISTEN=${SLICED_LISTEN:-127.0.0.1:50051}
METRICS=${SLICED_METRICS_LISTEN:-127.0.0.1:9464}
DATA=${SLICED_DEMO_DATA:-./data-demo}
SLICED_BIN=${SLICED_BIN:-build/server/sliced}
SLICECTL_BIN=${SLICECTL_BIN:-build/client/slicectl}
export SLICED_PY=${SLICED_PY:-build/python}
PIDS=()
BANNER=$(mktemp)
stop() {
  # A second Ctrl-C or SIGTERM while stopping would end this shell at once
  # and leave the daemon and the fleet running: stopping is not interrupted.
  trap '' INT TERM
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Up to 15 s to stop, then kill -9 what is left and exit 1: a part that
  # hung on its way out would otherwise hold the terminal and its ports.
  local tries=0
  while [[ -n "$(jobs -pr)" && $tries -lt 75 ]]; do
    sleep 0.2
    tries=$((tries + 1))
  done
  local left
  left=$(jobs -pr)
  if [[ -n "$left" ]]; then
    echo "demo: did not stop within 15 s of SIGTERM, killed:" >&2
    ps -o pid,args -p "${left//$'\n'/,}" >&2 || true
    kill -9 $left 2>/dev/null || true
  fi
  wait
  rm -f "$BANNER"
  if [[ -n "$left" ]]; then exit 1; fi
}
trap stop EXIT
trap 'exit 0' INT TERM

# The daemon's start-up lines go to stdout and to $BANNER: the fleet starts
# once this daemon says it serves, not when something answers on $LISTEN
# (another daemon holding the port would).
"$SLICED_BIN" --data_dir="$DATA" --listen="$LISTEN" --metrics_listen="$METRICS" "$@" \
  > >(tee "$BANNER") &
PIDS+=($!)
for _ in $(seq 100); do  # up to 20 s for the daemon to serve
  if grep -q 'serving on' "$BANNER"; then break; fi
  if ! kill -0 "${PIDS[0]}" 2>/dev/null; then
    echo "demo: sliced did not start (its error is above)" >&2
    exit 1
  fi
  sleep 0.2
done
PYTHONPATH=client/python /usr/bin/python3 -m sliced_agent.sim \
  --server "$LISTEN" --slices v6e:4x4:1,v4:2x2x2:1 --cpu_nodes 2 &
PIDS+=($!)
cat <<MSG
demo: daemon on $LISTEN (metrics http://$METRICS/metrics), 8 simulated agents.
  web view: http://$METRICS/ui
  $SLICECTL_BIN --server $LISTEN nodes      # all ALIVE
  $SLICECTL_BIN --server $LISTEN slices
  curl -s http://$METRICS/metrics | grep sliced_tpu_
  python3 examples/jaxtrainer_example.py --address $LISTEN
Ctrl-C stops it.
MSG
wait -n
