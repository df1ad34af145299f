#!/usr/bin/env bash
# Runs the whole benchmark harness (issue 7) and rewrites the harness's
# sections of bench/RESULTS.md (the "## Solver" section is not touched).
#
#   bench/run.sh            full run (~20 min on 2 cores), records results
#   bench/run.sh --quick    < 2 min; writes to build-bench/bench-quick/ only
#   bench/run.sh --quick --record   quick, but record into bench/RESULTS.md
#   bench/run.sh --head     measure a clean export of HEAD (a tree others edit)
#   bench/run.sh --churn    only the churn scenario (issue 17): registration
#                           of 10k/100k nodes in batches of 1,000, creates
#                           quiet vs one node registering every 0.5 s;
#                           rewrites only its section of bench/RESULTS.md
#
# With --churn: --daemon PATH measures another sliced binary (e.g. one built
# at the branch point) and --section NAME picks the RESULTS.md section
# (default churn), so a before and an after run sit side by side.
#
# Options: --no-build (use existing binaries), --render-only (rewrite the
# Markdown from the last run's output, run nothing), --build-dir DIR
# (default build-bench), JOBS=N in the environment for the build (default 1).
# Steps: build sliced, sliced_sim, sliced_load, sliced_calib,
# sliced_solver_bench (Release) and sliced_goload (Go); sliced_sim
# (quality replay, whole-slice batch vs max flow, solver latency 1k-100k;
# then --workload=mixed: the mixed trace against the tuned tiered-first-fit;
# then --workload=preemption: victim choice against a topology-blind rule);
# sliced_solver_bench's 1,000-bundle generic PGs (DESIGN §7: ≤ 5 ms);
# sliced_load (throughput vs the health-check ceiling at 16 and 64 clients,
# RSS per node / per PG, restart at 100k nodes + 50k PGs, churn, heartbeats
# at 10k and 100k nodes, watch fan-out); go_ratio.py (one-bundle creates vs
# the health check from the Go client, as issue 17 measured with ghz, on
# 2,000 CPU nodes, beside DESIGN §7's calibration server); deep_queue.py
# (create/remove beside 2,000 and 10,000 PENDING groups); watch_open.py
# (creates while unfiltered watches open over 50,000 groups). Raw output: JSON,
# the Markdown tables and the SVG plot in bench/results/ (or the quick dir).
set -euo pipefail
ARGS="$*"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-bench
QUICK=0
RECORD=1
DO_BUILD=1
RENDER_ONLY=0
HEAD=0
CHURN=0
DAEMON=
CHURN_SECTION=churn
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --record) RECORD=2 ;;
    --no-build) DO_BUILD=0 ;;
    --render-only) RENDER_ONLY=1; DO_BUILD=0 ;;
    --head) HEAD=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --churn) CHURN=1 ;;
    --daemon) DAEMON=$2; DAEMON_ARG=$2; shift ;;
    --section) CHURN_SECTION=$2; shift ;;
    *) echo "usage: bench/run.sh [--quick [--record]] [--head] [--no-build] [--render-only] [--build-dir DIR] [--churn [--daemon PATH] [--section NAME]]" >&2; exit 2 ;;
  esac
  shift
done
if [[ $QUICK == 1 && $RECORD != 2 ]]; then RECORD=0; fi

SRC=$ROOT
if [[ $HEAD == 1 ]]; then
  # Measure the committed tree, not whatever is being edited in this one.
  # Files that did not change keep their timestamps, so rebuilds are
  # incremental.
  SRC=$BUILD/head-src
  EXPORT=$(mktemp -d)
  git -C "$ROOT" archive HEAD | tar -x -C "$EXPORT"
  mkdir -p "$SRC"
  python3 - "$EXPORT" "$SRC" <<'SYNC'
import filecmp, os, shutil, sys
src, dst = sys.argv[1:]
want = set()
for d, _, files in os.walk(src):
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), src)
        want.add(rel)
        a, b = os.path.join(src, rel), os.path.join(dst, rel)
        if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
            os.makedirs(os.path.dirname(b), exist_ok=True)
            shutil.copy(a, b)
