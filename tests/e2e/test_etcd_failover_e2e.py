"""High availability on etcd (issue 19, docs/ha.md): 3 etcd members and 2
sliced daemons on loopback, under concurrent creates and removes from clients
that follow the leader (a standby answers UNAVAILABLE naming it in the
`sliced-leader` trailing metadata). Rounds of: kill -9 of the leading daemon
(then restarted as a standby), SIGSTOP of the leader for longer than its lease
then SIGCONT (the deposed leader must acknowledge nothing more), and kill -9 of
the etcd raft leader. A history check at the end: every acknowledged create is
there on the same nodes, acknowledged removes are gone, no node is over
capacity (no chip held twice); and the failover time — from the last
acknowledgement before a kill to the first one after it — has p99 <= 10 s.
The standbys are hot (they keep a watched copy): most take-overs must serve
from it, and a standby's /metrics says it stands by and what its copy holds.

The daemons run with `--etcd_lease_ttl=2s` (the default is 5 s) so that the
issue's 50 kill -9 rounds fit a CI budget of about 3 minutes on 2 cores: a
failover is mostly the dead leader's lease running out, so each gap here is
about 2 s where production (5 s) sees about 5 s; SLICED_FAILOVER_LEASE_TTL
sets another (whole seconds). SLICED_FAILOVER_ROUNDS sets the kill -9 rounds
(default 50). Skipped where /usr/bin/etcd is missing (CI installs
etcd-server).
"""
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

from sliced_testlib import REPO, SLICED_BIN, lost_its_port, sliced_pb2, sliced_pb2_grpc
from test_crash_loop_e2e import History, check_history
from test_placement_e2e import SEED, cpu_node, tpu_slice

sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_agent.sim import free_port  # noqa: E402
from sliced_client import Client  # noqa: E402

P = sliced_pb2
ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"
KILL_ROUNDS = int(os.environ.get("SLICED_FAILOVER_ROUNDS", "50"))
CLIENTS = 4
LEASE_TTL_S = int(os.environ.get("SLICED_FAILOVER_LEASE_TTL", "2"))


def named_leader(error):
    """The `sliced-leader` trailing metadata of a failed call (None when
    absent: not a refusal)."""
    return dict(error.trailing_metadata() or ()).get("sliced-leader")


class Etcd:
    """A 3-member etcd cluster on loopback in a temp dir."""

    def __init__(self, root, members=3):
        self.root = root
        # free_port() picks ports free at that moment; a test running beside
        # this one may bind one first, and that member exits: then the
        # cluster starts again, on new ports (three tries).
        for attempt in range(3):
            self.members = [{"name": "m%d" % i, "client": free_port(), "peer": free_port()}
                            for i in range(members)]
            initial = ",".join("%s=http://127.0.0.1:%d" % (m["name"], m["peer"])
                               for m in self.members)
            for m in self.members:
                m["args"] = [
                    ETCD, "--name=" + m["name"],
                    "--data-dir=%s/%s-%d" % (root, m["name"], attempt),
                    "--listen-client-urls=http://127.0.0.1:%d" % m["client"],
                    "--advertise-client-urls=http://127.0.0.1:%d" % m["client"],
                    "--listen-peer-urls=http://127.0.0.1:%d" % m["peer"],
                    "--initial-advertise-peer-urls=http://127.0.0.1:%d" % m["peer"],
                    "--initial-cluster=" + initial, "--initial-cluster-state=new",
                    "--heartbeat-interval=100", "--election-timeout=1000"]
                self.start(m)
            if self._listening() or attempt == 2:
                return
            self.close()

    def _listening(self, timeout=15):
        """Whether every member accepts connections on its client port
        before any of them exits."""
        deadline = time.monotonic() + timeout
        waiting = list(self.members)
        while waiting and time.monotonic() < deadline:
            if any(m["proc"].poll() is not None for m in self.members):
                return False
            try:
                socket.create_connection(("127.0.0.1", waiting[0]["client"]), timeout=1).close()
                waiting.pop(0)
            except OSError:
                time.sleep(0.05)
        return not waiting

    def start(self, m):
        m["log"] = open("%s/%s.log" % (self.root, m["name"]), "a")
        m["proc"] = subprocess.Popen(m["args"], stdout=m["log"], stderr=m["log"])

    def endpoints(self):
        return ",".join("127.0.0.1:%d" % m["client"] for m in self.members)

    def status(self):
        out = self.etcdctl("endpoint", "status", "-w", "json")
        return json.loads(out) if out.strip() else []

    def raft_leader(self):
        """The member that leads raft now."""
        for st in self.status():
            if st["Status"]["header"]["member_id"] == st["Status"]["leader"]:
                port = int(st["Endpoint"].rsplit(":", 1)[1])
                return next(m for m in self.members if m["client"] == port)
        return None

    def etcdctl(self, *args, timeout=10):
        try:
            return subprocess.run(
                [ETCDCTL, "--endpoints=" + self.endpoints()] + list(args),
                env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True,
                timeout=timeout).stdout
        except subprocess.TimeoutExpired as e:  # a watch: what it printed
            out = e.stdout or ""
            return out.decode() if isinstance(out, bytes) else out

    def create_revision(self, key):
        kvs = json.loads(self.etcdctl("get", key, "-w", "json")).get("kvs", [])
        return kvs[0]["create_revision"] if kvs else None

    def deleted_revision(self, key):
        """The revision that deleted `key` (from etcd's history)."""
        out = self.etcdctl("watch", "--rev=1", key, "-w", "json", timeout=3)
        for line in out.splitlines():
            if not line.startswith("{"):
                continue
            for ev in json.loads(line).get("Events", []):
                if ev.get("type") == 1:  # DELETE
                    return ev["kv"]["mod_revision"]
        return None

    def close(self):
        for m in self.members:
            if m["proc"].poll() is None:
                m["proc"].kill()
            m["proc"].wait(timeout=20)
            m["log"].close()


class HaDaemon:
    """One `sliced --store=etcd` process; its stdout lines go to a queue."""

    def __init__(self, port, endpoints, cluster, root, lease_ttl_s=LEASE_TTL_S):
        self.port, self.endpoints, self.cluster, self.root = port, endpoints, cluster, root
        self.lease_ttl_s = lease_ttl_s
        self.proc = None
        self.addr = "127.0.0.1:%d" % port
        self.http = free_port()
        self.loaded_from = None
        # Until its ports were bound once: a port taken before the daemon
        # bound it (lost_its_port) makes wait_line start it again on new ones.
        self.bound = False

    def start(self):
        self._close_files()
        self.lines = queue.Queue()
        self.line_times = []  # (time.monotonic() it was read, line)
        self.err = open("%s/sliced-%d.err" % (self.root, self.port), "a")
        self.proc = subprocess.Popen(
            [SLICED_BIN, "--store=etcd", "--etcd_endpoints=" + self.endpoints,
             "--etcd_cluster=" + self.cluster, "--listen=" + self.addr,
             "--metrics_listen=127.0.0.1:%d" % self.http, "--heartbeat_timeout=0",
             "--etcd_lease_ttl=%ds" % self.lease_ttl_s],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self):
        proc, lines = self.proc, self.lines
        try:
            for line in proc.stdout:
                self.line_times.append((time.monotonic(), line))
                lines.put(line)
        except (OSError, ValueError):
            pass  # closed by a restart
        lines.put(None)  # the process closed its stdout

    def _lost_its_ports(self):
        """Whether the first start failed because another process held a
        port (see `bound`)."""
        if self.bound or self.proc.wait(timeout=20) == 0:
            return False
        self.err.flush()
        with open(self.err.name) as f:
            return lost_its_port(f.read())

    def wait_line(self, text, timeout=30):
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                if not self._lost_its_ports():
                    break
                self.port, self.http = free_port(), free_port()
                self.addr = "127.0.0.1:%d" % self.port
                self.start()
                continue
            seen.append(line)
            if "standby on" in line:
                self.bound = True
            if text in line:
                return line
        self.err.flush()
        with open(self.err.name) as f:
            stderr = f.read()[-2000:]
        raise AssertionError("%s printed no %r in %ds (exit status %s): %r; stderr ends: %s"
                             % (self.addr, text, timeout, self.proc.poll(), seen, stderr))

    def metrics(self):
        """This daemon's /metrics as {series: value}."""
        url = "http://127.0.0.1:%d/metrics" % self.http
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def signal(self, sig):
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=20)

    def _close_files(self):
        if self.proc:
            self.proc.stdout.close()
            self.err.close()

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=20)
        self._close_files()
        self.proc = None


