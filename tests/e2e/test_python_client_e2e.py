"""End to end: the Python client (client/python/sliced_client) and
examples/jaxtrainer_example.py against the real daemon."""
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
from google.protobuf import json_format

from sliced_testlib import (REPO, Caller, Daemon, TcpProxy, first_event_then, sliced_pb2,
                            sliced_pb2_grpc, temp_data_dir)

sys.path.insert(0, os.path.join(REPO, "client", "python"))
import sliced_client  # noqa: E402
from sliced_client import Client, ScalingConfig, SlicedError  # noqa: E402

P = sliced_pb2
SEED = ScalingConfig(use_tpu=True, num_workers=4, topology="4x4",
                     accelerator_type="TPU-V6E", placement_strategy="SPREAD")
V4 = ScalingConfig(use_tpu=True, num_workers=2, topology="2x2x2", accelerator_type="TPU-V4")
EXAMPLE = os.path.join(REPO, "examples", "jaxtrainer_example.py")


def register_demo_fleet(port):
    with open(os.path.join(REPO, "examples", "fleet.json")) as f:
        request = json_format.Parse(f.read(), P.RegisterNodesRequest())
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        sliced_pb2_grpc.InventoryStub(ch).RegisterNodes(request, timeout=10)


class SilentWatch(sliced_pb2_grpc.PlacementServicer):
    """Opens every watch (noting when in `opened`) and sends nothing until
    the client goes."""

    def __init__(self, opened):
        self.opened = opened

    def WatchPlacementGroups(self, request, context):
        self.opened.append(time.monotonic())
        while context.is_active():
            time.sleep(0.02)
        return
        yield  # a generator that sends nothing