for d, _, files in os.walk(dst):
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), dst)
        if rel not in want:
            os.remove(os.path.join(dst, rel))
SYNC
  rm -rf "$EXPORT"
  BUILD=$BUILD/head-build
fi
if [[ $DO_BUILD == 1 ]]; then
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"${JOBS:-1}" --target sliced sliced_sim sliced_load sliced_goload sliced_calib \
    sliced_solver_bench
fi

if [[ $RECORD == 0 ]]; then OUT=$BUILD/bench-quick; else OUT=$ROOT/bench/results; fi
mkdir -p "$OUT"
MODE=()
[[ $QUICK == 1 ]] && MODE=(--quick)

if [[ $CHURN == 1 ]]; then
  # Only the churn scenario, into its own files and RESULTS.md section.
  DAEMON=${DAEMON:-$BUILD/server/sliced}
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  START=$(date -u '+%Y-%m-%d %H:%M UTC')
  SECONDS=0
  CHURN_OUT=$(mktemp -d)
  echo "== sliced_load --parts=churn ${MODE[*]:-} ($DAEMON)" >&2
  "$BUILD/bench/sliced_load" "${MODE[@]}" --parts=churn --daemon="$DAEMON" \
    --work_dir="${TMPDIR:-/tmp}" --out_dir="$CHURN_OUT" >/dev/null
  ELAPSED=$SECONDS
  LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
  cp "$CHURN_OUT/churn.md" "$OUT/$CHURN_SECTION.md"
  cp "$CHURN_OUT/churn.json" "$OUT/$CHURN_SECTION.json"
  rm -rf "$CHURN_OUT"
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
  git -C "$ROOT" diff --quiet HEAD -- . ':!bench/results' ':!bench/RESULTS.md' 2>/dev/null || COMMIT="$COMMIT + uncommitted changes in the tree"
  RESULTS=$ROOT/bench/RESULTS.md
  [[ $RECORD == 0 ]] && { cp "$RESULTS" "$OUT/RESULTS.md"; RESULTS=$OUT/RESULTS.md; }
  CMD="bench/run.sh --churn${MODE:+ --quick}"
  [[ -n ${DAEMON_ARG:-} ]] && CMD="$CMD --daemon $DAEMON_ARG"
  python3 - "$RESULTS" "$OUT/$CHURN_SECTION.md" "$CHURN_SECTION" "$CMD" "$START" \
    "$ELAPSED" "$COMMIT" "$(nproc)" "$LOAD_START" "$LOAD_END" "$DAEMON" <<'PY'
import re, sys
(results, body_path, name, cmd, start, elapsed, commit, ncpu, load_start,
 load_end, daemon) = sys.argv[1:]
body = open(body_path).read()
head = (f"**Command**: `{cmd} --section {name}` (daemon `{daemon}`). **Run**: {start}, "
        f"{int(elapsed)//60} min {int(elapsed)%60} s, tree at commit {commit}, {ncpu} cores. "
        f"Load average (1/5/15 min) {load_start} at the start, {load_end} at the end.\n\n")
section = (f"<!-- bench/run.sh:BEGIN {name} -->\n## Churn: {name} (sliced_load --parts=churn)\n\n"
           f"{head}{body.rstrip()}\n<!-- bench/run.sh:END {name} -->\n")
text = open(results).read()
pattern = re.compile(rf"<!-- bench/run.sh:BEGIN {re.escape(name)} -->.*?<!-- bench/run.sh:END {re.escape(name)} -->\n", re.S)
text = pattern.sub(lambda m: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
open(results, "w").write(text)
print(f"wrote {results}", file=sys.stderr)
PY
  exit 0
fi

# What a run that builds says it built, into build dir $1.
built_text() {
  echo "it builds \`sliced\`, \`sliced_sim\`, \`sliced_load\`, \`sliced_calib\`, \`sliced_solver_bench\` in Release and \`sliced_goload\` into \`$1/\`"
}

if [[ $RENDER_ONLY == 0 ]]; then
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  START=$(date -u '+%Y-%m-%d %H:%M UTC')
  SECONDS=0
  echo "== sliced_sim ${MODE[*]:-}" >&2
  "$BUILD/bench/sliced_sim" "${MODE[@]}" --out_dir="$OUT" >/dev/null
  echo "== sliced_sim --workload=mixed ${MODE[*]:-}" >&2
  "$BUILD/bench/sliced_sim" "${MODE[@]}" --workload=mixed --out_dir="$OUT" >/dev/null
  echo "== sliced_sim --workload=preemption ${MODE[*]:-}" >&2
  "$BUILD/bench/sliced_sim" "${MODE[@]}" --workload=preemption --out_dir="$OUT" >/dev/null
  echo "== sliced_solver_bench: 1,000-bundle generic PGs ${MODE[*]:-}" >&2
  "$BUILD/bench/sliced_solver_bench" --benchmark_filter='^BM_GenericPg1000/' \
    --benchmark_min_time="$([[ $QUICK == 1 ]] && echo 0.05 || echo 0.5)" \
    --benchmark_format=json --benchmark_out="$OUT/solver_generic.json" >/dev/null
  echo "== sliced_load ${MODE[*]:-}" >&2
  "$BUILD/bench/sliced_load" "${MODE[@]}" --daemon="$BUILD/server/sliced" \
    --work_dir="${TMPDIR:-/tmp}" --out_dir="$OUT" >/dev/null
  echo "== go_ratio.py ${MODE[*]:-}" >&2
  GO_MODE=()
  [[ $QUICK == 1 ]] && GO_MODE=(--reps=1 --duration=2)
  /usr/bin/python3 "$ROOT/bench/go_ratio.py" "${GO_MODE[@]}" \
    --daemon="$BUILD/server/sliced" --go_client="$BUILD/bench/sliced_goload" \
    --calibration="$BUILD/bench/sliced_calib" \
    --work_dir="${TMPDIR:-/tmp}" --out_dir="$OUT" --check >/dev/null
  echo "== deep_queue.py ${MODE[*]:-}" >&2
  DQ_MODE=()
  [[ $QUICK == 1 ]] && DQ_MODE=(--reps=1 --duration=2 --queued=0,2000)
  /usr/bin/python3 "$ROOT/bench/deep_queue.py" "${DQ_MODE[@]}" \
    --daemon="$BUILD/server/sliced" --go_client="$BUILD/bench/sliced_goload" \
    --load="$BUILD/bench/sliced_load" --work_dir="${TMPDIR:-/tmp}" --out_dir="$OUT" \
    --check >/dev/null
  echo "== watch_open.py ${MODE[*]:-}" >&2
  WO_MODE=()
  [[ $QUICK == 1 ]] && WO_MODE=(--reps=1 --duration=2 --groups=5000)
  /usr/bin/python3 "$ROOT/bench/watch_open.py" "${WO_MODE[@]}" \
    --daemon="$BUILD/server/sliced" --go_client="$BUILD/bench/sliced_goload" \
    --work_dir="${TMPDIR:-/tmp}" --out_dir="$OUT" --check >/dev/null
  ELAPSED=$SECONDS
  LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
  if [[ $HEAD == 1 ]]; then
    COMMIT="$COMMIT (built from a clean export of HEAD)"
  else
    git -C "$ROOT" diff --quiet HEAD -- . ':!bench/results' ':!bench/RESULTS.md' 2>/dev/null || COMMIT="$COMMIT + uncommitted changes in the tree"
  fi
  BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
  if [[ $DO_BUILD == 1 ]]; then
    BUILT="$(built_text "${BUILD#$ROOT/}")"
  else
    BUILT="it used the binaries already built in \`${BUILD#$ROOT/}/\` (${BUILD_TYPE:-unknown} build)"
  fi
  printf '%s\n' "$START" "$ELAPSED" "$COMMIT" "$LOAD_START" "$LOAD_END" "$ARGS" "$BUILT" > "$OUT/run.txt"
else
  { read -r START; read -r ELAPSED; read -r COMMIT; read -r LOAD_START; read -r LOAD_END;
    read -r ARGS || true; read -r BUILT || true; } < "$OUT/run.txt"
fi
BUILT=${BUILT:-"$(built_text build-bench)"}

RESULTS=$ROOT/bench/RESULTS.md
[[ $RECORD == 0 ]] && { cp "$RESULTS" "$OUT/RESULTS.md"; RESULTS=$OUT/RESULTS.md; }

CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
CMD="bench/run.sh${ARGS:+ $ARGS}"

python3 - "$RESULTS" "$OUT" "$CMD" "$START" "$ELAPSED" "$COMMIT" "$(nproc)" "$CPU" \
  "$LOAD_START" "$LOAD_END" "$([[ $RECORD == 0 ]] && echo "$OUT" || echo bench/results)" \
  "$BUILT" <<'PY'
import json, re, statistics, sys
(results, out, cmd, start, elapsed, commit, ncpu, cpu,
 load_start, load_end, rel_out, built) = sys.argv[1:]
load = json.load(open(f"{out}/load.json"))
try:
    go = json.load(open(f"{out}/go.json"))
except FileNotFoundError:
    go = {"runs": []}
sim = json.load(open(f"{out}/sim.json"))

def section(name, title, body):
    # No title: the body brings its own heading (a ### subsection).
    heading = f"## {title}\n\n" if title else ""
    return (f"<!-- bench/run.sh:BEGIN {name} -->\n{heading}{body.rstrip()}\n"
            f"<!-- bench/run.sh:END {name} -->\n")

def median(xs):  # of an even count, the mean of the two middle values
    return statistics.median(xs) if xs else float("nan")

# Where sliced stands against DESIGN §7.
rows = []
tp = load["throughput"]
# How fast the machine ran: the load generator's own CPU per health check,
# the same calls in every run. Absolute targets (the restart, the solver's
# p99) move with it; ratios are measured within the run.
per_health = [1e6 * r["client_cpu_cores"] / r["ops_per_s"] for r in tp
              if r["workload"] == "health" and r["ops_per_s"] > 0]
if per_health:
    rows.append(f"| machine speed: the C++ load generator's CPU per health check (the same calls every run; "
                f"higher is slower) | (report: absolute figures move with it) | "
                f"{statistics.median(per_health):.1f} µs |")  # as sliced_load's own text
for c in (16, 64):
    for w in ("create_remove", "scaling", "mix"):
        runs = [r for r in tp if r["clients"] == c and r["workload"] == w]
        ratios = [r["ops_per_s"] / r["paired_health_ops_per_s"] for r in runs
                  if r.get("paired_health_ops_per_s")]
        if ratios:
            target = "≥ 0.75" if c == 64 else "(report)"
            ok = "" if c != 64 else (" ✅" if median(ratios) >= 0.75 else " ❌")
            rows.append(f"| gRPC ratio to health, {w}, {c} clients | {target} | {median(ratios):.2f}{ok} |")
for w, reply in (("create", "BASIC reply"), ("create_full", "full reply")):
    for c in (16, 64):
        ratios = [r["rps"] / r["paired_health_rps"] for r in go["runs"]
                  if r["concurrency"] == c and r["workload"] == w and
                  r.get("server", "sliced") == "sliced"]
        if ratios:
            target = "≥ 0.6 with ghz (issue 17)" if c == 64 else "(report)"
            rows.append(f"| gRPC ratio to health, one-bundle creates, {reply}, Go client (go_ratio.py), {c} clients | "
                        f"{target} | {median(ratios):.2f} |")
# The same client against DESIGN §7's calibration server (bench/calib), and
# sliced's BASIC ratio as a share of it, per repetition.
for c in (16, 64):
    per_rep = lambda server: {r["rep"]: r["rps"] / r["paired_health_rps"] for r in go["runs"]
                              if r.get("server") == server and r["workload"] == "create" and r["concurrency"] == c}
    cal, mine = per_rep("calibration"), per_rep("sliced")
    if cal:
        rows.append(f"| calibration server's ratio to health (bench/calib: group commit, nothing else), Go client, {c} clients | "
                    f"(report; DESIGN §7: 0.58–0.60 with ghz at 64) | {median(list(cal.values())):.2f} |")
        share = [mine[k] / cal[k] for k in cal if k in mine]
        rows.append(f"| sliced's BASIC ratio as a share of the calibration server's, {c} clients | (report) | {median(share):.2f} |")
# What issue 17's 0.6 leaves the daemon on this machine with this client.
# Both programs share the cores, so calls/s follows the CPU a call costs
# them together (per phase: cores ÷ calls/s, warm-up included). At the
# cores a create phase kept busy and the client's CPU per create, the
# phase would have read 0.6 had the daemon spent (client + daemon per
# create) × its ratio ÷ 0.6, less the client's, per create. Per
# repetition, median; from sliced's phases and from the calibration
# server's, beside what each spent.
def allowance(server):
    spent, allowed = [], []
    for r in go["runs"]:
        if (r.get("server", "sliced") == server and r["workload"] == "create" and
                r["concurrency"] == 64 and r["rps"] > 0 and r.get("paired_health_rps")):
            client = 1e6 * r["client_cpu_cores"] / r["rps"]
            daemon = 1e6 * r["daemon_cpu_cores"] / r["rps"]
            ratio = r["rps"] / r["paired_health_rps"]
            allowed.append((client + daemon) * ratio / 0.6 - client)
            spent.append(daemon)
    return median(allowed), median(spent)
if any(r.get("server") == "calibration" and r["concurrency"] == 64 for r in go["runs"]):
    (mine_allowed, mine_spent), (cal_allowed, cal_spent) = allowance("sliced"), allowance("calibration")
    rows.append(f"| daemon CPU per BASIC create with which a 64-client create phase would read 0.6 (its client + "
                f"daemon CPU per call × its ratio ÷ 0.6, less the client's): from sliced's phases; from the "
                f"calibration server's — and what each spent | (report; issue 17, item 2) | {mine_allowed:.0f} µs; "
                f"{cal_allowed:.0f} µs — sliced {mine_spent:.0f} µs, calibration {cal_spent:.0f} µs |")
try:
    dq = json.load(open(f"{out}/deep_queue.json"))["runs"]
except FileNotFoundError:
    dq = []
quiet = median([r["ops_per_s"] for r in dq if r["queued"] == 0])
for depth in sorted({r["queued"] for r in dq if r["queued"]}):
    ops = median([r["ops_per_s"] for r in dq if r["queued"] == depth])
    rows.append(f"| create/remove ops/s beside {depth:,} PENDING groups, 64 clients (deep_queue.py) | "
                f"(report; issue 17: no stalls) | {ops:.0f} ({ops / quiet:.2f} of no queue) |")
try:
    wo = [r for r in json.load(open(f"{out}/watch_open.json"))["runs"] if r["binary"] == "daemon"]
except FileNotFoundError:
    wo = []
if wo:
    rows.append(f"| creates while unfiltered watches open over {wo[0]['groups']:,} groups, 16 clients (watch_open.py): "
                f"creates/s and the slowest create, watched / quiet | (report; issue 17: no stalls) | "
                f"{median([r['watched']['rps'] / r['quiet']['rps'] for r in wo]):.2f}, "
                f"{median([r['watched']['max_ms'] for r in wo]):.0f} / {median([r['quiet']['max_ms'] for r in wo]):.0f} ms |")
big = [p for p in load["scaling"] if p["nodes"] == max((q["nodes"] for q in load["scaling"]), default=0)]
for p in big:
    r = median(p["restart_s"])
    rows.append(f"| restart, {p['nodes']:,} nodes + {p['pgs']:,} PGs | ≤ 1.5 s at 100k + 50k | "
                f"{r:.2f} s{' ✅' if r <= 1.5 else ' ❌'} |")
for p in big:
    per_node = (p["rss_nodes"] - p["rss_empty"]) / 1024 / max(1, p["nodes"])
    rows.append(f"| daemon RSS at {p['nodes']:,} nodes + {p['pgs']:,} PGs (per node) | ≤ 3 KB per node at 100k | "
                f"{p['rss_pgs'] / 1048576:.0f} MB ({per_node:.1f} KB){' ✅' if per_node <= 3 else ' ❌'} |")
    rows.append(f"| registering {p['nodes']:,} nodes in batches of 1,000; creates/s at that size | (report) | "
                f"{p['register_s']:.1f} s; {p['create']['ops_per_s']:.0f}/s |")
# Issue 17's items 1, 4 and 5, from sliced_load's churn, heartbeat and watch
# parts: medians over the repetitions of each ratio to the quiet phase beside
# it. The churn and heartbeat targets are stated at 100k nodes.
def at_100k(n, ok):
    return (" ✅" if ok else " ❌") if n >= 100000 else ""
def plural(n, what):
    return f"{n} {what}{'' if n == 1 else 's'}"
def ratio(a, b, key):
    return a[key] / b[key] if b[key] else float("nan")
def median_ratio(reps, phase, quiet, key):
    return median([ratio(r[phase], r[quiet], key) for r in reps])
churn = max(load.get("churn", []), key=lambda p: p["nodes"], default=None)
if churn:
    n = churn["nodes"]
    ops = median_ratio(churn["pairs"], "churn", "quiet", "ops_per_s")
    p99 = median_ratio(churn["pairs"], "churn", "quiet", "p99_us")
    rows.append(f"| registering {n:,} nodes in batches of 1,000 (churn part) | ≤ 15 s at 100k | "
                f"{churn['register_s']:.1f} s{at_100k(n, churn['register_s'] <= 15)} |")
    rows.append(f"| creates while one node registers every 0.5 s, {n:,} nodes: ops ratio; p99 ratio "
                f"(median of {plural(len(churn['pairs']), 'pair')}) | ≥ 0.90; ≤ 2 at 100k | "
                f"{ops:.2f}{at_100k(n, ops >= 0.9)}; {p99:.2f}{at_100k(n, p99 <= 2)} |")
# "The cost of one node's change is independent of the inventory size":
# one RegisterNodes(1) with nothing else running, at the smallest churn size
# and the largest, their daemons up at once and the rounds alternating
# between them; the figure is the median of the rounds' p50 ratios.
# Independent is read as within 25 % (the noise of a p50 of 400 calls here
# is ~10 %).
alone = load.get("alone")
if alone and len(alone["nodes"]) >= 2:
    lo, hi = alone["nodes"][0], alone["nodes"][-1]
    cells = []
    for end in ("front", "back"):
        pooled = [[ms for r in alone["rounds"] for ms in r[f"{end}_ms"][k]] for k in (0, -1)]
        r_med = median([median(r[f"{end}_ms"][-1]) / median(r[f"{end}_ms"][0]) for r in alone["rounds"]])
        cells.append(f"{median(pooled[0]):.2f} → {median(pooled[1]):.2f} ms "
                     f"({r_med:.2f}×){at_100k(hi, r_med <= 1.25)}")
    rows.append(f"| one node's RegisterNodes alone, p50 at {lo:,} → {hi:,} nodes (ratio: median of "
                f"{plural(len(alone['rounds']), 'round')}, the daemons up at once): at the front of the "
                f"node order; at its end | ≤ 1.25× (issue 17: independent of the inventory size) | "
                f"{cells[0]}; {cells[1]} |")
    # The same calls' cost in the daemon's CPU (all its threads, per call),
    # which the machine's other load does not add to as it does to latency.
    if all("front_cpu_ms" in r for r in alone["rounds"]):
        cells = []
        for end in ("front", "back"):
            per = [[r[f"{end}_cpu_ms"][k] for r in alone["rounds"]] for k in (0, -1)]
            r_med = median([r[f"{end}_cpu_ms"][-1] / r[f"{end}_cpu_ms"][0] for r in alone["rounds"]])
            cells.append(f"{median(per[0]):.2f} → {median(per[1]):.2f} ms "
                         f"({r_med:.2f}×){at_100k(hi, r_med <= 1.25)}")
        rows.append(f"| the same calls' daemon CPU per call (all threads) at {lo:,} → {hi:,} nodes "
                    f"(ratio: median of {plural(len(alone['rounds']), 'round')}): at the front; at "
                    f"the end | ≤ 1.25× (issue 17: independent of the inventory size) | "
                    f"{cells[0]}; {cells[1]} |")
beats = max(load.get("heartbeats", []), key=lambda p: p["nodes"], default=None)
if beats:
    n = beats["nodes"]
    single = median_ratio(beats["reps"], "single", "quiet", "p99_us")
    batched = median_ratio(beats["reps"], "batched", "quiet", "p99_us")
    rows.append(f"| placements' p99 while every one of {n:,} nodes beats once per lease: 1 per RPC; batched "
                f"(ratio to quiet, median of {plural(len(beats['reps']), 'repetition')}) | ≤ 2 at 100k | "
                f"{single:.2f}{at_100k(n, single <= 2)}; {batched:.2f}{at_100k(n, batched <= 2)} |")
watch = {w["watchers"]: w["reps"] for w in load.get("watch", [])}
if "none" in watch and "1000 filtered" in watch:
    pairs = [{"filtered": f["creates"], "none": q["creates"]}
             for f, q in zip(watch["1000 filtered"], watch["none"])]
    r = median_ratio(pairs, "filtered", "none", "ops_per_s")
    rows.append(f"| creates with 1,000 filtered watchers open ÷ none (median of {plural(len(pairs), 'pair')}) | ≥ 0.80 | "
                f"{r:.3f}{' ✅' if r >= 0.8 else ' ❌'} |")
top = max((q["nodes"] for q in sim["solver_scaling"]), default=0)
for p in sim["solver_scaling"]:
    for k in p["kinds"]:
        if p["nodes"] == top and k["kind"] == "slice":
            ok = k["placed_p99_us"] <= 50
            rows.append(f"| slice decision p99 (CPU time) at {top:,} nodes, generated fleet half full: "
                        f"placed; all (incl. Unschedulable + diagnosis) | ≤ 50 µs at 100k | "
                        f"{k['placed_p99_us']:.1f} µs{' ✅' if ok else ' ❌'}; {k['p99_us']:.0f} µs"
                        f"{' ✅' if k['p99_us'] <= 50 else ' ❌'} |")
# DESIGN §7: a 1,000-bundle generic PG with selectors in ≤ 5 ms; the worst
# CPU p99 of the three strategies per fleet size (sliced_solver_bench).
try:
    generic = json.load(open(f"{out}/solver_generic.json"))["benchmarks"]
except FileNotFoundError:
    generic = []
worst = {}
for b in generic:
    nodes = int(b["name"].split("/")[1])
    worst[nodes] = max(worst.get(nodes, 0), b["cpu_p99_us"])
if worst:
    ok = all(v <= 5000 for v in worst.values())
    rows.append("| 1,000-bundle generic PG, zone + `!in(spot)` selector: the worst CPU p99 of PACK, SPREAD and "
                "STRICT_SPREAD (sliced_solver_bench `BM_GenericPg1000`) at "
                + "; ".join(f"{n:,}" for n in sorted(worst)) + " nodes | ≤ 5 ms | "
                + "; ".join(f"{worst[n] / 1000:.2f} ms" for n in sorted(worst))
                + (" ✅" if ok else " ❌") + " |")
# Replay: medians over the traces replayed (one in --quick).
seeds = sim.get("replay_seeds") or [{"results": sim["replay"]}]
def med(policy, key):
    return median([r[key] for t in seeds for r in t["results"] if r["policy"] == policy])
for base in ("first-fit", "ray-worst-fit"):
    su, sa, bu, ba = med("sliced", "utilization"), med("sliced", "acceptance"), \
        med(base, "utilization"), med(base, "acceptance")
    # Within 0.1 percentage point counts as equal.
    good = su >= bu - 1e-3 and sa >= ba - 1e-3
    rows.append(f"| TPU utilization / acceptance vs {base} (replay, median of {len(seeds)} traces) | "
                f"≥ (± 0.1 pp) | {100*su:.1f} % / {100*sa:.1f} % vs {100*bu:.1f} % / "
                f"{100*ba:.1f} %{' ✅' if good else ' ❌'} |")
gaps = []
for batch in sim["slice_batches"]:
    sb = [r for r in batch["results"] if r["policy"] == "sliced"][0]
    gaps.append(1 - sb["chips_placed"] / batch["bound_chips"] if batch["bound_chips"] else 0)
gap = median(gaps)
rows.append(f"| whole-slice batch gap to max-flow bound (median of {len(gaps)} seeds; worst) | ≤ 2 % | "
            f"{100*gap:.1f} %; {100*max(gaps):.1f} %{' ✅' if max(gaps) <= 0.02 else ' ❌'} |")

summary = (
    f"**Command**: `{cmd}` (one command; {built}, runs both, and rewrites the "
    f"sections below, between their `bench/run.sh` markers). Raw JSON and the plot: "
    f"`{rel_out}/`. See docs/bench.md.\n\n"
    f"**Run**: {start}, {int(elapsed)//60} min {int(elapsed)%60} s, commit {commit}. "
    f"**Machine**: {ncpu} × {cpu}. Load average (1/5/15 min) {load_start} at the start, "
    f"{load_end} at the end — other work shares these cores, so absolute figures are "
    f"noisy; ratios are measured within one run.\n\n"
    "| against DESIGN §7 | target | measured |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n")

def read(name):
    try:
        return open(f"{out}/{name}").read()
    except FileNotFoundError:
        return "(not run)\n"

quality = read("sim_quality.md").replace("results/quality.svg", f"{rel_out}/quality.svg" if rel_out != "bench/results" else "results/quality.svg")
mixed = read("sim_mixed.md")
if not mixed.startswith("###"):
    mixed = "### Mixed trace (sliced_sim --workload=mixed)\n\n" + mixed
sections = [
    ("harness", "Harness: summary (bench/run.sh)", summary),
    ("load", "End to end over gRPC (sliced_load)", read("load.md")),
    ("go", "End to end over gRPC from a Go client (bench/go_ratio.py)", read("go.md")),
    ("deep-queue", "Churn beside a deep queue (bench/deep_queue.py)", read("deep_queue.md")),
    ("watch-open", "Unfiltered watches opened over many groups (bench/watch_open.py)", read("watch_open.md")),
    ("scale", "Daemon memory and restart (sliced_load)", read("scale.md")),
    ("churn", "Churn: node registrations while placing (sliced_load)", read("churn.md")),
    ("heartbeats", "Heartbeats at scale (sliced_load)", read("heartbeats.md")),
    ("watch", "Watch fan-out (sliced_load)", read("watch.md")),
    ("solver-scaling", "Solver latency on generated fleets (sliced_sim)", read("sim_scaling.md")),
    ("quality", "Placement quality (sliced_sim)", quality),
    ("quality-mixed", None, mixed),
    ("quality-preemption", None, read("sim_preemption.md")),
]
text = open(results).read()
for name, title, body in sections:
    new = section(name, title, body)
    pattern = re.compile(rf"<!-- bench/run.sh:BEGIN {name} -->.*?<!-- bench/run.sh:END {name} -->\n", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda m: new, text)
    else:
        text = text.rstrip("\n") + "\n\n" + new
open(results, "w").write(text)
print(f"wrote {results}", file=sys.stderr)
PY
