"""One host's agent: registration, heartbeats, TPU metrics, logs, health and
drain, as tasks for a Runner (runner.py).

    beat            register if needed, then Heartbeat(node, health) every
                    lease/3; on failure back off with full jitter (capped at
                    a quarter of the lease) and register again once the daemon
                    answers (a restarted daemon, or NOT_FOUND)
    report_metrics  every --metrics_interval: the first source with chips
                    (device plugin, then libtpu) -> ReportTpuMetrics;
                    libtpu's error gauges are kept for the health check
    ship_logs       every --log_interval: new lines -> bounded buffer ->
                    AppendLogs batches
    check_health    every --health_interval: problems (health.py) -> the
                    next heartbeat's health
    drain           on SIGUSR1 or a maintenance/preemption notice
                    (watch_maintenance: a long poll per key, each on a thread
                    of its own): DrainNode

Each state change is logged once ("daemon unreachable", "healthy again", ...).
Thread-safety: each task runs on one Runner thread at a time; tasks share
only plain attributes (health, gauges) written whole.
"""
import dataclasses
import logging
import random
import threading
import time
from typing import Dict, List, Optional

import grpc
from google.protobuf import timestamp_pb2
from prometheus_client import CollectorRegistry, Counter, Gauge

from sliced_agent import health
from sliced_agent._stubs import sliced_pb2
from sliced_agent.backoff import Backoff, jittered
from sliced_agent.host import HostFacts
from sliced_agent.logtail import LogBuffer, LogTailer
from sliced_agent.metadata import Metadata, MetadataError
from sliced_agent.tpu_metrics import SourceError, to_proto
from sliced_client import Client, SlicedError

_log = logging.getLogger("sliced_agent")
DEFAULT_LEASE = 10.0
MAINTENANCE = "instance/maintenance-event"
PREEMPTED = "instance/preempted"
# How long a drain asked for by hand (SIGUSR1) waits before it is tried again
# when the daemon did not take it.
DRAIN_RETRY_S = 5.0
SEVERITY = {"": 0, "INFO": 1, "WARNING": 2, "ERROR": 3, "FATAL": 4}


@dataclasses.dataclass
class AgentOptions:
    """Defaults are the command line's (main.py)."""

    metrics_interval: float = 10.0
    log_interval: float = 1.0
    health_interval: float = 10.0
    log_buffer_lines: int = 10000
    backoff_base: float = 0.5
    backoff_cap: Optional[float] = None  # None: a quarter of the lease
    root: str = "/"


class AgentMetrics:
    """The agent's own Prometheus series (one set per process: a simulated
    fleet adds up its agents')."""

    def __init__(self, registry: CollectorRegistry):
        def counter(name, doc, labels=()):
            return Counter("sliced_agent_" + name, doc, labels, registry=registry)
        self.heartbeats = counter("heartbeats", "Heartbeats sent", ["result"])
        self.registrations = counter("registrations", "RegisterNodes calls", ["result"])
        self.metric_reports = counter("tpu_metric_reports", "ReportTpuMetrics calls",
                                      ["result"])
        self.log_lines = counter("log_lines_shipped", "libtpu log lines shipped")
        self.log_dropped = counter("log_lines_dropped",
                                   "libtpu log lines dropped (buffer full)")
        self.drains = counter("drains", "DrainNode calls", ["reason"])
        self.connected = Gauge("sliced_agent_connected", "1 when the last heartbeat was "
                               "answered", registry=registry)
        self.healthy = Gauge("sliced_agent_healthy", "1 when the host has no problems",
                             registry=registry)
        self.log_buffer = Gauge("sliced_agent_log_buffer_lines",
                                "log lines waiting for the daemon", registry=registry)


