"""Simulated TPU hosts and fleets on the agent's own code.

    python3 -m sliced_agent.sim --server 127.0.0.1:50051 \\
        --slices v6e:4x4:1,v4:2x2x2:1 --cpu_nodes 2

A SimHost is a temp root (fake /dev/accel*, /proc for device holders), a
libtpu log directory, the environment the KubeRay TPU webhook would give
(TPU_* variables, SLICED_CHIP_COORDS), and its metrics fake (FakeLibtpu or
FakeDevicePlugin, sim_fakes.py). Tests start real agent processes on them;
the fleet here runs many agents in this one process on a shared Runner
(each agent with its own channel, tailer and state), so 1,000 fit on a small
machine. Nothing leaves 127.0.0.1; GCE_METADATA_HOST is set only to a fake.

Not thread-safe: build hosts on one thread; the fleet's agents run on the
Runner's.
"""
import argparse
import logging
import os
import random
import socket
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

from prometheus_client import CollectorRegistry, start_http_server

from sliced_agent.agent import AgentMetrics
from sliced_agent.host import LITE, GENERATIONS
from sliced_agent.main import build, parser as agent_parser
from sliced_agent.runner import Runner
from sliced_agent.signals import Signals
from sliced_agent.sim_fakes import ChipWaves, FakeDevicePlugin, FakeLibtpu

_log = logging.getLogger("sliced_agent.sim")


