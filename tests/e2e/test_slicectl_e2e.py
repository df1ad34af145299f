"""End to end: every slicectl command against the real daemon.

Happy paths, then the failure paths with their exit codes: 2 usage (bad flags,
unknown command, unreadable file), 3 rejected by the server (its code and
message), 4 unreachable, 5 --wait gave up. SLICECTL_BIN is set by CTest.
"""
import json
import os
import pty
import re
import signal
import socket
import subprocess
import tempfile
import threading
import unittest

import grpc
from google.protobuf import json_format

from sliced_testlib import REPO, Daemon, sliced_pb2, sliced_pb2_grpc, temp_data_dir

P = sliced_pb2
SLICECTL = os.environ.get("SLICECTL_BIN", "slicectl")
FLEET = os.path.join(REPO, "examples", "fleet.json")
COST_OPTIMIZED = os.path.join(REPO, "examples", "cost-optimized.json")
SEED = ["submit", "--num-workers", "4", "--use-tpu", "--topology", "4x4",
        "--accelerator-type", "TPU-V6E", "--placement-strategy", "SPREAD"]


def sigint_as(disposition):
    """A preexec_fn that starts the child with SIGINT at `disposition`: SIG_DFL as
    a shell starts a foreground job (whatever this runner inherited; a runner
    started in the background has SIGINT ignored), SIG_IGN as a background one."""
    return lambda: signal.signal(signal.SIGINT, disposition)


def closed_port():
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args, env=None, timeout=60, input=None):
    full_env = dict(os.environ)
    full_env.pop("SLICED_SERVER", None)
    full_env.update(env or {})
    return subprocess.run([SLICECTL] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=input)


