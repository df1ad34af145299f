"""Helpers for the node agent's end-to-end tests: simulated hosts
(sliced_agent.sim) in the test process, real agent processes
(`python3 -m sliced_agent`) on them, and a daemon on a port that survives
its restarts. Everything binds 127.0.0.1."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request

from sliced_testlib import REPO, Daemon, lost_its_port, sliced_pb2, sliced_pb2_grpc, wait_until

CLIENT_DIR = os.path.join(REPO, "client", "python")
sys.path.insert(0, CLIENT_DIR)
from sliced_agent.sim import SimHost, free_port  # noqa: E402,F401
from sliced_agent.sim_fakes import FakeMetadata  # noqa: E402,F401

LEASE = "2s"  # --heartbeat_timeout: several leases fit in a short test
# Agents poll fast so the tests wait little.
FAST = ["--metrics_interval", "0.5", "--log_interval", "0.2", "--health_interval", "0.5"]
# Imported before the agent runs: any connect() off loopback is reported on
# stderr (and refused), so a test can prove nothing left the machine.
GUARD = (
    "import socket, runpy, sys\n"
    "_connect = socket.socket.connect\n"
    "def connect(self, address):\n"
    "    if isinstance(address, tuple) and address[0] not in ('127.0.0.1', 'localhost', '::1'):\n"
    "        sys.stderr.write('NON-LOOPBACK CONNECT %r\\n' % (address,)); sys.stderr.flush()\n"
    "        raise OSError('blocked by the test')\n"
    "    return _connect(self, address)\n"
    "socket.socket.connect = connect\n"
    "sys.argv[0] = 'sliced_agent'\n"
    "runpy.run_module('sliced_agent', run_name='__main__')\n")


def start_daemon(test, data_dir, port=None, *extra):
    """A daemon on 127.0.0.1:`port` (fixed, so agents find it again after a
    restart) with a short lease. Without `port`, one from free_port(), and
    another when that one was taken first (lost_its_port; three tries)."""
    for attempt in range(3):
        d = Daemon(data_dir, "--listen=127.0.0.1:%d" % (port or free_port()),
                   "--heartbeat_timeout=" + LEASE, *extra)
        try:
            d.start()
        except RuntimeError as e:
            if port or attempt == 2 or not lost_its_port(str(e)):
                raise
            continue
        test.addCleanup(d.close)
        return d


def base_dir(test):
    d = tempfile.TemporaryDirectory(prefix="sliced-agent-e2e-")
    test.addCleanup(d.cleanup)
    return d.name


def host(test, base, *args, **kwargs):
    h = SimHost(base, *args, **kwargs)
    test.addCleanup(h.stop)
    return h


class Agent:
    """One `python3 -m sliced_agent` process; its stderr is read all the time."""

    def __init__(self, test, server, sim_host, *args, env=None, guard=False):
        self.all = []
        self._cursor = 0
        self._cond = threading.Condition()
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith("TPU_") and k != "GCE_METADATA_HOST"}
        full_env.update(PYTHONPATH=CLIENT_DIR, **(sim_host.env if sim_host else {}))
        full_env.update(env or {})
        cmd = [sys.executable] + (["-c", GUARD] if guard else ["-m", "sliced_agent"])
        root = ["--root", sim_host.root] if sim_host else []
        self.proc = subprocess.Popen(
            cmd + ["--server", server, "--metrics_port", "0"] + root + FAST + list(args),
            env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        test.addCleanup(self.close)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            with self._cond:
                self.all.append(line)
                self._cond.notify_all()

    def mark(self):
        """From now on, wait_for() looks only at lines printed after this."""
        with self._cond:
            self._cursor = len(self.all)

    def wait_for(self, pattern, timeout=20):
        """The first stderr line since the last mark() (or the start) that
        matches `pattern`, waiting for it up to `timeout` seconds."""
        def found():
            return next((line for line in self.all[self._cursor:]
                         if re.search(pattern, line)), None)
        with self._cond:
            if not self._cond.wait_for(found, timeout):
                raise AssertionError("agent printed no line matching %r in %.0fs:\n%s"
                                     % (pattern, timeout, "".join(self.all)))
            return found()

    def text(self):
        return "".join(self.all)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=20)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=20)
        self._reader.join(timeout=20)
        self.proc.stderr.close()


def inventory(port):
    channel = __import__("grpc").insecure_channel("127.0.0.1:%d" % port)
    return channel, sliced_pb2_grpc.InventoryStub(channel)


def node_states(port):
    channel, stub = inventory(port)
    with channel:
        nodes = stub.ListNodes(sliced_pb2.ListNodesRequest(), timeout=10).nodes
    return {n.node_id: sliced_pb2.NodeState.Name(n.state) for n in nodes}


def wait_states(port, expected, timeout=20, what=""):
    """Polls until the nodes in `expected` have those states (a lease
    running out announces nothing, so this is polled)."""
    def check():
        states = node_states(port)
        return all(states.get(n) == s for n, s in expected.items()) and states
    return wait_until(check, timeout, what or "states %r" % expected)


def scrape(port):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            "http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()
