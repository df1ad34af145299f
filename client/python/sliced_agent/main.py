"""python3 -m sliced_agent --server HOST:PORT: one host's agent (docs/agent.md).

Exit codes: 0 after SIGTERM/SIGINT, 2 for a bad option or a host fact that
cannot be used (the message names its source: an environment variable or a
metadata path). SIGUSR1 drains the node (DrainNode) and the agent goes on.
"""
import argparse
import logging
import os
import random
import signal
import sys
import threading
from typing import List, Mapping, Optional

import grpc
from prometheus_client import REGISTRY, start_http_server

from sliced_agent.agent import Agent, AgentMetrics, AgentOptions
from sliced_agent.host import DetectOptions, HostError, detect
from sliced_agent.logtail import LogTailer
from sliced_agent.metadata import find_metadata
from sliced_agent.runner import Runner
from sliced_agent.signals import Signals
from sliced_agent.tpu_metrics import DEVICES_PER_CHIP, DevicePluginSource, LibtpuSource
from sliced_client import DEFAULT_ADDRESS, Client

_log = logging.getLogger("sliced_agent")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sliced_agent", description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--server", default=DEFAULT_ADDRESS, help="the daemon, HOST:PORT")
    a("--token", help="bearer token (prefer --token_file: this shows in ps)")
    a("--token_file", help="file holding the bearer token, e.g. an agent token")
    a("--tls_ca", help="CA certificate (PEM): use TLS")
    a("--tls_cert", help="client certificate (PEM) for mutual TLS")
    a("--tls_key", help="client key (PEM) for mutual TLS")
    a("--root", default="/", help="where /dev, /sys and /proc are read")
    a("--node_id", help="default: <TPU_NAME>-w<worker id>, or the host name")
    a("--address", help="default: this worker's TPU_WORKER_HOSTNAMES entry, or the host name")
    a("--cpu", type=float, help="CPU resource (default: the CPU count)")
    a("--memory_bytes", type=float, help="memory resource (default: MemTotal)")
    a("--label", action="append", default=[], metavar="KEY=VALUE", help="extra node label")
    a("--log_dir", default=None, help="libtpu logs (default $TPU_LOG_DIR or /tmp/tpu_logs)")
    a("--device_plugin", default=None,
      help="GKE TPU device plugin HOST:PORT (default $TPU_DEVICE_PLUGIN_ADDR)")
    a("--libtpu_ports", default=None,
      help="libtpu metric service ports, comma-separated (default "
      "$TPU_RUNTIME_METRICS_PORTS or 8431)")
    a("--metrics_interval", type=float, default=10.0, help="seconds between TPU reports")
    a("--log_interval", type=float, default=1.0, help="seconds between log polls")
    a("--health_interval", type=float, default=10.0, help="seconds between health checks")
    a("--log_buffer_lines", type=int, default=10000,
      help="log lines kept while the daemon is unreachable")
    a("--backoff_cap", type=float, default=None,
      help="longest wait between failed heartbeats (default: a quarter of the lease)")
    a("--metrics_port", type=int, default=9465, help="the agent's /metrics (0: off)")
    a("--metrics_address", default="127.0.0.1")
    a("--verbose", action="store_true")
    return p