def free_port() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range, for a
    process started on a port chosen beforehand, or restarted on the same
    one while clients keep dialling it. Ports in the ephemeral range are
    not safe for that: between the choice and the bind (or the restart) the
    kernel may hand the port to another bind to port 0 or to an outgoing
    connection, even to one of those dialling clients, which Linux then
    connects to itself. Ports below the range are handed out only by name.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    first = max(1024, low - 12000)
    if low - first < 1000:
        raise RuntimeError("ephemeral ports start at %d: no room below them" % low)
    pick = random.Random()  # not the caller's seeded global generator
    for _ in range(200):
        port = pick.randrange(first, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in [%d, %d)" % (first, low))


def slice_shape(generation: str, topology: str):
    """(pod type, chips per host, hosts, host bounds) of a slice."""
    ray_type, cores = GENERATIONS[generation]
    dims = [int(d) for d in topology.split("x")]
    chips = 1
    for d in dims:
        chips *= d
    per_host = chips if ray_type in LITE and chips <= 8 else 4
    bounds = tuple(dims + [1] * (3 - len(dims))) if per_host == chips else (2, 2, 1)
    return "%s-%d" % (generation, chips * cores), per_host, chips // per_host, bounds


def chip_coords(worker_id: int, topology: str, bounds) -> str:
    """SLICED_CHIP_COORDS of a host laid out row-major in its slice's host grid."""
    dims = [int(d) for d in topology.split("x")] + [1]
    grid = [max(1, dims[i] // bounds[i]) for i in range(3)]
    pos = (worker_id % grid[0], (worker_id // grid[0]) % grid[1], worker_id // (grid[0] * grid[1]))
    return ";".join("%d,%d,%d" % (pos[0] * bounds[0] + x, pos[1] * bounds[1] + y,
                                  pos[2] * bounds[2] + z)
                    for z in range(bounds[2]) for y in range(bounds[1]) for x in range(bounds[0]))


class SimHost:
    """One simulated host under `base`/`name`. source: "libtpu",
    "device-plugin" or "none"; `plugin` shares one FakeDevicePlugin."""

    def __init__(self, base: str, name: str, generation: str = "", topology: str = "",
                 slice_name: str = "", worker_id: int = 0, source: str = "libtpu",
                 plugin: Optional[FakeDevicePlugin] = None, seed: int = 0):
        self.name = name
        self.root = os.path.join(base, name, "root")
        self.log_dir = os.path.join(base, name, "tpu_logs")
        os.makedirs(os.path.join(self.root, "dev"), exist_ok=True)
        os.makedirs(self.log_dir, exist_ok=True)
        self.env: Dict[str, str] = {"TPU_LOG_DIR": self.log_dir}
        self.fakes = []
        self.waves = None
        if not generation:
            return
        pod_type, per_host, hosts, bounds = slice_shape(generation, topology)
        for i in range(per_host):
            open(os.path.join(self.root, "dev", "accel%d" % i), "w").close()
        self.env.update({
            "TPU_ACCELERATOR_TYPE": pod_type, "TPU_TOPOLOGY": topology,
            "TPU_WORKER_ID": str(worker_id), "TPU_NAME": slice_name,
            "TPU_WORKER_HOSTNAMES": ",".join("%s-w%d.sim" % (slice_name, w)
                                             for w in range(hosts)),
            "SLICED_CHIP_COORDS": chip_coords(worker_id, topology, bounds),
        })
        self.waves = ChipWaves(per_host, GENERATIONS[generation][0], seed)
        if source == "libtpu":
            libtpu = FakeLibtpu(self.waves)
            self.fakes.append(libtpu)
            self.env["TPU_RUNTIME_METRICS_PORTS"] = str(libtpu.port)
        elif source == "device-plugin":
            if plugin is None:
                plugin = FakeDevicePlugin(self.waves, "tpu-" + generation, topology, name)
                self.fakes.append(plugin)
            self.env["TPU_DEVICE_PLUGIN_ADDR"] = plugin.address
        if source != "libtpu":
            self.env["TPU_RUNTIME_METRICS_PORTS"] = "1"  # nothing listens: libtpu absent

    def write_log(self, text: str, severity: str = "I", file: str = "libtpu.log") -> None:
        now = time.time()
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now))
        with open(os.path.join(self.log_dir, file), "a") as f:
            f.write("%s%s.%06d %7d tpu_runtime.cc:42] %s\n" % (
                severity, stamp, int(now % 1 * 1e6), os.getpid(), text))

    def hold_device(self, pid: int = 4242, device: str = "/dev/accel0",
                    command: str = "python3") -> None:
        """Makes <root>/proc/<pid> look like a process holding `device`."""
        fd_dir = os.path.join(self.root, "proc", str(pid), "fd")
        os.makedirs(fd_dir, exist_ok=True)
        os.symlink(device, os.path.join(fd_dir, "3"))
        with open(os.path.join(self.root, "proc", str(pid), "comm"), "w") as f:
            f.write(command + "\n")

    def stop(self) -> None:
        for fake in self.fakes:
            fake.stop()


def make_hosts(base: str, slices: str, cpu_nodes: int, source: str,
               shared_plugin: bool = False) -> List[SimHost]:
    """Hosts for "gen:topology:count,..." slices (source "mixed" alternates
    libtpu and device-plugin per slice) and `cpu_nodes` CPU hosts."""
    hosts, plugin, n = [], None, 0
    for spec in filter(None, slices.split(",")):
        generation, topology, count = spec.split(":")
        for s in range(int(count)):
            name = "sim-%s-%d" % (generation, s)
            src = source if source != "mixed" else ("libtpu", "device-plugin")[n % 2]
            _, per_host, n_hosts, _ = slice_shape(generation, topology)
            if src == "device-plugin" and shared_plugin and plugin is None:
                plugin = FakeDevicePlugin(ChipWaves(per_host, GENERATIONS[generation][0]),
                                          "tpu-" + generation, topology, "shared")
            for w in range(n_hosts):
                hosts.append(SimHost(base, "%s-w%d" % (name, w), generation, topology, name,
                                     w, src, plugin if shared_plugin else None, seed=n))
            n += 1
    if plugin is not None:
        hosts[0].fakes.append(plugin)
    for i in range(cpu_nodes):
        hosts.append(SimHost(base, "sim-cpu-%d" % i))
    return hosts


class LogWriter:
    """Appends a glog line to every host's log file `rate` times a second,
    rotating each file (rename to .1) every `rotate_every` lines."""

    def __init__(self, hosts: List[SimHost], rate: float, rotate_every: int = 200):
        self.hosts = [h for h in hosts if h.waves is not None]
        self.rate, self.rotate_every = rate, rotate_every
        self.stop = threading.Event()
        self.count = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while self.rate > 0 and not self.stop.wait(1.0 / self.rate):
            self.count += 1
            for h in self.hosts:
                if self.count % self.rotate_every == 0:
                    path = os.path.join(h.log_dir, "libtpu.log")
                    os.replace(path, path + ".1")
                severity = "W" if self.count % 10 == 0 else "I"
                h.write_log("step %d: %s" % (self.count, "slow collective" if severity == "W"
                                             else "ok"), severity)


class Fleet:
    """Agents for `hosts`, all in this process on one Runner."""

    def __init__(self, server: str, hosts: List[SimHost], agent_args: List[str],
                 workers: int = 8, registry: Optional[CollectorRegistry] = None):
        self.hosts = hosts
        self.metrics = AgentMetrics(registry or CollectorRegistry())
        self.runner = Runner(workers=workers)
        self.agents = []
        rng = random.Random(7)
        for h in hosts:
            args = ["--server", server, "--root", h.root] + agent_args
            if h.waves is None:
                args += ["--node_id", h.name, "--address", h.name + ".sim", "--cpu", "16",
                         "--memory_bytes", str(64 << 30)]
            else:
                args += ["--cpu", "180", "--memory_bytes", str(720 << 30)]
            agent, _ = build(agent_parser().parse_args(args), h.env, self.metrics,
                             client_options=[("grpc.use_local_subchannel_pool", 1)],
                             rng=random.Random(rng.random()))
            self.agents.append(agent)
            for name, task in agent.tasks():  # staggered: no herd at start
                self.runner.add(task, rng.uniform(0, 1.0), "%s/%s" % (agent.node_id, name))

    def start(self) -> "Fleet":
        self.runner.start()
        return self

    def stop(self) -> None:
        self.runner.stop(timeout=5.0)
        for a in self.agents:
            a.client.close()
            for s in a.sources:
                getattr(s, "close", lambda: None)()


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="sliced_agent.sim", description="A simulated fleet")
    p.add_argument("--server", default="127.0.0.1:50051")
    p.add_argument("--slices", default="v6e:4x4:1,v4:2x2x2:1",
                   help="generation:topology:count,... (default: %(default)s)")
    p.add_argument("--cpu_nodes", type=int, default=2)
    p.add_argument("--source", default="mixed", choices=["libtpu", "device-plugin", "mixed"])
    p.add_argument("--shared_plugin", action="store_true",
                   help="one device-plugin fake for all hosts (large fleets)")
    p.add_argument("--log_rate", type=float, default=0.5, help="log lines per second per host")
    p.add_argument("--workers", type=int, default=8, help="Runner threads")
    p.add_argument("--dir", default=None, help="where host roots go (default: a temp dir)")
    p.add_argument("--metrics_port", type=int, default=0, help="the fleet's agent counters")
    p.add_argument("--duration", type=float, default=0, help="seconds (0: until SIGTERM)")
    p.add_argument("agent_args", nargs="*", help="more agent options, after --")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="sliced-sim-")
    base = args.dir or tmp.name
    hosts = make_hosts(base, args.slices, args.cpu_nodes, args.source, args.shared_plugin)
    registry = CollectorRegistry()
    fleet = Fleet(args.server, hosts, ["--metrics_port", "0"] + args.agent_args,
                  args.workers, registry).start()
    writer = LogWriter(hosts, args.log_rate)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)
    signals = Signals()
    print("fleet: %d agents for %s on %s (roots in %s)" % (
        len(hosts), args.server, args.slices, base), flush=True)
    signals.wait(args.duration or None)
    writer.stop.set()
    fleet.stop()
    for h in hosts:
        h.stop()
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