class Follower:
    """Calls whichever daemon leads: a standby's UNAVAILABLE names the leader
    in trailing metadata; anything else unreachable is tried in turn."""

    def __init__(self, addrs):
        self.addrs = list(addrs)
        self.channels = {a: grpc.insecure_channel(a) for a in self.addrs}
        self.current = self.addrs[0]
        self.lock = threading.Lock()
        self.failed = {}  # status code name -> failed attempts

    def call(self, service, method, request, deadline_s=40):
        deadline = time.monotonic() + deadline_s
        while True:
            addr = self.current
            stub = getattr(service(self.channels[addr]), method)
            try:
                return addr, stub(request, timeout=3)
            except grpc.RpcError as e:
                with self.lock:
                    self.failed[e.code().name] = self.failed.get(e.code().name, 0) + 1
                if e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                leader = named_leader(e)
                if leader in self.channels and leader != addr:
                    self.current = leader
                else:
                    self.current = self.addrs[(self.addrs.index(addr) + 1) % len(self.addrs)]
                    time.sleep(0.05)
                if time.monotonic() > deadline:
                    raise

    def close(self):
        for ch in self.channels.values():
            ch.close()


class Acks:
    """Acknowledgement times and which daemon gave them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.times = []  # (monotonic time, daemon address)
        self.creates = []  # (monotonic time, daemon address, group id)

    def add(self, addr, created=None):
        with self.lock:
            self.times.append((time.monotonic(), addr))
            if created:
                self.creates.append((self.times[-1][0], addr, created))

    def count(self):
        with self.lock:
            return len(self.times)

    def gap_around(self, t):
        """From the last acknowledgement before t to the first after it."""
        with self.lock:
            before = [x for x, _ in self.times if x <= t]
            after = [x for x, _ in self.times if x > t]
        return (min(after) - max(before)) if before and after else None

    def created_by_since(self, addr, t):
        with self.lock:
            return [pg for x, a, pg in self.creates if a == addr and x > t]


def client(follower, k, history, acks, stop):
    i = 0
    while not stop.is_set():
        i += 1
        rid = "c%d-%d" % (k, i)
        try:
            if k % 2 == 0:
                request = P.CreatePlacementGroupRequest(
                    bundles=[P.Bundle(resources={"CPU": 2}) for _ in range(2)],
                    strategy=P.SPREAD, request_id=rid)
                addr, pg = follower.call(sliced_pb2_grpc.PlacementStub,
                                         "CreatePlacementGroup", request)
            else:
                request = P.SubmitScalingConfigRequest(scaling_config=SEED, request_id=rid)
                addr, pg = follower.call(sliced_pb2_grpc.PlacementStub,
                                         "SubmitScalingConfig", request)
            with history.lock:
                history.created[pg.placement_group_id] = pg
            acks.add(addr, created=pg.placement_group_id)
            if i % 3 == 0:
                with history.lock:
                    history.remove_sent.add(pg.placement_group_id)
                try:
                    addr, _ = follower.call(
                        sliced_pb2_grpc.PlacementStub, "RemovePlacementGroup",
                        P.RemovePlacementGroupRequest(placement_group_id=pg.placement_group_id))
                except grpc.RpcError as e:
                    # A retried remove that had landed before the failover.
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                with history.lock:
                    history.removed.add(pg.placement_group_id)
                acks.add(addr)
        except grpc.RpcError:
            if stop.is_set():
                return
            time.sleep(0.1)  # unacknowledged: left as unknown


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


@unittest.skipUnless(os.access(ETCD, os.X_OK), ETCD + " is missing: apt-get install etcd-server")
class EtcdFailover(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="sliced-ha-e2e-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.etcd = Etcd(self.root)
        self.addCleanup(self.etcd.close)
        self.cluster = cluster = "e2e%d" % os.getpid()
        self.daemons = [HaDaemon(free_port(), self.etcd.endpoints(), cluster, self.root)
                        for _ in range(2)]
        for d in self.daemons:
            self.addCleanup(d.close)
        self.daemons[0].start()
        line = self.daemons[0].wait_line("leading", timeout=30)
        self.daemons[0].leader_key = line.split("etcd key ")[1].split(",")[0]
        self.daemons[1].start().wait_line("standby on", timeout=30)
        self.leader = self.daemons[0]
        self.follower = Follower([d.addr for d in self.daemons])
        self.addCleanup(self.follower.close)

    def wait_for_new_leader(self, timeout=30):
        """The daemon that prints 'leading' next."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for d in self.daemons:
                if d.proc.poll() is not None:
                    continue
                try:
                    line = d.lines.get(timeout=0.05)
                except queue.Empty:
                    continue
                if line is not None and "leading" in line:
                    d.leader_key = line.split("etcd key ")[1].split(",")[0]
                    d.loaded_from = line.split(" from ", 1)[1].rsplit(", metrics", 1)[0]
                    return d
        raise AssertionError("no daemon took over in %ds" % timeout)

    def wait_for_stable_roles(self, timeout=30):
        """The leader, once one daemon says it leads and the other that it
        stands by with its copy watched (their /metrics)."""
        deadline = time.monotonic() + timeout
        while True:
            roles = []
            for d in self.daemons:
                try:
                    roles.append((d, d.metrics()))
                except OSError:
                    roles.append((d, {}))
            leaders = [d for d, m in roles if m.get("sliced_ha_leader") == 1]
            standbys = [d for d, m in roles if m.get("sliced_ha_leader") == 0
                        and m.get("sliced_ha_standby_watching") == 1]
            if len(leaders) == 1 and len(standbys) == len(self.daemons) - 1:
                return leaders[0]
            self.assertLess(time.monotonic(), deadline, [m for _, m in roles])
            time.sleep(0.1)

    def test_failover_under_load(self):
        rng = random.Random(20261123)
        history, acks, stop = History(), Acks(), threading.Event()
        nodes = [cpu_node("c-%02d" % i, 8) for i in range(16)]
        for s in range(4):
            nodes += tpu_slice("s%d" % s, 4)
        self.follower.call(sliced_pb2_grpc.InventoryStub, "RegisterNodes",
                           P.RegisterNodesRequest(nodes=nodes))
        threads = [threading.Thread(target=client, args=(self.follower, k, history, acks, stop))
                   for k in range(CLIENTS)]
        for t in threads:
            t.start()
        gaps = []

        def await_acks(n):
            target = acks.count() + n
            deadline = time.monotonic() + 60
            while acks.count() < target:
                self.assertLess(time.monotonic(), deadline, "no progress")
                time.sleep(0.02)

        # A standby exports /metrics: its role and its watched copy. (Its
        # copy is read before its watch's first answer: both, then.)
        standby = self.daemons[1]
        deadline = time.monotonic() + 20
        while True:
            m = standby.metrics()
            if (m.get("sliced_ha_standby_records", 0) >= len(nodes)
                    and m.get("sliced_ha_standby_watching") == 1):
                break
            self.assertLess(time.monotonic(), deadline, m)
            time.sleep(0.1)
        self.assertEqual(m["sliced_ha_leader"], 0)
        self.assertEqual(m["sliced_ha_standby_watching"], 1)
        self.assertGreater(m["sliced_ha_standby_revision"], 0)
        self.assertGreater(m["process_resident_memory_bytes"], 0)
        m = self.daemons[0].metrics()
        self.assertEqual(m["sliced_ha_leader"], 1)
        self.assertIn("sliced_commit_duration_seconds_count", m)

        # Rounds: kill -9 the leading daemon; it comes back as a standby.
        from_copy = 0
        for round_no in range(KILL_ROUNDS):
            await_acks(rng.randint(10, 60))
            killed = self.leader
            t = time.monotonic()
            killed.signal(signal.SIGKILL)
            killed.start()
            self.leader = self.wait_for_new_leader()
            from_copy += "standby's copy" in self.leader.loaded_from
            await_acks(1)
            gaps.append(acks.gap_around(t))

        # SIGSTOP the leader past its lease, then SIGCONT: it must step down
        # and acknowledge nothing after it was stopped.
        await_acks(50)
        paused = self.leader
        t = time.monotonic()
        paused.signal(signal.SIGSTOP)
        self.leader = self.wait_for_new_leader()
        self.assertIsNot(self.leader, paused)
        await_acks(1)
        gaps.append(acks.gap_around(t))
        time.sleep(1)
        paused.signal(signal.SIGCONT)
        paused.wait_line("lost leadership", timeout=LEASE_TTL_S * 3)
        await_acks(50)
        # Replies of the paused leader may still arrive after SIGCONT, but
        # only for writes committed before its key was deleted.
        deleted_at = self.etcd.deleted_revision(paused.leader_key)
        self.assertIsNotNone(deleted_at)
        late = acks.created_by_since(paused.addr, t)
        for pg_id in late:
            created_at = self.etcd.create_revision(
                "/sliced/%s/placement_groups/%s" % (self.cluster, pg_id))
            if created_at is not None:  # else removed since
                self.assertLess(created_at, deleted_at,
                                "a deposed leader committed %s" % pg_id)

        # kill -9 the etcd raft leader: sliced keeps serving on the others.
        member = self.etcd.raft_leader()
        self.assertIsNotNone(member)
        t = time.monotonic()
        member["proc"].kill()
        member["proc"].wait(timeout=20)
        await_acks(50)
        gaps.append(acks.gap_around(t))

        stop.set()
        for th in threads:
            th.join(timeout=60)
        # Losing the etcd raft leader may also cost sliced its leader (a
        # lease not renewed for a TTL): wait for one leader and one hot
        # standby, by their /metrics, before the last checks.
        # The checks only read, so a leadership change during them (a lease
        # missed on a loaded machine) is met as a client meets it: find the
        # leader again and read again.
        for attempt in range(3):
            leader = self.wait_for_stable_roles()
            self.follower.current = leader.addr
            leader_ch = grpc.insecure_channel(self.follower.current)
            self.addCleanup(leader_ch.close)
            try:
                live = check_history(
                    self, sliced_pb2_grpc.InventoryStub(leader_ch),
                    sliced_pb2_grpc.PlacementStub(leader_ch), history,
                    max_unknown=CLIENTS * (KILL_ROUNDS + 2))
                break
            except grpc.RpcError as e:
                if attempt == 2 or e.code() not in (
                        grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    raise
                print("\nfinal check: %s from %s, finding the leader again"
                      % (e.code(), self.follower.current), flush=True)
        def lost_leadership():
            return sum(1 for d in self.daemons for _, line in list(d.line_times)
                       if "lost leadership" in line)

        changes = lost_leadership()

        def ends_on_the_leader(c):
            """The client ended on the leader found above, or leadership
            moved meanwhile (a lease missed on a loaded machine) and it ended
            on the daemon leading once the roles are stable again, or on one
            that has lost leadership since. The old leader says "lost
            leadership" only when it notices, which may be after the standby
            took over and answered the client."""
            if c.address == self.follower.current:
                return
            leader = self.wait_for_stable_roles()
            print("\nleadership moved during the last checks: the client is on %s, "
                  "%s leads" % (c.address, leader.addr), flush=True)
            self.assertTrue(c.address == leader.addr or lost_leadership() > changes,
                            (c.address, leader.addr, self.follower.current))

        # The Python client and slicectl, pointed at the standby, follow it
        # to the leader (or wait for the next one, should leadership move
        # again meanwhile: then the client may end on the standby, now
        # leading).
        standby = next(d for d in self.daemons if d.addr != self.follower.current)
        with Client(standby.addr) as c:
            self.assertEqual(len(c.placement_groups()), live)
            ends_on_the_leader(c)
        with Client(standby.addr) as c:  # a watch opened on the standby
            events = c.watch(timeout=30)
            self.assertTrue(next(events).id)
            events.close()
            ends_on_the_leader(c)
        slicectl = os.environ.get("SLICECTL_BIN")
        if slicectl:
            out = subprocess.run([slicectl, "--server=" + standby.addr, "nodes"],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("c-00", out.stdout)
        gaps = [g for g in gaps if g is not None]
        print("\nfailover: %d rounds (lease %ds), %d acknowledgements, %d live groups, "
              "%d creates acknowledged by the paused leader after SIGSTOP (all committed "
              "before its key was deleted); %d of %d kill -9 take-overs served from the "
              "standby's copy; %d more leadership changes after the SIGSTOP round; "
              "gap p50 %.2fs p99 %.2fs max %.2fs; failed attempts by code %s"
              % (len(gaps), LEASE_TTL_S, acks.count(), live, len(late), from_copy,
                 KILL_ROUNDS, changes, percentile(gaps, 50), percentile(gaps, 99),
                 max(gaps), self.follower.failed),
              flush=True)
        # A dying or deposed leader fails calls UNAVAILABLE (a deadline runs
        # out while one is paused); never UNKNOWN or INTERNAL (a remove's
        # NOT_FOUND is its retry's). CANCELLED is counted, not failed: gRPC
        # drops a call that reaches a standby's redirect as it stops to
        # lead (docs/ha.md, "What a client sees at step-down"); the
        # step-down itself is held to UNAVAILABLE by
        # test_etcd_step_down_e2e.
        self.assertEqual(
            set(self.follower.failed)
            - {"UNAVAILABLE", "DEADLINE_EXCEEDED", "NOT_FOUND", "CANCELLED"},
            set(), self.follower.failed)
        self.assertGreaterEqual(from_copy, 0.8 * KILL_ROUNDS)
        self.assertGreater(len(history.created), 20)
        self.assertLessEqual(percentile(gaps, 99), 10.0, gaps)



class HaFlags(unittest.TestCase):
    def test_a_wildcard_listen_needs_advertise(self):
        # Refused before etcd is reached: a standby names the leader by its
        # advertised address, and two daemons on 0.0.0.0 would name the same.
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        for listen in ("0.0.0.0:0", "[::]:0"):
            r = subprocess.run(
                [SLICED_BIN, "--store=etcd", "--etcd_endpoints=127.0.0.1:%d" % free_port(),
                 "--listen=" + listen, "--insecure_listen_any", "--metrics_listen=",
                 "--data_dir=" + tmp],
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn("--advertise (host:port clients reach this daemon at) is required "
                          "with a wildcard --listen", r.stderr)


if __name__ == "__main__":
    unittest.main()