def credentials(args) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials from --tls_ca/--tls_cert/--tls_key, None for plaintext."""
    if not args.tls_ca:
        if args.tls_cert or args.tls_key:
            raise ValueError("--tls_cert/--tls_key need --tls_ca")
        return None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls_cert and --tls_key go together")
    read = lambda path: open(path, "rb").read() if path else None  # noqa: E731
    return grpc.ssl_channel_credentials(root_certificates=read(args.tls_ca),
                                        private_key=read(args.tls_key),
                                        certificate_chain=read(args.tls_cert))


def token(args) -> Optional[str]:
    if args.token_file:
        with open(args.token_file) as f:
            return f.read().strip()
    return args.token


def labels(pairs: List[str]):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError("--label %r: expected KEY=VALUE" % pair)
        out[key] = value
    return out


def build(args, env: Mapping[str, str], metrics: AgentMetrics,
          client_options=None, rng: Optional[random.Random] = None):
    """(agent, metadata or None) for one host. Raises HostError, ValueError,
    OSError. Used by main() and by the simulated fleet (sim.py)."""
    metadata = find_metadata(args.root, env)
    facts = detect(DetectOptions(root=args.root, node_id=args.node_id, address=args.address,
                                 cpu=args.cpu, memory_bytes=args.memory_bytes,
                                 labels=labels(args.label)), env, metadata)
    # gRPC's own reconnect backoff grows to 120 s: after an outage of a few
    # seconds a channel stayed down 10-20 s after the daemon was back (nodes
    # went DEAD; bench/agents.py --outage). Capped at 4 s (+20 % gRPC jitter),
    # within the default 10 s lease; all three are needed, max alone is not
    # honoured. The heartbeat loop's full jitter spreads the agents.
    options = [("grpc.initial_reconnect_backoff_ms", 1000),
               ("grpc.min_reconnect_backoff_ms", 2000),
               ("grpc.max_reconnect_backoff_ms", 4000)] + list(client_options or [])
    client = Client(args.server, timeout=5.0, max_attempts=1, credentials=credentials(args),
                    token=token(args), options=options)
    sources = []
    if facts.is_tpu:
        plugin = args.device_plugin or env.get("TPU_DEVICE_PLUGIN_ADDR", "")
        if plugin:
            sources.append(DevicePluginSource(plugin))
        ports = args.libtpu_ports or env.get("TPU_RUNTIME_METRICS_PORTS", "") or "8431"
        try:
            sources.append(LibtpuSource(
                (int(p) for p in ports.split(",") if p.strip()),
                devices_per_chip=DEVICES_PER_CHIP.get(facts.accelerator_type, 1)))
        except ValueError:
            raise ValueError("TPU_RUNTIME_METRICS_PORTS/--libtpu_ports %r: expected "
                             "comma-separated ports" % ports) from None
    log_dir = args.log_dir or env.get("TPU_LOG_DIR", "") or "/tmp/tpu_logs"
    options = AgentOptions(metrics_interval=args.metrics_interval,
                           log_interval=args.log_interval,
                           health_interval=args.health_interval,
                           log_buffer_lines=args.log_buffer_lines,
                           backoff_cap=args.backoff_cap, root=args.root)
    agent = Agent(facts, client, metrics, options, sources,
                  LogTailer(log_dir) if facts.is_tpu else None, rng=rng)
    return agent, metadata


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        agent, metadata = build(args, os.environ, AgentMetrics(REGISTRY))
    except HostError as e:
        print("sliced-agent: cannot detect the host: %s" % e, file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print("sliced-agent: %s" % e, file=sys.stderr)
        return 2
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, addr=args.metrics_address)
        except OSError as e:
            print("sliced-agent: --metrics_port %d on %s: %s (0 turns it off)"
                  % (args.metrics_port, args.metrics_address, e), file=sys.stderr)
            return 2
    stop = threading.Event()
    runner = Runner(workers=len(agent.tasks()) + 1)
    for name, task in agent.tasks():
        runner.add(task, 0.0, name)

    def drain_on_signal():
        # Until the daemon takes it: a failed try returns the pause to the
        # next (it used to return False, which the Runner ran again at once).
        runner.add(lambda: agent.drain_until_taken("SIGUSR1"), 0.0, "drain")
    signals = Signals(deferred={signal.SIGUSR1: drain_on_signal})
    _log.info("%s: agent for %s on %s%s", agent.node_id, agent.facts.pod_type or "a CPU host",
              args.server, "; GCE metadata at " + metadata.host if metadata else
              "; not on GCE: no metadata server")
    runner.start()
    if metadata is not None:
        threading.Thread(target=agent.watch_maintenance, args=(metadata, stop.is_set),
                         name="maintenance", daemon=True).start()
    signals.wait()
    stop.set()
    _log.info("%s: stopping", agent.node_id)
    runner.stop(timeout=5.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