class SlicectlEndToEnd(unittest.TestCase):
    def start(self):
        d = Daemon(temp_data_dir(self), "--heartbeat_timeout=0").start()
        self.addCleanup(d.close)
        self.server = "127.0.0.1:%d" % d.port
        return d

    def ctl(self, *args, code=0, **kw):
        r = run("--server", self.server, *args, **kw)
        self.assertEqual(r.returncode, code, "slicectl %s\nstdout: %s\nstderr: %s"
                         % (" ".join(args), r.stdout, r.stderr))
        return r

    def json_of(self, message_cls, *args):
        r = self.ctl("--json", *args)
        return json_format.Parse(r.stdout, message_cls())

    def register_fleet(self):
        r = self.ctl("register", "-f", FLEET)
        self.assertIn("registered 9 nodes", r.stdout)

    def write(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        self.addCleanup(os.unlink, f.name)
        f.write(text)
        f.close()
        return f.name

    # ------------------------------------------------------------ usage (2)

    def test_help_everywhere_and_usage_errors_exit_2(self):
        self.server = "127.0.0.1:%d" % closed_port()  # usage fails before any call
        r = self.ctl("--help")
        for command in ("nodes", "node get ID", "node drain ID", "node undrain ID",
                        "node remove ID", "register", "slices", "submit", "pg create", "pg list",
                        "pg get ID", "pg explain ID", "pg remove ID", "watch",
                        "compute-class put", "compute-class list",
                        "compute-class delete NAME", "summary"):
            self.assertIn(command, r.stdout)
            name = command.replace(" ID", "").replace(" NAME", "")
            h = self.ctl(*name.split(), "--help")
            self.assertIn("Usage: slicectl " + name, h.stdout)
            self.assertIn("--server", h.stdout)
        self.assertIn("--accelerator-type A", self.ctl("submit", "--help").stdout)
        self.assertIn("Usage: slicectl pg list", self.ctl("help", "pg", "list").stdout)

        cases = [
            (["frobnicate"], "unknown command 'frobnicate'"),
            ([], "Usage: slicectl"),
            (["pg"], "'pg' needs a subcommand"),
            (["nodes", "--bogus"], "unknown flag --bogus"),
            (["node", "get"], "'node get' needs ID"),
            (["node", "get", "a", "b"], "'node get' needs ID"),
            (["slices", "extra"], "takes no arguments"),
            (["submit", "--use-tpu"], "--num-workers N is required"),
            (["submit", "--num-workers", "x"], "--num-workers: want an integer"),
            (["submit", "--num-workers"], "--num-workers needs a value"),
            (["submit", "--num-workers", "1", "--use-tpu=yes"], "takes no value"),
            (["submit", "--num-workers", "1", "--resources-per-worker", "TPU=four"],
             "TPU wants a number"),
            (["submit", "--num-workers", "1", "--label-selector", "novalue"],
             "want KEY=VALUE"),
            (["submit", "--num-workers", "1", "--wait-timeout", "5s"],
             "--wait-timeout needs --wait"),
            (["submit", "--num-workers", "1", "--keep"], "--keep needs --wait"),
            (["submit", "--num-workers", "1", "--wait", "--wait-timeout", "0s"],
             "--wait-timeout must be > 0"),
            (["nodes", "--timeout", "soon"], "--timeout: want a duration"),
            (["nodes", "--selector", "=x"], "want KEY=VALUE"),
            (["nodes", "--selector", "a=1", "--selector", "a=2"], "--selector: a given twice"),
            (["nodes", "--timeout", "inf"], "--timeout: want a duration"),
            (["nodes", "--timeout", "nan"], "--timeout: want a duration"),
            (["watch", "--duration", "inf"], "--duration: want a duration"),
            (["submit", "--num-workers", "1", "--resources-per-worker", "CPU=inf"],
             "CPU wants a number"),
            (["pg", "list", "--state", "SLEEPING"], "--state: want PENDING"),
            (["watch", "--count", "0"], "--count"),
            (["register"], "-f FILE is required"),
            (["register", "-f", "/nonexistent/fleet.json"], 'cannot read "/nonexistent/fleet.json"'),
            (["register", "-f", self.write("{not json")], "is not a valid RegisterNodesRequest"),
            (["pg", "create", "-f", self.write('{"bundels": []}')],
             "is not a valid CreatePlacementGroupRequest"),
            (["compute-class", "put", "-f", self.write("{}")], 'no "compute_class"'),
            (["nodes", "--tls-ca", "/nonexistent/ca.pem"], "root_ca_pem: cannot read"),
        ]
        for args, message in cases:
            r = self.ctl(*args, code=2)
            self.assertIn(message, r.stderr, args)

    # ------------------------------------------------------- unreachable (4)

    def test_unreachable_server_exits_4_and_says_where(self):
        server = "127.0.0.1:%d" % closed_port()
        for args in (["nodes"], ["slices"], SEED, ["pg", "list"], ["pg", "remove", "pg-1"],
                     ["watch", "--count", "1"], ["summary"], ["register", "-f", FLEET]):
            r = run("--server", server, "--timeout", "5s", *args)
            self.assertEqual(r.returncode, 4, (args, r.stderr))
            self.assertIn("cannot reach sliced at " + server, r.stderr)
            self.assertIn("UNAVAILABLE", r.stderr)
        r = run("nodes", env={"SLICED_SERVER": server})
        self.assertEqual(r.returncode, 4)
        self.assertIn(server, r.stderr)

    def test_a_create_with_an_unknown_outcome_names_its_request_id(self):
        # Every attempt may have landed ("may or may not have been applied"):
        # the error names the one request id they all carried, so a rerun
        # with it gets that group, not a second one.
        from concurrent import futures
        seen = []

        class Placement(sliced_pb2_grpc.PlacementServicer):
            def SubmitScalingConfig(self, request, context):
                if request.job_id == "bad":
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "job_id: bad")
                if request.job_id == "wait":
                    return P.PlacementGroup(placement_group_id="pg-1", state=P.PENDING)
                seen.append(request.request_id)
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              "the commit may or may not have been applied")

            def GetPlacementGroup(self, request, context):
                return P.PlacementGroup(placement_group_id="pg-1", state=P.PENDING)

            def WatchPlacementGroups(self, request, context):
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "viewers only")

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        sliced_pb2_grpc.add_PlacementServicer_to_server(Placement(), server)
        self.server = "127.0.0.1:%d" % server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        r = self.ctl("--timeout", "3s", *SEED, code=4)
        self.assertGreater(len(seen), 1)
        self.assertEqual(len(set(seen)), 1, seen)
        self.assertIn("the group may exist: run again with --request-id %s to get it"
                      % seen[0], r.stderr)
        # A rejection is a definite answer: no such hint.
        r = self.ctl("--timeout", "3s", *SEED, "--job-id", "bad", code=3)
        self.assertIn("INVALID_ARGUMENT: job_id: bad", r.stderr)
        self.assertNotIn("--request-id", r.stderr)
        # A --wait that fails names the group it leaves (--json printed none).
        r = self.ctl("--json", *SEED, "--job-id", "wait", "--wait", code=3)
        self.assertIn("waiting for placement group pg-1: viewers only; it stays as it is",
                      r.stderr)

    def test_a_silent_watch_tells_a_stopped_daemon_from_a_quiet_one(self):
        d = self.start()
        # Nothing to report: --duration ends it, exit 0.
        r = self.ctl("watch", "--duration", "0.3s")
        self.assertEqual(r.stdout, "")
        # A --pg that does not exist says so once the watch ends.
        r = self.ctl("watch", "--pg", "pg-nope", "--duration", "0.3s", code=3)
        self.assertIn("NOT_FOUND", r.stderr)
        # A daemon that answers nothing (stopped) is unreachable, not quiet.
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            r = self.ctl("--timeout", "1s", "watch", "--duration", "0.5s", code=4)
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        self.assertIn("cannot reach sliced at " + self.server, r.stderr)

    # ---------------------------------------------------------- inventory

    def test_inventory_commands(self):
        self.start()
        self.register_fleet()
        got = self.json_of(P.RegisterNodesResponse, "register", "-f", FLEET)
        self.assertEqual(len(got.nodes), 9)

        r = self.ctl("nodes")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split()[:3], ["NODE", "STATE", "ADDRESS"])
        self.assertEqual(len(lines), 10)
        self.assertNotIn("\033[", r.stdout)  # not a TTY: no colour
        row = next(l.split() for l in lines if l.startswith("v6e-a-w2"))
        self.assertEqual(row[:9], ["v6e-a-w2", "ALIVE", "10.0.1.12", "TPU-V6E", "4x4",
                                   "v6e-a", "2", "spot", "180/180"])
        # The header and the rows line up.
        self.assertEqual(lines[0].index("STATE"), lines[1].index("ALIVE"))

        nodes = self.json_of(P.ListNodesResponse, "nodes", "--selector",
                             "ray.io/accelerator-type=in(TPU-V6E,TPU-V4)",
                             "--selector", "sliced.io/capacity-tier=!spot")
        self.assertEqual([n.node_id for n in nodes.nodes], ["v4-b-w0", "v4-b-w1"])
        r = self.ctl("nodes", "--selector", "ray.io/accelerator-type=in(", code=3)
        self.assertIn("INVALID_ARGUMENT: ", r.stderr)
        # SLICED_SERVER stands in for --server.
        env_run = run("nodes", env={"SLICED_SERVER": self.server})
        self.assertEqual(env_run.returncode, 0, env_run.stderr)

        r = self.ctl("node", "get", "v6e-a-w0")
        self.assertIn("ray.io/tpu-slice-name=v6e-a", r.stdout)
        self.assertRegex(r.stdout, r"TPU\s+4\s+4")
        node = self.json_of(P.Node, "node", "get", "v4-b-w1")
        self.assertEqual(node.labels["ray.io/tpu-worker-id"], "1")
        r = self.ctl("node", "get", "nope", code=3)
        self.assertTrue(r.stderr.startswith("slicectl: NOT_FOUND: "), r.stderr)

        r = self.ctl("slices")
        self.assertIn("TPU-V4 2x2x2 (v4-16, 2 hosts per slice): 1 slice, 1 free", r.stdout)
        self.assertIn("TPU-V6E 4x4 (v6e-16, 4 hosts per slice): 1 slice, 1 free", r.stdout)
        self.assertRegex(r.stdout, r"v6e-a\s+free\s+4/4")
        slices = self.json_of(P.ListSlicesResponse, "slices")
        self.assertEqual(sorted(s.name for s in slices.slices), ["v4-b", "v6e-a"])

        r = self.ctl("node", "drain", "cpu-0")
        self.assertIn("node cpu-0 is DRAINING", r.stdout)
        self.assertEqual(self.json_of(P.Node, "node", "get", "cpu-0").state, P.DRAINING)
        self.assertEqual(self.json_of(P.Node, "node", "drain", "cpu-0").state, P.DRAINING)
        r = self.ctl("node", "undrain", "cpu-0")
        self.assertIn("node cpu-0 is ALIVE: it takes new placements again", r.stdout)
        self.assertEqual(self.json_of(P.Node, "node", "undrain", "cpu-0").state, P.ALIVE)
        self.assertEqual(self.json_of(P.Node, "node", "drain", "cpu-0").state, P.DRAINING)
        # A dead node stays dead; drained, it comes back DRAINING.
        with grpc.insecure_channel(self.server) as ch:
            sliced_pb2_grpc.InventoryStub(ch).Heartbeat(P.HeartbeatRequest(heartbeats=[
                P.NodeHeartbeat(node_id="cpu-2", state=P.DEAD)]), timeout=10)
        r = self.ctl("node", "drain", "cpu-2")
        self.assertIn("node cpu-2 is DEAD; it comes back DRAINING", r.stdout)
        self.assertTrue(self.json_of(P.Node, "node", "get", "cpu-2").drain_when_back)
        self.assertRegex(self.ctl("nodes").stdout, r"cpu-2\s+DEAD,DRAIN-WHEN-BACK\s")
        r = self.ctl("node", "undrain", "cpu-2")
        self.assertIn("node cpu-2 is DEAD; it comes back ALIVE", r.stdout)
        self.assertFalse(self.json_of(P.Node, "node", "get", "cpu-2").drain_when_back)
        self.assertIn("removed node cpu-0", self.ctl("node", "remove", "cpu-0").stdout)
        self.assertEqual(self.ctl("--json", "node", "remove", "cpu-1").stdout.strip(), "{}")
        r = self.ctl("node", "remove", "cpu-0", code=3)
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertEqual(len(self.json_of(P.ListNodesResponse, "nodes").nodes), 7)

        # Re-registering a node that turned out wrong is rejected as a whole.
        bad = self.write(json.dumps({"nodes": [{"node_id": "x", "labels": {"bad key!": "v"},
                                                 "resources": {"CPU": 1}}]}))
        r = self.ctl("register", "-f", bad, code=3)
        self.assertIn("INVALID_ARGUMENT: ", r.stderr)

    # ------------------------------------------------------------ placement

    def test_submit_wait_list_explain_watch_remove(self):
        self.start()
        self.register_fleet()
        r = self.ctl(*SEED, "--job-id", "job-1", "--wait")
        self.assertIn("state            CREATED", r.stdout)
        self.assertIn("TPU_WORKER_HOSTNAMES=10.0.1.10,10.0.1.11,10.0.1.12,10.0.1.13",
                      r.stdout)
        self.assertRegex(r.stdout, r"3\s+v6e-a-w3\s+10\.0\.1\.13\s+v6e-a\s+3")
        first = json_format.Parse(self.ctl("--json", "pg", "list").stdout,
                                  P.ListPlacementGroupsResponse()).placement_groups[0]
        self.assertEqual(first.state, P.CREATED)
        self.assertEqual(first.job_id, "job-1")
        self.assertTrue(first.request_id, "a generated request id")

        # The only v6e slice is held: the second waits, and --wait gives up,
        # removing the group it made unless --keep.
        r = self.ctl(*SEED, "--request-id", "gives-up", "--wait", "--wait-timeout", "1s",
                     code=5)
        self.assertIn("still PENDING", r.stderr)
        self.assertIn("v6e-16", r.stderr)
        gone = re.search(r"removed placement group (pg-\w+) \(--keep keeps it\)", r.stderr)
        self.assertTrue(gone, r.stderr)
        self.ctl("pg", "get", gone.group(1), code=3)
        r = self.ctl(*SEED, "--request-id", "second", "--wait", "--wait-timeout", "1s",
                     "--keep", code=5)
        self.assertRegex(r.stderr, r"placement group pg-\w+ stays queued \(--keep\)")
        second = self.json_of(P.PlacementGroup, *SEED, "--request-id", "second")
        self.assertEqual(second.state, P.PENDING)  # the same group: idempotent
        pgs = self.json_of(P.ListPlacementGroupsResponse, "pg", "list").placement_groups
        self.assertEqual(len(pgs), 2)
        pending = self.json_of(P.ListPlacementGroupsResponse, "pg", "list", "--state",
                               "pending").placement_groups
        self.assertEqual([p.placement_group_id for p in pending], [second.placement_group_id])
        mine = self.json_of(P.ListPlacementGroupsResponse, "pg", "list", "--job", "job-1")
        self.assertEqual([p.placement_group_id for p in mine.placement_groups],
                         [first.placement_group_id])
        table = self.ctl("pg", "list").stdout
        self.assertRegex(table, r"%s\s+PENDING" % second.placement_group_id)

        r = self.ctl("pg", "explain", second.placement_group_id)
        self.assertRegex(r.stdout, r"outcome\s+UNSCHEDULABLE")
        self.assertIn("held", r.stdout)
        explain = self.json_of(P.ExplainPlacementGroupResponse, "pg", "explain",
                               second.placement_group_id)
        self.assertEqual(explain.outcome.lower(), "unschedulable")

        r = self.ctl("watch", "--count", "2")
        self.assertEqual(len(r.stdout.splitlines()), 2)
        self.assertIn(first.placement_group_id + "  CREATED", r.stdout)
        r = self.ctl("--json", "watch", "--duration", "0.5s")
        events = [json_format.Parse(l, P.PlacementGroupEvent()) for l in r.stdout.splitlines()]
        self.assertEqual(len(events), 2)

        # A --wait in the background finishes when the first group is removed.
        # Each waits for its own event before the remove: the waiter prints
        # that it is waiting (the group was PENDING when it asked), the watcher
        # prints the current state first.
        waiter = subprocess.Popen(
            [SLICECTL, "--server", self.server, *SEED, "--request-id", "second",
             "--wait", "--wait-timeout", "60s"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        watcher = subprocess.Popen(
            [SLICECTL, "--server", self.server, "watch", "--pg",
             second.placement_group_id, "--count", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(waiter.stdout.readline(),
                         "submitted %s (PENDING); waiting until it is CREATED...\n"
                         % second.placement_group_id)
        first_line = watcher.stdout.readline()
        self.assertEqual(first_line.split()[1:3], [second.placement_group_id, "PENDING"])
        r = self.ctl("pg", "remove", first.placement_group_id)
        self.assertIn("removed placement group " + first.placement_group_id, r.stdout)
        out, err = waiter.communicate(timeout=60)
        self.assertEqual(waiter.returncode, 0, err)
        self.assertRegex(out, r"state\s+CREATED")
        self.assertEqual(len(re.findall(r"^worker \d+ env", out, re.M)), 4)
        out, err = watcher.communicate(timeout=60)
        self.assertEqual(watcher.returncode, 0, err)
        self.assertEqual([l.split()[2] for l in [first_line] + out.splitlines()],
                         ["PENDING", "CREATED"])
        # --json --wait on the now CREATED group prints it at once.
        r = self.ctl("--json", *SEED, "--request-id", "second", "--wait")
        done = json_format.Parse(r.stdout, P.PlacementGroup())
        # One spelling: proto field names, as grpcurl and the Python client.
        self.assertIn('"placement_group_id"', r.stdout)
        self.assertNotIn('"placementGroupId"', r.stdout)
        self.assertEqual(done.placement_group_id, second.placement_group_id)
        self.assertEqual(done.state, P.CREATED)
        self.assertEqual(len(done.workers), 4)

        got = self.json_of(P.PlacementGroup, "pg", "get", second.placement_group_id)
        self.assertEqual(got.state, P.CREATED)
        r = self.ctl("pg", "get", first.placement_group_id, code=3)
        self.assertIn("NOT_FOUND: ", r.stderr)
        r = self.ctl("pg", "remove", first.placement_group_id, code=3)
        self.assertIn("NOT_FOUND: ", r.stderr)

        # watch --pg ends by itself once its group is removed.
        watcher = subprocess.Popen(
            [SLICECTL, "--server", self.server, "watch", "--pg", second.placement_group_id],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first_line = watcher.stdout.readline()
        self.assertEqual(first_line.split()[1:3], [second.placement_group_id, "CREATED"])
        self.ctl("pg", "remove", second.placement_group_id)
        out, err = watcher.communicate(timeout=60)
        self.assertEqual(watcher.returncode, 0, err)
        self.assertEqual([l.split()[2] for l in out.splitlines()], ["REMOVED"])
        # Removed groups are not kept, so they cannot be listed.
        r = self.ctl("pg", "list", "--state", "removed", code=2)
        self.assertIn("REMOVED groups are not kept", r.stderr)

    def start_waiting(self, sigint, *flags):
        """Starts `submit … --wait` with SIGINT at `sigint`, for a seed that stays
        PENDING; returns the process once it waits, and its group's id."""
        proc = subprocess.Popen(
            [SLICECTL, "--server", self.server, *SEED, "--wait", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=sigint_as(sigint))
        self.addCleanup(proc.kill)
        line = proc.stdout.readline()
        waiting = re.match(r"submitted (pg-\w+) \(PENDING\); waiting", line)
        if not waiting:
            proc.kill()
            self.fail(line + "".join(proc.communicate(timeout=60)))
        return proc, waiting.group(1)

    def test_ctrl_c_during_wait_removes_the_group_unless_kept(self):
        self.start()
        self.register_fleet()
        self.ctl(*SEED, "--request-id", "holder")  # the only v6e slice
        for keep in ([], ["--keep"]):
            proc, pg_id = self.start_waiting(signal.SIG_DFL, *keep)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 130, err)
            if keep:
                self.assertIn("slicectl: interrupted; placement group %s stays queued "
                              "(--keep)" % pg_id, err)
                self.assertEqual(self.json_of(P.PlacementGroup, "pg", "get", pg_id).state,
                                 P.PENDING)
            else:
                self.assertIn("slicectl: interrupted; removed placement group %s "
                              "(--keep keeps it)" % pg_id, err)
                self.ctl("pg", "get", pg_id, code=3)

    def test_a_background_waits_ignored_sigint_stays_ignored(self):
        # Started as a shell starts a background job (SIGINT ignored): a
        # SIGINT changes nothing; SIGTERM still removes the group.
        self.start()
        self.register_fleet()
        self.ctl(*SEED, "--request-id", "holder")  # the only v6e slice
        proc, pg_id = self.start_waiting(signal.SIG_IGN)
        proc.send_signal(signal.SIGINT)
        with self.assertRaises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        self.assertEqual(self.json_of(P.PlacementGroup, "pg", "get", pg_id).state,
                         P.PENDING)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 143, err)
        self.assertIn("slicectl: interrupted; removed placement group %s "
                      "(--keep keeps it)" % pg_id, err)
        self.ctl("pg", "get", pg_id, code=3)

    def test_ctrl_c_before_the_answer_names_the_request_id(self):
        # The daemon holds the create: Ctrl-C cannot know whether the group
        # exists, so it names the request id that finds it.
        from concurrent import futures
        arrived, release = threading.Event(), threading.Event()
        seen = []

        class Placement(sliced_pb2_grpc.PlacementServicer):
            def SubmitScalingConfig(self, request, context):
                seen.append(request.request_id)
                arrived.set()
                release.wait(30)
                return P.PlacementGroup(placement_group_id="pg-1", state=P.PENDING)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        sliced_pb2_grpc.add_PlacementServicer_to_server(Placement(), server)
        address = "127.0.0.1:%d" % server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        self.addCleanup(release.set)
        for wait in ([], ["--wait"]):
            arrived.clear()
            proc = subprocess.Popen([SLICECTL, "--server", address, *SEED, *wait],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, preexec_fn=sigint_as(signal.SIG_DFL))
            self.addCleanup(proc.kill)
            self.assertTrue(arrived.wait(30), wait)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 130, (wait, err))
            self.assertIn("slicectl: interrupted before sliced answered; the group may "
                          "exist: run again with --request-id %s to get it" % seen[-1], err)

    def test_rejected_and_infeasible_submissions_exit_3(self):
        self.start()
        self.register_fleet()
        cases = [
            (["submit", "--num-workers", "4", "--use-tpu", "--accelerator-type", "TPU-V6E"],
             "INVALID_ARGUMENT: ",
             "`topology` must be specified in ScalingConfig when `use_tpu=True` and "
             "`num_workers` > 1"),
            (["submit", "--num-workers", "1", "--use-tpu", "--use-gpu", "--topology", "2x2",
              "--accelerator-type", "TPU-V6E"],
             "INVALID_ARGUMENT: ", "Cannot specify both `use_gpu=True` and `use_tpu=True`"),
            (SEED[:2] + ["3"] + SEED[3:], "INVALID_ARGUMENT: ", "num_workers"),
            (SEED + ["--compute-class", "no-such-class"], "", "no-such-class"),
            (SEED + ["--tpu-resource-per-chip", "2"], "INVALID_ARGUMENT: ",
             "scaling_config.tpu_resource_per_chip: must be 1 on v6e"),
        ]
        for args, code_name, message in cases:
            r = self.ctl(*args, code=3)
            self.assertIn(message, r.stderr, args)
            self.assertTrue(r.stderr.startswith("slicectl: " + code_name), r.stderr)
        self.assertEqual(self.json_of(P.ListPlacementGroupsResponse, "pg", "list"),
                         P.ListPlacementGroupsResponse())
        # No v6e 4x8 slice exists: INFEASIBLE; with --wait that exits 3.
        r = self.ctl("submit", "--num-workers", "8", "--use-tpu", "--topology", "4x8",
                     "--accelerator-type", "TPU-V6E", "--wait", code=3)
        self.assertIn("INFEASIBLE", r.stderr)
        self.assertIn("state            INFEASIBLE", r.stdout)

    def test_preemption_flags_and_rows(self):
        self.start()
        self.register_fleet()
        r = self.ctl(*SEED, "--priority-class", "batch", "--on-preemption", "REMOVE")
        self.assertRegex(r.stdout, r"preemption\s+PREEMPT_LOWER_PRIORITY, when preempted REMOVE")
        victim = re.search(r"placement group\s+(pg-\w+)", r.stdout).group(1)
        r = self.ctl(*SEED, "--priority-class", "production", "--preemption-policy", "NEVER")
        self.assertRegex(r.stdout, r"state\s+PENDING")
        self.assertRegex(r.stdout, r"preemption\s+NEVER, when preempted REQUEUE")
        self.assertNotIn("preempting", r.stdout)
        r = self.ctl(*SEED, "--priority-class", "production")
        preemptor = re.search(r"placement group\s+(pg-\w+)", r.stdout).group(1)
        self.assertRegex(r.stdout, r"preempting\s+%s, placed at " % victim)
        r = self.ctl("pg", "get", victim)
        self.assertRegex(r.stdout, r"state\s+PREEMPTING")
        self.assertRegex(r.stdout, r"preempted by\s+%s, leaves at " % preemptor)
        r = self.ctl("pg", "list", "--state", "preempting")
        self.assertIn(victim, r.stdout)
        for flag, value, want in (("--preemption-policy", "SOMETIMES",
                                   "--preemption-policy: PREEMPT_LOWER_PRIORITY or NEVER"),
                                  ("--on-preemption", "KEEP", "--on-preemption: REQUEUE or REMOVE")):
            r = self.ctl(*SEED, flag, value, code=2)
            self.assertIn(want, r.stderr)

    def test_pg_create_and_compute_classes(self):
        self.start()
        self.register_fleet()
        r = self.ctl("compute-class", "put", "-f", COST_OPTIMIZED)
        self.assertIn("compute class cost-optimized: 3 priorities, WAIT", r.stdout)
        bare = self.write(json.dumps({"name": "spot-only", "when_unsatisfiable": "FAIL",
                                      "priorities": [{"label_selector": {
                                          "sliced.io/capacity-tier": "spot"}}]}))
        got = self.json_of(P.ComputeClass, "compute-class", "put", "-f", bare)
        self.assertEqual(got.when_unsatisfiable, P.FAIL)
        # The same bare class on stdin (read once, parsed as either form).
        with open(bare) as f:
            r = self.ctl("compute-class", "put", "-f", "-", input=f.read())
        self.assertIn("compute class spot-only", r.stdout)
        r = self.ctl("compute-class", "list")
        self.assertRegex(r.stdout, r"cost-optimized\s+WAIT\s+1\. sliced.io/capacity-tier=spot")
        self.assertRegex(r.stdout, r"spot-only\s+FAIL")
        classes = self.json_of(P.ListComputeClassesResponse, "compute-class", "list")
        self.assertEqual(sorted(c.name for c in classes.compute_classes),
                         ["cost-optimized", "spot-only"])
        invalid = self.write(json.dumps({"compute_class": {"name": "bad", "priorities": [
            {"label_selector": {"bad key!": "x"}}]}}))
        r = self.ctl("compute-class", "put", "-f", invalid, code=3)
        self.assertIn("INVALID_ARGUMENT: ", r.stderr)

        pg_file = self.write(json.dumps({
            "bundles": [{"resources": {"CPU": 4}}, {"resources": {"CPU": 4}}],
            "strategy": "STRICT_SPREAD", "job_id": "job-2",
            "compute_class": "cost-optimized"}))
        r = self.ctl("pg", "create", "-f", pg_file, "--wait")
        # Numbered as `compute-class list` numbers them.
        self.assertRegex(r.stdout, r"compute class\s+cost-optimized \(placed on priority 1\)")
        self.assertRegex(r.stdout, r"0\s+v6e-a-w\d\s+CPU=4")
        pgs = self.json_of(P.ListPlacementGroupsResponse, "pg", "list", "--job", "job-2")
        pg = pgs.placement_groups[0]
        self.assertEqual(pg.state, P.CREATED)
        self.assertEqual(len({b.node_id for b in pg.bundles}), 2)
        too_big = self.write(json.dumps({"bundles": [{"resources": {"CPU": 1000}}],
                                         "compute_class": "spot-only"}))
        r = self.ctl("pg", "create", "-f", too_big, code=3)
        self.assertIn("FAILED_PRECONDITION: ", r.stderr)

        r = self.ctl("compute-class", "delete", "cost-optimized", code=3)
        self.assertIn("FAILED_PRECONDITION: ", r.stderr)
        self.ctl("pg", "remove", pg.placement_group_id)
        r = self.ctl("compute-class", "delete", "cost-optimized")
        self.assertIn("deleted compute class cost-optimized", r.stdout)
        r = self.ctl("compute-class", "delete", "cost-optimized", code=3)
        self.assertIn("NOT_FOUND: ", r.stderr)

    def test_summary_prints_the_summary_or_the_servers_message(self):
        self.start()
        self.register_fleet()
        r = run("--server", self.server, "summary")
        if r.returncode == 3:  # Telemetry is not built yet: the server says so
            self.assertTrue(r.stderr.startswith("slicectl: UNIMPLEMENTED: "), r.stderr)
            return
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("pending placement groups", r.stdout)
        self.assertRegex(r.stdout, r"TPU-V6E\s+4x4\s+spot\s+us-east5-b\s+1/1\s+16")
        self.json_of(P.GetClusterSummaryResponse, "summary")

    def test_states_are_coloured_only_on_a_tty(self):
        self.start()
        self.register_fleet()
        leader, follower = pty.openpty()
        env = dict(os.environ, TERM="xterm")
        env.pop("NO_COLOR", None)
        proc = subprocess.Popen([SLICECTL, "--server", self.server, "nodes"],
                                stdout=follower, stderr=subprocess.PIPE, env=env)
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=30)
        os.close(leader)
        self.assertEqual(proc.returncode, 0)
        self.assertIn(b"\033[32mALIVE\033[0m", out)
        # Alignment is computed without the escape codes.
        lines = out.decode().replace("\r", "").splitlines()
        self.assertEqual(lines[0].index("ADDRESS"),
                         lines[1].replace("\033[32m", "").replace("\033[0m", "").index("10.0.0.10"))


def start_secure_daemon(test, mutual_tls):
    """A daemon with TLS (server cert for 127.0.0.1), bearer tokens for every
    role (the security tests' TOKENS), and client certificates required when
    `mutual_tls`. Returns (daemon, pki paths, {role: token file})."""
    from test_security_e2e import TOKENS, make_pki  # the shared test PKI
    tmp = tempfile.TemporaryDirectory(prefix="client-pki-")
    test.addCleanup(tmp.cleanup)
    pki = make_pki(tmp.name)
    tokens = os.path.join(tmp.name, "tokens")
    token_files = {}
    with open(tokens, "w") as f:
        for role, token in TOKENS.items():
            f.write("%s %s%s\n" % (token, role, " n1" if role == "agent" else ""))
            token_files[role] = os.path.join(tmp.name, role + ".token")
            with open(token_files[role], "w") as tf:
                tf.write(token + "\n")
    d = Daemon(temp_data_dir(test), "--heartbeat_timeout=0",
               "--tls_cert=" + pki["server.pem"], "--tls_key=" + pki["server.key"],
               "--auth_tokens=" + tokens,
               *(["--tls_client_ca=" + pki["ca.pem"]] if mutual_tls else [])).start()
    test.addCleanup(d.close)
    return d, pki, token_files


class SlicectlSecurityEndToEnd(unittest.TestCase):
    """--tls-ca/--tls-cert/--tls-key and --token-file / SLICED_TOKEN against a
    daemon with mutual TLS and bearer tokens."""

    def test_mutual_tls_and_tokens(self):
        from test_security_e2e import TOKENS
        d, pki, token_files = start_secure_daemon(self, mutual_tls=True)
        server = "127.0.0.1:%d" % d.port
        tls = ["--server", server, "--tls-ca", pki["ca.pem"], "--tls-cert", pki["client.pem"],
               "--tls-key", pki["client.key"]]

        r = run(*tls, "--token-file", token_files["admin"], "register", "-f", FLEET)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run(*tls, "nodes", env={"SLICED_TOKEN": TOKENS["viewer"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), 10)
        r = run(*tls, *SEED, "--wait", env={"SLICED_TOKEN": TOKENS["scheduler"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("TPU_WORKER_ID=3", r.stdout)

        r = run(*tls, "nodes")  # no token
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertTrue(r.stderr.startswith("slicectl: UNAUTHENTICATED: "), r.stderr)
        r = run(*tls, *SEED, env={"SLICED_TOKEN": TOKENS["viewer"]})
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertTrue(r.stderr.startswith("slicectl: PERMISSION_DENIED: "), r.stderr)
        # No client certificate, or no TLS at all: the handshake fails.
        r = run("--server", server, "--tls-ca", pki["ca.pem"], "--timeout", "3s", "nodes",
                env={"SLICED_TOKEN": TOKENS["viewer"]})
        self.assertEqual(r.returncode, 4, r.stderr)
        r = run("--server", server, "--timeout", "3s", "nodes",
                env={"SLICED_TOKEN": TOKENS["viewer"]})
        self.assertEqual(r.returncode, 4, r.stderr)
        r = run(*tls, "--token-file", os.path.join(os.path.dirname(token_files["admin"]), "missing"), "nodes")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--token-file: cannot read", r.stderr)


if __name__ == "__main__":
    unittest.main()