class PythonClientEndToEnd(unittest.TestCase):
    def start(self):
        d = Daemon(temp_data_dir(self), "--heartbeat_timeout=0").start()
        self.addCleanup(d.close)
        register_demo_fleet(d.port)
        client = Client("127.0.0.1:%d" % d.port)
        self.addCleanup(client.close)
        return d, client

    def test_scaling_config_has_ray_trains_names_and_defaults(self):
        fields = {f.name: f.default for f in dataclasses.fields(ScalingConfig)}
        self.assertEqual(fields, {
            "num_workers": 1, "use_gpu": False, "resources_per_worker": None,
            "placement_strategy": "PACK", "accelerator_type": None, "use_tpu": False,
            "topology": None, "label_selector": None, "tpu_resource_per_chip": None,
            # sliced's own (sub-slices): None = only when the exact shape is missing.
            "allow_subslice": None})
        self.assertEqual(sorted(sliced_client.__all__), sorted(
            ["Bundle", "Client", "DEFAULT_ADDRESS", "Explanation", "Node",
             "PlacementGroup", "PreemptionListener", "ScalingConfig", "SlicedError",
             "Worker"]))
        self.assertEqual(sliced_client.DEFAULT_ADDRESS, "127.0.0.1:50051")

    def test_submit_wait_get_explain_remove(self):
        _, client = self.start()
        with client:
            pg = client.submit(SEED, job_id="job-1", request_id="try-1")
            self.assertEqual(pg.state, "CREATED", pg.pending_reason)
            self.assertTrue(pg.ready)
            self.assertEqual(client.submit(SEED, job_id="job-1", request_id="try-1").id, pg.id)
            # Proto field names, as `slicectl --json` and grpcurl print them.
            self.assertEqual(dataclasses.asdict(pg)["placement_group_id"], pg.id)
            ready = client.wait_ready(pg, timeout=10)
            self.assertEqual(ready.slice_names, ["v6e-a"])
            self.assertEqual([w.rank for w in ready.workers], [0, 1, 2, 3])
            self.assertEqual([w.node_id for w in ready.workers],
                             ["v6e-a-w%d" % i for i in range(4)])
            hosts = ",".join("10.0.1.1%d" % i for i in range(4))
            for w in ready.workers:
                self.assertEqual(w.env["TPU_WORKER_HOSTNAMES"], hosts)
                self.assertEqual(w.env["TPU_WORKER_ID"], str(w.tpu_worker_id))
                self.assertEqual(w.slice_name, "v6e-a")
            self.assertEqual(client.get(pg.id), ready)
            self.assertEqual(client.get(pg).job_id, "job-1")
            # (What Explain says of a CREATED group is the server's business.)
            self.assertTrue(client.explain(pg.id).summary)

            # The only v6e slice is held: a second one waits, and says why.
            second = client.submit(SEED)
            self.assertEqual(second.state, "PENDING")
            self.assertTrue(second.request_id.startswith("req-"))
            why = client.explain(second)
            self.assertEqual(why.outcome.lower(), "unschedulable")
            self.assertIn("held", why.summary)
            dry = client.explain(SEED)
            self.assertEqual(dry.outcome.lower(), "unschedulable")
            with self.assertRaises(SlicedError) as err:
                client.wait_ready(second, timeout=0.5)
            self.assertEqual(err.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertIn("still PENDING", err.exception.message)
            self.assertEqual([p.id for p in client.placement_groups(state="pending")],
                             [second.id])
            self.assertEqual([p.id for p in client.placement_groups(job_id="job-1")], [pg.id])

            # Removing the first lets the second through; wait_ready sees it.
            # wait_ready watches; its watch has subscribed once the first event
            # (the current state, PENDING) has arrived.
            done = []
            watching = threading.Event()
            watch = client._watch

            class Announcing:
                def __init__(self, events):
                    self.events = events

                def __iter__(self):
                    for event in self.events:
                        watching.set()
                        yield event

                def close(self):
                    self.events.close()
            client._watch = lambda *a, **kw: Announcing(watch(*a, **kw))
            t = threading.Thread(target=lambda: done.append(client.wait_ready(second, 30)))
            t.start()
            self.assertTrue(watching.wait(20))
            client._watch = watch
            client.remove(pg)
            t.join(timeout=30)
            self.assertEqual(done[0].state, "CREATED")
            self.assertEqual(done[0].slice_names, ["v6e-a"])
            with self.assertRaises(SlicedError) as err:
                client.get(pg)
            self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(SlicedError) as err:
                client.remove(pg)
            self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(SlicedError) as err:
                client.wait_ready("pg-nope", timeout=1)
            self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_watch_yields_current_state_then_changes(self):
        _, client = self.start()
        first = client.submit(SEED, job_id="a")
        second = client.submit(SEED, job_id="b")
        seen = []
        events = client.watch(job_id="b", timeout=30)

        def on_event(pg):
            seen.append((pg.id, pg.state))
            return pg.state == "CREATED"
        # Subscribed once the current state (PENDING) has arrived.
        t = first_event_then(events, on_event)
        client.remove(first)
        t.join(timeout=30)
        events.close()
        self.assertEqual(seen, [(second.id, "PENDING"), (second.id, "CREATED")])
        with self.assertRaises(SlicedError) as err:
            list(client.watch(timeout=0.3))
        self.assertEqual(err.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_priority_classes_and_the_preemption_dry_run(self):
        _, client = self.start()
        with client:
            batch = client.submit(SEED, priority_class="batch")
            self.assertEqual(batch.state, "CREATED", batch.pending_reason)
            self.assertEqual((batch.priority_class, batch.priority), ("batch", 100))
            self.assertEqual(client.get(batch.id).priority_class, "batch")
            plain = client.create_placement_group([{"CPU": 1}])
            self.assertEqual((plain.priority_class, plain.priority), ("best-effort", 0))
            for kwargs, field in (({"priority_class": "urgent"}, "priority_class"),
                                  ({"priority_class": "batch", "priority": 5}, "priority")):
                with self.assertRaises(SlicedError) as err:
                    client.submit(SEED, **kwargs)
                self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertTrue(err.exception.message.startswith(field + ": "),
                                err.exception.message)
            # A production dry run on the full v6e fleet names the victim
            # preemption would take; nothing happens to it.
            why = client.explain(SEED, priority_class="production")
            self.assertEqual(why.outcome.lower(), "unschedulable")
            self.assertIn("preemption: "
                          "preempting 1 group(s) of priority <= 100 makes room: "
                          "%s (batch, 16 TPU on slice v6e-a)" % batch.id, why.details)
            self.assertEqual(client.get(batch.id).state, "CREATED")
            # An equal priority never takes the batch group; the best-effort
            # CPU group alone would not free the slice.
            what_if = [d for d in client.explain(SEED, priority_class="batch").details
                       if d.startswith("preemption: ")]
            self.assertEqual(len(what_if), 1, what_if)
            self.assertIn("would not make room", what_if[0])
            self.assertNotIn(batch.id, what_if[0])

    def test_nodes_with_selectors(self):
        _, client = self.start()
        nodes = client.nodes()
        self.assertEqual(len(nodes), 9)
        v4 = client.nodes({"ray.io/accelerator-type": "in(TPU-V6E,TPU-V4)",
                           "sliced.io/capacity-tier": "!spot"})
        self.assertEqual([n.node_id for n in v4], ["v4-b-w0", "v4-b-w1"])
        self.assertEqual(v4[0].state, "ALIVE")
        self.assertEqual(v4[0].labels["ray.io/tpu-slice-name"], "v4-b")
        self.assertEqual(v4[0].resources["TPU"], 4)
        with self.assertRaises(SlicedError) as err:
            client.nodes({"bad key!": "x"})
        self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_failed_waits_remove_their_group_unless_kept(self):
        _, client = self.start()
        holder = client.submit(SEED, request_id="holder")  # the only v6e slice
        self.assertEqual(holder.state, "CREATED")
        with self.assertLogs("sliced_client", "WARNING") as logs:
            with self.assertRaises(SlicedError) as err:
                client.submit_and_wait(SEED, timeout=0.5, job_id="late")
        self.assertEqual(err.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        late = re.search(r"placement group (pg-\w+) is still PENDING", str(err.exception))
        self.assertTrue(late, str(err.exception))
        self.assertIn("removed placement group " + late.group(1), logs.output[0])
        self.assertEqual(client.placement_groups(job_id="late"), [])

        with self.assertLogs("sliced_client", "WARNING") as logs:
            with self.assertRaises(SlicedError):
                client.submit_and_wait(SEED, timeout=0.5, job_id="kept", keep=True)
        kept = client.placement_groups(job_id="kept")
        self.assertEqual([p.state for p in kept], ["PENDING"])
        self.assertIn("leaving placement group %s (keep=True)" % kept[0].id, logs.output[0])
        client.remove(kept[0])

        # The context manager: removed when the block raises, and when it ends.
        with self.assertLogs("sliced_client", "WARNING") as logs:
            with self.assertRaises(RuntimeError):
                with client.placement(V4, job_id="ctx") as pg:
                    self.assertEqual(pg.state, "CREATED")
                    raise RuntimeError("boom")
        self.assertIn("the block raised RuntimeError: boom; removed placement group "
                      + pg.id, logs.output[0])
        self.assertEqual(client.placement_groups(job_id="ctx"), [])
        with client.placement(V4, job_id="ctx") as pg:
            self.assertEqual(client.get(pg).state, "CREATED")
        self.assertEqual(client.placement_groups(job_id="ctx"), [])

    def test_ctrl_c_or_a_handled_sigterm_during_a_wait_removes_the_group(self):
        d, client = self.start()
        client.submit(SEED, request_id="holder")  # the only v6e slice
        # Ctrl-C is Python's own handler, as in a terminal (a runner started
        # in the background, `ctest ... &`, hands its children SIGINT
        # ignored, and Python then keeps it ignored). SIGTERM unwinds only
        # with a handler that raises (docs/clients.md): here sys.exit(143).
        cases = [
            (signal.SIGINT, "signal.default_int_handler", "KeyboardInterrupt",
             "Ctrl-C; removed placement group "),
            (signal.SIGTERM, "lambda *_: sys.exit(143)", "",
             "SystemExit: 143; removed placement group "),
        ]
        for sig, handler, raised, removed in cases:
            with self.subTest(signal=sig.name):
                # If the client is still running 45 s on, it writes every
                # thread's stack to stderr and exits, so that a hang shows
                # where it is.
                script = (
                    "import faulthandler; faulthandler.dump_traceback_later(45, exit=True)\n"
                    "import signal, sys; signal.signal(%d, %s)\n"
                    "sys.path.insert(0, %r)\n"
                    "from sliced_client import Client, ScalingConfig\n"
                    "client = Client('127.0.0.1:%d')\n"
                    "wait_ready = client.wait_ready\n"
                    "def announced(pg, timeout=None):\n"
                    "    print('waiting', pg.id, flush=True)\n"
                    "    return wait_ready(pg, timeout=timeout)\n"
                    "client.wait_ready = announced\n"
                    "client.submit_and_wait(ScalingConfig(use_tpu=True, num_workers=4, "
                    "topology='4x4', accelerator_type='TPU-V6E'), job_id='interrupted')\n"
                    % (sig, handler, os.path.join(REPO, "client", "python"), d.port))
                proc = subprocess.Popen([sys.executable, "-c", script],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
                self.addCleanup(proc.kill)
                line = proc.stdout.readline()
                if not line.startswith("waiting pg-"):
                    proc.kill()
                    self.fail(line + "".join(proc.communicate(timeout=60)))
                pg_id = line.split()[1]
                proc.send_signal(sig)
                try:
                    _, err = proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    self.fail("the client did not exit after %s; its stderr:\n%s"
                              % (sig.name, proc.communicate()[1]))
                self.assertNotIn("Timeout (0:00:45)!", err,
                                 "the client hung after %s:\n%s" % (sig.name, err))
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn(raised, err)
                self.assertIn(removed + pg_id, err)
                self.assertEqual(client.placement_groups(job_id="interrupted"), [])

    def test_drain_and_undrain(self):
        d, client = self.start()
        self.assertEqual(client.drain("cpu-0").state, "DRAINING")
        self.assertEqual(client.undrain("cpu-0").state, "ALIVE")
        self.assertEqual(client.undrain("cpu-0").state, "ALIVE")  # a no-op
        # A dead node stays dead; drained, it comes back DRAINING.
        with d.channel() as ch:
            sliced_pb2_grpc.InventoryStub(ch).Heartbeat(sliced_pb2.HeartbeatRequest(
                heartbeats=[sliced_pb2.NodeHeartbeat(node_id="cpu-1", state=sliced_pb2.DEAD)]),
                timeout=10)
        dead = client.drain("cpu-1")
        self.assertEqual((dead.state, dead.drain_when_back), ("DEAD", True))
        self.assertTrue(client.node("cpu-1").drain_when_back)
        dead = client.undrain("cpu-1")
        self.assertEqual((dead.state, dead.drain_when_back), ("DEAD", False))
        with self.assertRaises(SlicedError) as err:
            client.undrain("nope")
        self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_every_error_is_a_sliced_error_with_rays_message(self):
        _, client = self.start()
        cases = [
            (ScalingConfig(num_workers=4, use_tpu=True, accelerator_type="TPU-V6E"),
             "`topology` must be specified in ScalingConfig when `use_tpu=True` and "
             "`num_workers` > 1"),
            (ScalingConfig(num_workers=1, use_tpu=True, use_gpu=True, topology="2x2",
                           accelerator_type="TPU-V6E"),
             "Cannot specify both `use_gpu=True` and `use_tpu=True`"),
            (ScalingConfig(num_workers=4, use_tpu=True, topology="4x4",
                           accelerator_type="TPU-V6E", tpu_resource_per_chip=2),
             "tpu_resource_per_chip: must be 1 on v6e"),
            (ScalingConfig(num_workers=16, use_tpu=True, topology="4x4",
                           accelerator_type="TPU-V6E", resources_per_worker={"TPU": 3}),
             "The requested resources per worker (3 TPU devices) do not divide evenly"),
        ]
        for config, message in cases:
            with self.assertRaises(SlicedError) as err:
                client.submit(config)
            self.assertEqual(err.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(message, err.exception.message)
            self.assertTrue(str(err.exception).startswith("INVALID_ARGUMENT: "))
        infeasible = client.submit(ScalingConfig(num_workers=8, use_tpu=True, topology="4x8",
                                                 accelerator_type="TPU-V6E"))
        self.assertEqual(infeasible.state, "INFEASIBLE")
        with self.assertRaises(SlicedError) as err:
            client.wait_ready(infeasible, timeout=5)
        self.assertEqual(err.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("INFEASIBLE", err.exception.message)

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        with Client("127.0.0.1:%d" % closed, timeout=3) as unreachable:
            started = time.monotonic()
            with self.assertRaises(SlicedError) as err:
                unreachable.nodes()
            self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertLess(time.monotonic() - started, 3.5)
            with self.assertRaises(SlicedError) as err:
                unreachable.submit(SEED)
            self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)

    def serve_placement(self, servicer):
        """A gRPC server on loopback serving `servicer` as sliced.v1.Placement
        (a fake daemon, for answers a real one gives only in a race); its
        port. Stopped when the test ends."""
        from concurrent import futures
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        sliced_pb2_grpc.add_PlacementServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        return port

    def test_a_daemon_back_between_attempts_is_reached_by_the_next_one(self):
        # A port that reopens between two attempts (a restart; a failover
        # moving a port from standby to leader) is reached by the next one:
        # the channel reconnects on the attempts' schedule. With gRPC's
        # default (1 s) the three attempts (at 0, 0.1 and 0.3 s) all fail.
        from concurrent import futures

        class Placement(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.CREATED)

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        sliced_pb2_grpc.add_PlacementServicer_to_server(Placement(), server)
        self.addCleanup(server.stop, None)

        def come_back():
            time.sleep(0.05)
            server.add_insecure_port("127.0.0.1:%d" % port)
            server.start()

        with Client("127.0.0.1:%d" % port, timeout=10, max_attempts=3) as client:
            back = threading.Thread(target=come_back)
            back.start()
            start = time.monotonic()
            try:
                self.assertEqual(client.get("pg-1").state, "CREATED")
            finally:
                back.join()
            self.assertLess(time.monotonic() - start, 1)

    def flapping_daemon(self):
        """A fake daemon in a process of its own, as in life (in this one the
        server's threads would also poll the client's channel): serves
        GetPlacementGroup; flap(seconds) closes its port for that long.
        Returns (address, flap)."""
        script = (
            "import sys, time\n"
            "from concurrent import futures\n"
            "import grpc\n"
            "from sliced.v1 import sliced_pb2 as P, sliced_pb2_grpc\n"
            "class Placement(sliced_pb2_grpc.PlacementServicer):\n"
            "    def GetPlacementGroup(self, request, context):\n"
            "        return P.PlacementGroup(placement_group_id=request.placement_group_id,\n"
            "                                state=P.CREATED)\n"
            "def serve(port):\n"
            "    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))\n"
            "    sliced_pb2_grpc.add_PlacementServicer_to_server(Placement(), server)\n"
            "    port = server.add_insecure_port('127.0.0.1:%d' % port)\n"
            "    server.start()\n"
            "    return server, port\n"
            "server, port = serve(0)\n"
            "print(port, flush=True)\n"
            "for line in sys.stdin:  # seconds to keep the port closed\n"
            "    server.stop(None).wait()\n"
            "    print('closed', flush=True)\n"
            "    time.sleep(float(line))\n"
            "    server, _ = serve(port)\n"
            "    print('back', flush=True)\n")
        env = dict(os.environ, PYTHONPATH=os.environ.get("SLICED_PY", ""))
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(proc.stdin.close)
        self.addCleanup(proc.wait, 30)
        self.addCleanup(proc.kill)
        port = int(proc.stdout.readline())

        def flap(seconds, when_closed=None):
            proc.stdin.write("%f\n" % seconds)
            proc.stdin.flush()
            self.assertEqual(proc.stdout.readline(), "closed\n")
            if when_closed:
                when_closed()
            self.assertEqual(proc.stdout.readline(), "back\n")

        return "127.0.0.1:%d" % port, flap

    def test_a_connected_client_gets_past_a_port_closed_for_a_moment(self):
        # A daemon's port closed for 5 ms under a connected client (a
        # standby's port handed to the new leader's server, docs/ha.md),
        # five times, while the client calls every 2 ms: no call fails.
        address, flap = self.flapping_daemon()
        with Client(address, timeout=10) as client:
            client.get("pg-1")
            caller = Caller(lambda: client.get("pg-1"))
            try:
                for _ in range(5):
                    time.sleep(0.1)
                    flap(0.005)
                time.sleep(0.5)
            finally:
                caller.stop()
        self.assertEqual(caller.errors, [], "%d calls succeeded" % caller.ok)
        self.assertGreater(caller.ok, 0)

    def test_a_client_without_retries_reconnects_before_its_next_call(self):
        # max_attempts=1 (the node agent, with its own backoff): a call while
        # the port is closed fails, and the next one, once the port is back,
        # gets through. The client keeps the channel connecting in the
        # background meanwhile; else it would wait for gRPC's backup poll,
        # every 5 s (a round would pass only if it fell in the 1 s waited).
        address, flap = self.flapping_daemon()
        with Client(address, timeout=5, max_attempts=1) as client:
            client.get("pg-1")
            for _ in range(3):
                failed = []

                def call_while_closed():
                    with self.assertRaises(SlicedError) as err:
                        client.get("pg-1")
                    failed.append(err.exception.code)

                flap(0.2, call_while_closed)
                self.assertEqual(failed, [grpc.StatusCode.UNAVAILABLE])
                time.sleep(1)  # the channel reconnects 0.1-0.3 s after a refusal
                self.assertEqual(client.get("pg-1").state, "CREATED")

    def test_a_remove_whose_reply_was_lost_is_done(self):
        # The real daemon behind a proxy that loses the remove's reply: the
        # daemon removes the group, the proxy then closes the connection, and
        # the client's retry (UNAVAILABLE is retried) finds the group gone:
        # NOT_FOUND, which after a lost reply is the remove's success
        # (docs/clients.md). The C++ client (slicectl) does the same; its
        # unit tests (sliced_client_test) check it, as its connection would
        # have to be made through the proxy while replies are lost.
        d, direct = self.start()
        proxy = TcpProxy(d.port)
        self.addCleanup(proxy.close)
        with Client("127.0.0.1:%d" % proxy.port, timeout=20) as client:
            pg = direct.submit(V4)
            self.assertEqual(client.get(pg.id).state, "CREATED")  # connected
            events = direct.watch(placement_group_id=pg.id, timeout=20)
            self.assertEqual(next(events).state, "CREATED")
            proxy.lose_replies()
            outcome = []

            def remove():
                try:
                    outcome.append(("returned", client.remove(pg.id)))
                except SlicedError as e:
                    outcome.append(("raised", e))

            remover = threading.Thread(target=remove)
            remover.start()
            # The daemon removed it, and its answer is lost.
            self.assertEqual(next(events).state, "REMOVED")
            events.close()
            proxy.close_connections()
            remover.join(25)
            self.assertEqual(outcome, [("returned", None)])
            with self.assertRaises(SlicedError) as err:
                direct.get(pg.id)
            self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_a_call_the_server_cancelled_is_retried_when_retryable(self):
        # What a daemon answers a call that reaches it as it stops its server
        # (a standby turning leader, docs/ha.md): retried as UNAVAILABLE is.
        # A remove too, and as that CANCELLED may come after the daemon
        # removed the group, NOT_FOUND on the retry means it is done.
        calls = []

        class Cancelling(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls.append("get")
                if calls.count("get") == 1:
                    context.abort(grpc.StatusCode.CANCELLED, "server shutting down")
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.CREATED)

            def RemovePlacementGroup(self, request, context):
                calls.append("remove")
                if calls.count("remove") == 1:
                    context.abort(grpc.StatusCode.CANCELLED, "server shutting down")
                context.abort(grpc.StatusCode.NOT_FOUND, "no placement group pg-1")

        port = self.serve_placement(Cancelling())
        with Client("127.0.0.1:%d" % port, timeout=5) as client:
            self.assertEqual(client.get("pg-1").state, "CREATED")
            self.assertIsNone(client.remove("pg-1"))
        self.assertEqual(calls, ["get", "get", "remove", "remove"])

    def test_a_removes_not_found_stands_unless_an_attempt_may_have_landed(self):
        # NOT_FOUND on the first attempt, or after refusals that say the
        # daemon did nothing (`sliced-leader`, here empty: a failover), is
        # the answer: no earlier attempt can have removed the group.
        calls = []

        class Refusing(sliced_pb2_grpc.PlacementServicer):
            def RemovePlacementGroup(self, request, context):
                calls.append(request.placement_group_id)
                if request.placement_group_id == "pg-2" and len(calls) < 4:
                    context.set_trailing_metadata((("sliced-leader", ""),))
                    context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader; retry")
                context.abort(grpc.StatusCode.NOT_FOUND, "no such placement group")

        port = self.serve_placement(Refusing())
        with Client("127.0.0.1:%d" % port, timeout=5) as client:
            for pg_id in ("pg-1", "pg-2"):
                with self.assertRaises(SlicedError) as err:
                    client.remove(pg_id)
                self.assertEqual(err.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(calls, ["pg-1", "pg-2", "pg-2", "pg-2"])

    def test_following_a_leader_back_and_forth_reuses_its_channels(self):
        # A standby keeps naming a leader this client can't reach (a crashed
        # leader until its lease goes; a one-way partition): each call goes
        # there, fails, and comes back. Every redirect made a new channel,
        # kept until close(): ~20 KB each, hundreds an hour for an agent.
        calls = []

        class Standby(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls.append("get")
                context.set_trailing_metadata((("sliced-leader", "127.0.0.1:1"),))
                context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")

        port = self.serve_placement(Standby())
        with Client("127.0.0.1:%d" % port, timeout=2, max_attempts=3) as client:
            for _ in range(5):
                with self.assertRaises(SlicedError):
                    client.get("pg-1")
            self.assertGreaterEqual(len(calls), 5)
            self.assertEqual(sorted(client._channels),
                             sorted(["127.0.0.1:%d" % port, "127.0.0.1:1"]))

    def test_a_call_begun_before_another_threads_redirect_follows_too(self):
        # Thread A's call follows the standby's redirect and moves the client
        # to the leader; thread B's call, begun on the standby's channel, is
        # refused naming that same leader. It must follow too: it used to
        # retry the standby until its attempts ran out (the hand-over e2e
        # caught one under ASan), since the client "was there already".
        class Leader(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.CREATED)

        leader = "127.0.0.1:%d" % self.serve_placement(Leader())

        class Standby(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                context.set_trailing_metadata((("sliced-leader", leader),))
                context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")

        standby = "127.0.0.1:%d" % self.serve_placement(Standby())
        with Client(standby, timeout=5, max_attempts=2) as client:
            begun_on_standby = client._placement.GetPlacementGroup  # thread B's
            self.assertEqual(client.get("pg-1").state, "CREATED")  # thread A's
            self.assertEqual(client.address, leader)
            got = client._call(begun_on_standby,
                               P.GetPlacementGroupRequest(placement_group_id="pg-2"),
                               retry=True)
            self.assertEqual(got.placement_group_id, "pg-2")

    def test_a_call_still_bound_to_a_deposed_leader_goes_back_home(self):
        # The same race on the way back: another thread's call already went
        # from the leader (now knowing no leader: an empty `sliced-leader`)
        # back to the address given; a call still bound to the leader must go
        # there too, not wait on the leader until its deadline.
        calls = []

        class Deposed(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                context.set_trailing_metadata((("sliced-leader", ""),))
                context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader; retry")

        deposed = "127.0.0.1:%d" % self.serve_placement(Deposed())

        class Home(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls.append(request.placement_group_id)
                if len(calls) == 1:
                    context.set_trailing_metadata((("sliced-leader", deposed),))
                    context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.CREATED)

        home = "127.0.0.1:%d" % self.serve_placement(Home())
        with Client(home, timeout=3, max_attempts=2) as client:
            self.assertEqual(client.get("pg-1").state, "CREATED")  # home, leader, home
            self.assertEqual(client.address, home)
            still_on_leader = client._channels[deposed][2].GetPlacementGroup
            got = client._call(still_on_leader,
                               P.GetPlacementGroupRequest(placement_group_id="pg-2"),
                               retry=True)
            self.assertEqual(got.placement_group_id, "pg-2")
        self.assertEqual(calls, ["pg-1", "pg-1", "pg-2"])

    def serve_refused_watch(self, code, details):
        """A fake daemon whose watch openings fail `code` while `refusals[0]`
        is above 0 (counting down); then one event, then UNAVAILABLE (a
        leader stepping down). Returns (port, calls, refusals)."""
        calls, refusals = [], [0]

        class Refusing(sliced_pb2_grpc.PlacementServicer):
            def WatchPlacementGroups(self, request, context):
                calls.append("watch")
                if refusals[0] > 0:
                    refusals[0] -= 1
                    context.abort(code, details)
                yield P.PlacementGroupEvent(
                    placement_group=P.PlacementGroup(placement_group_id="pg-1",
                                                     state=P.CREATED))
                context.abort(grpc.StatusCode.UNAVAILABLE, "leader stepped down")

        return self.serve_placement(Refusing()), calls, refusals

    def test_a_watch_refused_before_its_first_event_is_retried(self):
        # UNAVAILABLE naming no leader (a daemon on its way down), or
        # CANCELLED (a daemon dropping the opening as it stops, docs/ha.md;
        # not this client's own cancelling): opening a watch backs off and
        # tries again, as a read does, within its attempts. Once it has
        # delivered an event, UNAVAILABLE ends it.
        for code, details in ((grpc.StatusCode.UNAVAILABLE,
                               "not the leader: no leader is known; retry"),
                              (grpc.StatusCode.CANCELLED, "dropped")):
            port, calls, refusals = self.serve_refused_watch(code, details)
            refusals[0] = 2
            with Client("127.0.0.1:%d" % port, timeout=5) as client:
                events = client.watch(timeout=10)
                self.assertEqual(next(events).id, "pg-1")
                with self.assertRaises(SlicedError) as err:
                    next(events)
                self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(calls, ["watch"] * 3, code)
            # With every attempt refused, the last refusal comes back.
            calls.clear()
            refusals[0] = 100
            with Client("127.0.0.1:%d" % port, timeout=5, max_attempts=2) as client:
                with self.assertRaises(SlicedError) as err:
                    next(client.watch(timeout=10))
                self.assertEqual(err.exception.code, code)
                self.assertIn(details, err.exception.message)
            self.assertEqual(calls, ["watch"] * 2, code)

    def test_a_watch_this_client_cancels_before_any_event_is_not_opened_again(self):
        # A preemption listener stopped before any event cancels its stream:
        # that CANCELLED is the client's own, not a daemon's drop.
        opened = []

        port = self.serve_placement(SilentWatch(opened))
        with Client("127.0.0.1:%d" % port, timeout=5) as client:
            listener = client.on_preempted(lambda pg: None)
            deadline = time.monotonic() + 5
            while not opened and time.monotonic() < deadline:
                time.sleep(0.01)
            listener.stop()
            time.sleep(0.5)
        self.assertEqual(len(opened), 1)
        self.assertIsNone(listener.error)

    def test_closing_the_client_ends_its_listener_with_a_sliced_error(self):
        # close() cancels the listener's stream under it: that used to be
        # retried on the closed channel, and gRPC's ValueError ("Channel
        # closed!") was printed from the listener's thread.
        opened, thread_errors = [], []

        port = self.serve_placement(SilentWatch(opened))
        hook = threading.excepthook
        threading.excepthook = thread_errors.append
        self.addCleanup(setattr, threading, "excepthook", hook)
        client = Client("127.0.0.1:%d" % port, timeout=5)
        listener = client.on_preempted(lambda pg: None)
        deadline = time.monotonic() + 5
        while not opened and time.monotonic() < deadline:
            time.sleep(0.01)
        client.close()
        listener._thread.join(5)
        self.assertFalse(listener._thread.is_alive())
        self.assertEqual([e.exc_value for e in thread_errors], [])
        self.assertEqual(listener.error.code, grpc.StatusCode.CANCELLED)
        self.assertIn("the client is closed", str(listener.error))
        with self.assertRaises(SlicedError) as raised:
            client.nodes()
        self.assertEqual(raised.exception.code, grpc.StatusCode.CANCELLED)

    def scripted_placement(self, watches, states=None):
        """A fake daemon: the i-th watch runs `watches[i](context)` (a list
        of PlacementGroup protos to send, or it aborts), GetPlacementGroup
        answers states.pop(0) (NOT_FOUND once it says "gone"). Returns
        (client, calls: {"get": n, "watch": n})."""
        calls = {"get": 0, "watch": 0}
        states = list(states or [])

        class Placement(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls["get"] += 1
                state = states.pop(0) if len(states) > 1 else states[0]
                if state == "gone":
                    context.abort(grpc.StatusCode.NOT_FOUND, "no placement group")
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.PlacementGroupState.Value(state))

            def WatchPlacementGroups(self, request, context):
                i = calls["watch"]
                calls["watch"] += 1
                for pg in watches[min(i, len(watches) - 1)](context):
                    yield P.PlacementGroupEvent(placement_group=pg)

        client = Client("127.0.0.1:%d" % self.serve_placement(Placement()), timeout=5)
        self.addCleanup(client.close)
        return client, calls

    def test_a_wait_outlives_a_daemon_stepping_down(self):
        # The leader steps down mid-wait (UNAVAILABLE after the first event):
        # the group is read again and watched again, not given up on.
        def stepping_down(context):
            yield P.PlacementGroup(placement_group_id="pg-1", state=P.PENDING)
            context.abort(grpc.StatusCode.UNAVAILABLE, "sliced is stepping down")

        def placed(context):
            yield P.PlacementGroup(placement_group_id="pg-1", state=P.CREATED)

        client, calls = self.scripted_placement([stepping_down, placed], ["PENDING"])
        self.assertEqual(client.wait_ready("pg-1", timeout=10).state, "CREATED")
        self.assertEqual(calls, {"get": 2, "watch": 2})

    def test_a_wait_on_a_group_removed_unseen_ends(self):
        # The watch never reports the removal (a removed group is not in a
        # re-opened watch's current state): the periodic read ends the wait.
        def silent(context):
            yield P.PlacementGroup(placement_group_id="pg-1", state=P.PENDING)
            while context.is_active():
                time.sleep(0.02)

        client, calls = self.scripted_placement([silent], ["PENDING", "gone"])
        recheck = sliced_client.client._WAIT_RECHECK
        sliced_client.client._WAIT_RECHECK = 0.3
        self.addCleanup(setattr, sliced_client.client, "_WAIT_RECHECK", recheck)
        with self.assertRaises(SlicedError) as raised:
            client.wait_ready("pg-1")  # no timeout: it used to wait forever
        self.assertEqual(raised.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(calls["get"], 2)

    def test_a_watchs_timeout_covers_its_reopened_streams(self):
        def falls_behind(context):
            yield P.PlacementGroup(placement_group_id="pg-1", state=P.PENDING)
            time.sleep(0.5)
            context.abort(grpc.StatusCode.ABORTED, "the watcher fell behind")

        client, calls = self.scripted_placement([falls_behind], ["PENDING"])
        start = time.monotonic()
        with self.assertRaises(SlicedError) as raised:
            for _ in client.watch(placement_group_id="pg-1", timeout=0.8):
                pass
        self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - start, 1.5)  # each stream had 0.8 s before
        self.assertEqual(calls["watch"], 2)

    def test_a_preemption_listener_outlives_a_step_down_and_tells_once(self):
        def notice(deadline):
            pg = P.PlacementGroup(placement_group_id="pg-1", state=P.PREEMPTING,
                                  preempted_by="pg-9")
            pg.preemption_deadline.seconds = deadline
            return pg

        def first(context):
            yield notice(100)
            context.abort(grpc.StatusCode.UNAVAILABLE, "sliced is stepping down")

        def again(context):
            yield notice(100)  # the current state repeats it
            yield notice(200)  # preempted again
            while context.is_active():
                time.sleep(0.02)

        client, calls = self.scripted_placement([first, again], ["PENDING"])
        told = []
        listener = client.on_preempted(told.append)
        self.addCleanup(listener.stop)
        deadline = time.monotonic() + 10
        while len(told) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        self.assertEqual([pg.preemption_deadline for pg in told], [100, 200])
        self.assertIsNone(listener.error)
        self.assertEqual(calls["watch"], 2)

    def test_a_submit_with_an_unknown_outcome_names_its_request_id(self):
        # The same codes as slicectl's; a refusal (INVALID_ARGUMENT) is an
        # outcome and says nothing of a request id.
        for code, named in ((grpc.StatusCode.UNAVAILABLE, True),
                            (grpc.StatusCode.INTERNAL, True),
                            (grpc.StatusCode.INVALID_ARGUMENT, False)):
            with self.subTest(code=code):
                seen = []

                class Placement(sliced_pb2_grpc.PlacementServicer):
                    def SubmitScalingConfig(self, request, context):
                        seen.append(request.request_id)
                        context.abort(code, "the commit may or may not have been applied")

                with Client("127.0.0.1:%d" % self.serve_placement(Placement()),
                            timeout=3) as c:
                    with self.assertRaises(SlicedError) as raised:
                        with c.placement(SEED, job_id="j"):
                            self.fail("no group was created")
                self.assertEqual(raised.exception.code, code)
                self.assertEqual(len(set(seen)), 1, seen)
                self.assertEqual("submit again with request_id=%r to get it" % seen[0]
                                 in raised.exception.message, named,
                                 raised.exception.message)

    def test_a_placement_block_ends_cleanly_when_its_group_is_already_gone(self):
        class Placement(sliced_pb2_grpc.PlacementServicer):
            def SubmitScalingConfig(self, request, context):
                return P.PlacementGroup(placement_group_id="pg-1", state=P.CREATED)

            def GetPlacementGroup(self, request, context):
                return P.PlacementGroup(placement_group_id="pg-1", state=P.CREATED)

            def RemovePlacementGroup(self, request, context):
                context.abort(grpc.StatusCode.NOT_FOUND, "no placement group pg-1")

        with Client("127.0.0.1:%d" % self.serve_placement(Placement()), timeout=5) as c:
            with c.placement(SEED, job_id="j") as pg:  # removed under the block
                self.assertEqual(pg.id, "pg-1")

    def test_a_daemon_that_knows_no_leader_does_not_hold_the_client(self):
        # A daemon cut off from etcd while another leads knows no leader for
        # as long as that lasts (docs/ha.md). Listed first beside the leader,
        # it does not hold the client: calls go to each listed daemon in
        # turn and reach the leader. (With gRPC's default, pick_first, every
        # call stayed on the first daemon until its timeout.)
        calls = []

        class CutOff(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls.append("cut off")
                context.set_trailing_metadata((("sliced-leader", ""),))
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              "not the leader: no leader is known; retry")

        class Leader(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls.append("leader")
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.CREATED)

        cut_off, leader = self.serve_placement(CutOff()), self.serve_placement(Leader())
        target = "ipv4:127.0.0.1:%d,127.0.0.1:%d" % (cut_off, leader)
        with Client(target, timeout=5) as client:
            for _ in range(5):
                self.assertEqual(client.get("pg-1").state, "CREATED")
        self.assertEqual(calls.count("leader"), 5, calls)
        self.assertIn("cut off", calls)

    def test_calls_wait_out_a_failover_without_spending_attempts(self):
        # A standby that knows no leader yet answers UNAVAILABLE with an
        # empty `sliced-leader` (docs/ha.md): it did nothing, so any call, a
        # remove too, waits for the new leader within its timeout, past
        # max_attempts; the watch's opening as well. Not with max_attempts=1.
        calls, refusals = [], [4]

        def refuse(context, call):
            calls.append(call)
            if refusals[0] > 0:
                refusals[0] -= 1
                context.set_trailing_metadata((("sliced-leader", ""),))
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              "not the leader: no leader is known; retry")

        class Failover(sliced_pb2_grpc.PlacementServicer):
            def RemovePlacementGroup(self, request, context):
                refuse(context, "remove")
                return P.RemovePlacementGroupResponse()

            def GetPlacementGroup(self, request, context):
                refuse(context, "get")
                return P.PlacementGroup(placement_group_id=request.placement_group_id,
                                        state=P.CREATED)

            def WatchPlacementGroups(self, request, context):
                refuse(context, "watch")
                yield P.PlacementGroupEvent(
                    placement_group=P.PlacementGroup(placement_group_id="pg-1",
                                                     state=P.CREATED))

        port = self.serve_placement(Failover())
        with Client("127.0.0.1:%d" % port, timeout=10, max_attempts=2) as client:
            client.remove("pg-1")
            self.assertEqual(calls, ["remove"] * 5)
            calls.clear()
            refusals[0] = 4
            self.assertEqual(next(client.watch(timeout=10)).id, "pg-1")
            self.assertEqual(calls, ["watch"] * 5)
        # A failover longer than the timeout: its refusal, by the timeout.
        calls.clear()
        refusals[0] = 1000
        with Client("127.0.0.1:%d" % port, timeout=1, max_attempts=2) as client:
            start = time.monotonic()
            with self.assertRaises(SlicedError) as err:
                client.get("pg-1")
            self.assertLess(time.monotonic() - start, 5)
            self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertIn("no leader is known", err.exception.message)
        self.assertGreater(len(calls), 2)
        # Retries off (the node agent, which has its own backoff): at once.
        calls.clear()
        with Client("127.0.0.1:%d" % port, timeout=10, max_attempts=1) as client:
            with self.assertRaises(SlicedError) as err:
                client.get("pg-1")
            self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(calls, ["get"])

    def test_the_last_try_of_a_failover_has_room_to_be_answered(self):
        # A standby 0.3 s slow to refuse, a 0.5 s timeout: a second try,
        # begun at ~0.35 s, would be cut short by the deadline
        # (DEADLINE_EXCEEDED: neither "nothing was done" nor why). The
        # client does not begin a try without room to be answered: the
        # standby's refusal comes back.
        calls = []

        class SlowStandby(sliced_pb2_grpc.PlacementServicer):
            def GetPlacementGroup(self, request, context):
                calls.append("get")
                time.sleep(0.3)
                context.set_trailing_metadata((("sliced-leader", ""),))
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              "not the leader: no leader is known; retry")

        port = self.serve_placement(SlowStandby())
        with Client("127.0.0.1:%d" % port, timeout=0.5, max_attempts=2) as client:
            with self.assertRaises(SlicedError) as err:
                client.get("pg-1")
        self.assertEqual(err.exception.code, grpc.StatusCode.UNAVAILABLE,
                         err.exception.message)
        self.assertIn("no leader is known", err.exception.message)
        self.assertGreaterEqual(len(calls), 1)

    # No flow-control window growth (BDP): what a stream's reader does not
    # read backs up on the daemon, as it would behind a slow reader.
    FIXED_WINDOW = [("grpc.http2.bdp_probe", 0)]

    def start_with_a_small_stream_buffer(self):
        """A daemon whose streams hold 64 KiB for a slow reader, and a
        channel to it with a fixed window."""
        d = Daemon(temp_data_dir(self), "--heartbeat_timeout=0",
                   "--max_watch_buffer_bytes=65536").start()
        self.addCleanup(d.close)
        register_demo_fleet(d.port)
        ch = grpc.insecure_channel("127.0.0.1:%d" % d.port, options=self.FIXED_WINDOW)
        self.addCleanup(ch.close)
        return d, ch

    def test_a_log_tail_that_falls_behind_ends_aborted(self):
        _, ch = self.start_with_a_small_stream_buffer()
        telemetry = sliced_pb2_grpc.TelemetryStub(ch)
        tail = telemetry.TailLogs(P.TailLogsRequest(node_id="cpu-0", follow=True), timeout=60)
        # Far more than 64 KiB of lines (plus the transport's windows) that
        # the follower does not read: it is ended, not left to grow.
        line = "x" * 1000
        for _ in range(400):
            telemetry.AppendLogs(P.AppendLogsRequest(node_id="cpu-0", lines=[
                P.LogLine(text=line)] * 10), timeout=10)
        with self.assertRaises(grpc.RpcError) as err:
            for _ in tail:
                pass
        self.assertEqual(err.exception.code(), grpc.StatusCode.ABORTED)
        self.assertIn("this stream fell behind", err.exception.details())

    def test_a_watch_opened_over_a_large_state_takes_the_changes_behind_it(self):
        # The current state (150 groups of 64 bundles, ~300 KB) is far more
        # than the stream's 64 KiB and the channel's window: most of it
        # still waits on the daemon when ~100 KB of changes commit behind
        # it. They may pile up by as much as the client has read (ended
        # ABORTED before, past 64 KiB); the stream never holds more than
        # the state did, plus 64 KiB.
        _, ch = self.start_with_a_small_stream_buffer()
        pl = sliced_pb2_grpc.PlacementStub(ch)
        wide = [P.Bundle(resources={"CPU": 0.001})] * 64
        state = {pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=wide, job_id="state"), timeout=10).placement_group_id
                 for _ in range(150)}
        raw = pl.WatchPlacementGroups(P.WatchPlacementGroupsRequest(), timeout=60)
        seen = {next(raw).placement_group.placement_group_id}
        burst = {pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=wide[:32], job_id="burst"), timeout=10).placement_group_id
                 for _ in range(100)}
        for event in raw:
            seen.add(event.placement_group.placement_group_id)
            if seen >= state | burst:
                break
        raw.cancel()
        self.assertEqual(seen, state | burst)

    def test_a_watch_that_falls_behind_ends_aborted_and_is_opened_again(self):
        d, ch = self.start_with_a_small_stream_buffer()
        pl = sliced_pb2_grpc.PlacementStub(ch)
        raw = pl.WatchPlacementGroups(P.WatchPlacementGroupsRequest(), timeout=60)
        client = Client("127.0.0.1:%d" % d.port, options=self.FIXED_WINDOW)
        self.addCleanup(client.close)
        watch = client.watch()
        kept = client.create_placement_group([{"CPU": 1}], job_id="kept")
        self.assertEqual(next(watch).id, kept.id)  # then it reads nothing for a while
        # Far more than 64 KiB of events (plus the transport's windows) that
        # neither watcher reads.
        for _ in range(1500):
            pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 1})] * 8, job_id="churn"), timeout=10)
            pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
                placement_group_id=pg.placement_group_id), timeout=10)
        with self.assertRaises(grpc.RpcError) as err:
            for _ in raw:
                pass
        self.assertEqual(err.exception.code(), grpc.StatusCode.ABORTED)
        self.assertIn("this stream fell behind", err.exception.details())
        # The client's watch opens the stream again: the current state
        # (the kept group) comes again, and the stream goes on.
        later = client.create_placement_group([{"CPU": 1}], job_id="later")
        seen = set()
        for pg in watch:
            seen.add(pg.id)
            if later.id in seen and kept.id in seen:
                break
        watch.close()

    def test_tls_and_bearer_tokens(self):
        from test_security_e2e import TOKENS, read
        from test_slicectl_e2e import start_secure_daemon
        d, pki, _ = start_secure_daemon(self, mutual_tls=False)
        creds = grpc.ssl_channel_credentials(root_certificates=read(pki["ca.pem"]))
        address = "127.0.0.1:%d" % d.port
        with grpc.secure_channel(address, creds) as ch:
            sliced_pb2_grpc.InventoryStub(ch).RegisterNodes(
                json_format.Parse(read(os.path.join(REPO, "examples", "fleet.json")),
                                  P.RegisterNodesRequest()),
                metadata=[("authorization", "Bearer " + TOKENS["admin"])], timeout=10)
        with Client(address, credentials=creds, token=TOKENS["scheduler"]) as client:
            pg = client.wait_ready(client.submit(SEED), timeout=10)
            self.assertEqual(len(pg.workers), 4)
        with Client(address, credentials=creds, token=TOKENS["viewer"]) as client:
            self.assertEqual(len(client.nodes()), 9)
            events = client.watch(timeout=10)  # the stream carries the token too
            self.assertEqual(next(events).state, "CREATED")
            events.close()
            with self.assertRaises(SlicedError) as err:
                client.submit(SEED)
            self.assertEqual(err.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        with Client(address, credentials=creds) as client:
            with self.assertRaises(SlicedError) as err:
                client.nodes()
            self.assertEqual(err.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_stubs_are_found_from_the_environment_or_the_build_dir(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"))
        code = "import sliced_client._stubs as s; print(s.stub_dir())"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), os.environ["SLICED_PY"])
        env["SLICED_PY"] = "/nonexistent"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("set SLICED_PY", out.stderr)

    def test_source_tree_import_after_the_readme_build(self):
        # The README builds into <repo>/build; only that build dir is the default.
        default = os.path.join(REPO, "build", "python")
        if os.path.realpath(os.environ["SLICED_PY"]) != os.path.realpath(default):
            self.skipTest("this build is not <repo>/build")
        env = {k: v for k, v in os.environ.items() if k not in ("SLICED_PY", "PYTHONPATH")}
        env["PYTHONPATH"] = os.path.join(REPO, "client", "python")
        out = subprocess.run(
            [sys.executable, "-c", "import sliced_client, sliced_client._stubs as s; "
             "print(s.stub_dir())"], env=env, capture_output=True, text=True, timeout=60,
            cwd=REPO)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(os.path.realpath(out.stdout.strip()), os.path.realpath(default))

    def test_package_installs_into_a_venv_and_works(self):
        # A copy of the package and the protos, so the install writes nothing
        # into the source tree (pip builds in place).
        tmp = tempfile.TemporaryDirectory(prefix="sliced-pip-")
        self.addCleanup(tmp.cleanup)
        repo = os.path.join(tmp.name, "repo")
        shutil.copytree(os.path.join(REPO, "client", "python"),
                        os.path.join(repo, "client", "python"),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        shutil.copytree(os.path.join(REPO, "proto"), os.path.join(repo, "proto"))
        venv = os.path.join(tmp.name, "venv")
        env = {k: v for k, v in os.environ.items() if k not in ("SLICED_PY", "PYTHONPATH")}
        for cmd in ([sys.executable, "-m", "venv", "--system-site-packages", venv],
                    [os.path.join(venv, "bin", "pip"), "install", "--no-deps",
                     "--no-build-isolation", "--no-index", os.path.join(repo, "client", "python")]):
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                                 cwd=tmp.name)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        d, _ = self.start()
        code = ("import sliced_client, sliced_client._stubs as s; "
                "print(s.stub_dir()); "
                "print(len(sliced_client.Client('127.0.0.1:%d').nodes()))" % d.port)
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code], env=env,
                             capture_output=True, text=True, timeout=60, cwd=tmp.name)
        self.assertEqual(out.returncode, 0, out.stderr)
        stub_dir, nodes = out.stdout.split()
        self.assertTrue(stub_dir.startswith(venv), stub_dir)
        self.assertEqual(nodes, "9")
        # The node agent comes in the same distribution, its libtpu stubs too.
        for cmd in ([os.path.join(venv, "bin", "python"), "-m", "sliced_agent", "--help"],
                    [os.path.join(venv, "bin", "sliced-agent"), "--help"],
                    [os.path.join(venv, "bin", "python"), "-c",
                     "import sliced_agent.tpu_metrics, sliced_libtpu.tpu_metric_service_pb2"]):
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60,
                                 cwd=tmp.name)
            self.assertEqual(out.returncode, 0, out.stderr)
            if "--help" in cmd:
                self.assertIn("--token_file", out.stdout)

    def test_jaxtrainer_example_runs(self):
        d, client = self.start()
        out = subprocess.run([sys.executable, EXAMPLE, "--address", "127.0.0.1:%d" % d.port,
                              "--timeout", "30"], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("is CREATED on slice(s) v6e-a", out.stdout)
        for rank in range(4):
            self.assertIn("worker %d on v6e-a-w%d (10.0.1.1%d):" % (rank, rank, rank), out.stdout)
            self.assertIn("  TPU_WORKER_ID=%d" % rank, out.stdout)
        self.assertIn("  TPU_WORKER_HOSTNAMES=10.0.1.10,10.0.1.11,10.0.1.12,10.0.1.13",
                      out.stdout)
        self.assertIn("  TPU_NAME=v6e-a", out.stdout)
        self.assertIn("released", out.stdout)
        self.assertEqual(client.placement_groups(state="CREATED"), [])
        # The unreachable case prints the error and exits 1.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        out = subprocess.run([sys.executable, EXAMPLE, "--address", "127.0.0.1:%d" % closed],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 1)
        self.assertIn("UNAVAILABLE", out.stderr)


if __name__ == "__main__":
    unittest.main()