class Agent:
    def __init__(self, facts: HostFacts, client: Client, metrics: AgentMetrics,
                 options: Optional[AgentOptions] = None, sources=(),
                 tailer: Optional[LogTailer] = None, rng: Optional[random.Random] = None):
        self.facts = facts
        self.node_id = facts.node_id
        self.client = client
        self.metrics = metrics
        self.options = options or AgentOptions()
        self.sources = list(sources)
        self.tailer = tailer
        self.buffer = LogBuffer(self.options.log_buffer_lines)
        self._rng = rng or random.Random()
        self._backoff = Backoff(self.options.backoff_base,
                                self.options.backoff_cap or DEFAULT_LEASE / 4, self._rng)
        self.lease = DEFAULT_LEASE
        self.registered = False
        self.health: Optional[List[str]] = None  # None until the first check
        self.gauges: Dict[str, float] = {}
        self._states: Dict[str, str] = {}

    def tasks(self):
        """(name, task) pairs for a Runner."""
        out = [("beat", self.beat), ("check_health", self.check_health)]
        if self.sources:
            out.append(("report_metrics", self.report_metrics))
        if self.tailer is not None:
            out.append(("ship_logs", self.ship_logs))
        return out

    def _state(self, kind: str, value: str, message: str, level=logging.INFO) -> None:
        if self._states.get(kind) != value:
            self._states[kind] = value
            _log.log(level, "%s: %s", self.node_id, message)

    # ------------------------------------------------------------ heartbeat

    def _register_or_keep(self) -> None:
        """_register(); when the daemon refuses to take this host's facts
        (FAILED_PRECONDITION: e.g. fewer chips than the placement groups on
        it use), the node stays as registered and is still heartbeat (its
        groups keep their node), and the next beat registers again."""
        try:
            self._register()
        except SlicedError as e:
            if e.code != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            self._state("register", "refused", "the daemon keeps this node as registered "
                        "and refuses the new facts (heartbeating anyway): %s" % e,
                        logging.WARNING)
            return
        if self._states.get("register") == "refused":
            self._state("register", "ok", "the daemon took this host's facts again")

    def _register(self) -> None:
        node = sliced_pb2.Node(node_id=self.node_id, address=self.facts.address,
                               labels=self.facts.labels(), resources=self.facts.resources())
        try:
            self.client.register([node])
        except SlicedError as e:
            self.metrics.registrations.labels(e.code.name).inc()
            raise
        self.metrics.registrations.labels("OK").inc()
        self.registered = True
        _log.info("%s: registered (%s)", self.node_id, ", ".join(
            "%s=%s" % kv for kv in sorted(node.labels.items())) or "no labels")

    def beat(self) -> float:
        """One heartbeat; returns the seconds until the next."""
        try:
            if not self.registered:
                self._register_or_keep()
            lease = self.client.heartbeat(self.node_id, health=self.health)
        except SlicedError as e:
            self.metrics.heartbeats.labels(e.code.name).inc()
            self.metrics.connected.set(0)
            if e.code == grpc.StatusCode.NOT_FOUND and self.registered:
                self.registered = False
                self._state("daemon", "not-found", "the daemon does not know this node; "
                            "registering again", logging.WARNING)
                return 0.0
            self.registered = False  # whoever answers next may have lost us
            delay = self._backoff.next_delay()
            self._state("daemon", "unreachable", "heartbeat failed (%s); retrying with "
                        "backoff (next in %.1fs)" % (e, delay), logging.WARNING)
            return delay
        self.metrics.heartbeats.labels("OK").inc()
        self.metrics.connected.set(1)
        if self._backoff.failures:
            _log.info("%s: daemon answers again after %d failed heartbeats", self.node_id,
                      self._backoff.failures)
        self._backoff.reset()
        self.lease = lease if lease > 0 else DEFAULT_LEASE
        self._backoff.cap = self.options.backoff_cap or max(self._backoff.base, self.lease / 4)
        self._state("daemon", "ok", "heartbeating every %.1fs (lease %.1fs)"
                    % (self.lease / 3, self.lease))
        return jittered(self.lease / 3, self._rng, 0.05)

    # ------------------------------------------------------------ metrics

    def report_metrics(self) -> float:
        sample, gauges, errors = None, {}, []
        for source in self.sources:
            try:
                got = source.poll()
            except SourceError as e:
                errors.append(str(e))
                continue
            gauges.update(got.gauges)
            if sample is None and got.chips:
                sample = got
        self.gauges = gauges
        if sample is None:
            self._state("metrics", "none", "no TPU metrics source answers%s" % (
                ": " + "; ".join(errors) if errors else ""), logging.WARNING)
            return self.options.metrics_interval
        self._state("metrics", sample.source, "TPU metrics from %s (%d chips)"
                    % (sample.source, len(sample.chips)))
        try:
            self.client.report_tpu_metrics([to_proto(self.node_id, sample)])
            self.metrics.metric_reports.labels("OK").inc()
            self._state("report", "ok", "TPU metrics reported")
        except SlicedError as e:
            self.metrics.metric_reports.labels(e.code.name).inc()
            if e.code == grpc.StatusCode.INVALID_ARGUMENT:
                self._state("report", "rejected", "TPU metrics rejected: %s" % e,
                            logging.WARNING)
        return jittered(self.options.metrics_interval, self._rng)

    # ------------------------------------------------------------ logs

    def ship_logs(self) -> float:
        dropped = self.buffer.extend(self.tailer.poll())
        if dropped:
            self.metrics.log_dropped.inc(dropped)
            _log.warning("%s: dropped %d log lines (buffer of %d full)", self.node_id,
                         dropped, self.buffer.capacity)
        while self.buffer.pending():
            batch = self.buffer.batch()
            lines = [sliced_pb2.LogLine(time=_timestamp(line.time), text=line.text,
                                        severity=SEVERITY.get(line.severity, 0))
                     for line in batch]
            try:
                self.client.append_logs(self.node_id, lines)
            except SlicedError as e:
                self._state("logs", "failing", "log shipping paused (%s); %d lines buffered"
                            % (e.code.name, len(self.buffer)), logging.WARNING)
                break
            self.buffer.commit(batch)
            self.metrics.log_lines.inc(len(batch))
            self._state("logs", "ok", "shipping libtpu logs from %s" % self.tailer.directory)
        self.metrics.log_buffer.set(len(self.buffer))
        return self.options.log_interval

    # ------------------------------------------------------------ health

    def check_health(self) -> float:
        holders = health.device_holders(self.options.root)

        def placement_groups():
            return self.client.node(self.node_id).placement_group_ids
        try:
            problems = health.problems(self.gauges, holders, placement_groups)
        except SlicedError:
            return jittered(self.options.health_interval, self._rng)  # ask again later
        self.health = problems
        self.metrics.healthy.set(0 if problems else 1)
        if problems:
            self._state("health", "; ".join(problems), "unhealthy: " + "; ".join(problems),
                        logging.WARNING)
        else:
            self._state("health", "", "healthy")
        return jittered(self.options.health_interval, self._rng)

    # ------------------------------------------------------------ drain

    def drain(self, reason: str) -> bool:
        """DrainNode for this node; True when the daemon took it."""
        _log.warning("%s: draining: %s", self.node_id, reason)
        try:
            self.client.drain(self.node_id)
        except SlicedError as e:
            _log.error("%s: drain failed: %s", self.node_id, e)
            self.metrics.drains.labels("failed").inc()
            return False
        self.metrics.drains.labels(reason.split(" ")[0]).inc()
        _log.info("%s: node is DRAINING", self.node_id)
        return True

    def drain_until_taken(self, reason: str) -> Optional[float]:
        """A Runner task: drain(reason); None (done) once the daemon took it,
        else DRAIN_RETRY_S, the pause before the next try."""
        return None if self.drain(reason) else DRAIN_RETRY_S

    def watch_maintenance(self, metadata: Metadata, stopped) -> None:
        """Blocks until `stopped()`, draining the node on each GCE notice:
        instance/maintenance-event != NONE or instance/preempted == TRUE.
        Each key is long-polled on its own (the preemption one on a thread of
        its own): a hanging GET returns only on a change of its own key or
        after 60 s, and GCE gives a preempted VM 30 s. The first read of each
        does not wait (a notice may already be there); a drain the daemon did
        not take is tried again after a backoff, not at the next change.
        After a drain it watches on: a VM that lives through its maintenance
        (and is undrained) is drained again at its next notice."""
        threading.Thread(target=self._watch_notice, name="sliced-agent-preempted",
                         args=(metadata, PREEMPTED, lambda v: v.upper() == "TRUE", stopped),
                         daemon=True).start()
        self._watch_notice(metadata, MAINTENANCE, lambda v: v.upper() != "NONE", stopped)

    def _watch_notice(self, metadata: Metadata, path: str, is_notice, done) -> None:
        """watch_maintenance's long poll of one key, until done(); drains the
        node once per notice (a value is_notice() accepts, until the key
        changes)."""
        backoff = Backoff(1.0, 60.0, self._rng)
        wait = False
        etag = None  # of the value last seen: a change between polls ends the next at once
        drained_for = None  # the notice drained for, until the key changes
        while not done():
            try:
                raw, etag = metadata.watch(path, etag if wait else None)
            except MetadataError as e:
                self._state("metadata", "failing", str(e), logging.WARNING)
                time.sleep(backoff.next_delay())
                wait = False
                continue
            if raw is None:
                # Not served here (404, at once: a long poll would spin).
                self._state("metadata", "missing", "%s is not served (404); asking again "
                            "later" % path, logging.WARNING)
                time.sleep(backoff.next_delay())
                wait = False
                continue
            value = raw.strip()
            self._state("metadata", "ok", "watching GCE maintenance and preemption notices")
            wait = True
            if not value or not is_notice(value):
                backoff.reset()
                drained_for = None
                continue
            if value == drained_for:
                continue  # a long poll's timeout repeats it: drained already
            if self.drain("%s=%s (GCE metadata)" % (path.split("/")[-1], value)):
                backoff.reset()
                drained_for = value
                continue  # the next change: the notice's end, then the next one
            wait = False  # not taken: again after a pause, changed or not
            time.sleep(backoff.next_delay())


def _timestamp(seconds: float):
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts
