"""The sliced Python client: Ray Train's ScalingConfig in, placed workers out.

    from sliced_client import Client, ScalingConfig

    config = ScalingConfig(use_tpu=True, num_workers=4, topology="4x4",
                           accelerator_type="TPU-V6E", placement_strategy="SPREAD")
    with Client("127.0.0.1:50051") as client:
        with client.placement(config, job_id="job-1", timeout=60) as pg:
            for worker in pg.workers:
                print(worker.rank, worker.node_id, worker.env["TPU_WORKER_ID"])

placement() removes the group when the block ends, and submit_and_wait() when
its wait fails (timeout, INFEASIBLE, Ctrl-C), unless keep=True; a warning on
the "sliced_client" logger names the group either way.

Every error is a SlicedError carrying the gRPC code and the server's message.
Reads and creates are retried with exponential backoff on UNAVAILABLE; creates
always carry a request_id (generated when not given), so a retry gets the same
placement group back. Removes are retried too: NOT_FOUND after an attempt
whose reply was lost means that attempt removed the group. Against daemons on etcd
(docs/ha.md), a standby's UNAVAILABLE names the leader and every call follows
it there; give an address listing every daemon ("ipv4:h1:50051,h2:50051") so
that a dead leader's standby is found. While a failover is in progress a
standby knows no leader yet: every call then waits for the new one (polling
at most 0.5 s apart, jittered) within its timeout, spending none of its
attempts, unless max_attempts is 1. On an address listing several daemons
("ipv4:...,..." or "ipv6:...,...") the calls go to each connected one in turn
(round robin), so those polls ask every daemon, and one that can't reach etcd
does not hold the client.

A Client is safe to share between threads (gRPC channels and stubs are).
"""
import contextlib
import dataclasses
import logging
import random
import threading
import time
import uuid
from typing import Callable, Dict, Iterator, List, Optional, Union

import grpc

from sliced_client._stubs import sliced_pb2 as _pb
from sliced_client._stubs import sliced_pb2_grpc as _pb_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"
_log = logging.getLogger("sliced_client")
_SETTLED = ("CREATED", "INFEASIBLE", "REMOVED")
# wait_ready reads the group again at least this often (seconds), and after
# a watch that ended with one of these codes.
_WAIT_RECHECK = 30.0
_WAIT_AGAIN = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
               grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED)
# A create that failed with one of these may still have been applied (the
# same codes as slicectl's): the error names its request id.
_OUTCOME_UNKNOWN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN,
                    grpc.StatusCode.INTERNAL)
# The trailing metadata of a daemon's refusal (a standby's, or a leader's
# stepping down) that names the leader, or "" for none known: the daemon did
# nothing with the call.
_LEADER_KEY = "sliced-leader"
# Seconds before the second attempt, doubling per attempt up to the max.
_INITIAL_BACKOFF, _MAX_BACKOFF = 0.1, 2.0
# Redirects followed in a row; the longest wait on a standby that knows no
# leader yet (seconds), as the C++ client's kMaxRedirects and kFailoverPoll.
_MAX_REDIRECTS, _FAILOVER_POLL = 3, 0.5
# A failover's wait ends this much (s), plus the slowest of the call's
# failover refusals so far, before the call's deadline, or is not begun: the
# attempt after it has room to be answered (a standby's refusal says nothing
# was done and why; an attempt the deadline cuts short says neither). As the
# C++ client.
_FAILOVER_ATTEMPT_ROOM = 0.05
# The channel reconnects on the same schedule: gRPC's own backoff starts at
# 1 s and grows to 120 s, and until it passes every call fails at once, so a
# daemon back (or a failover's port reopened) 0.1 s after a refused
# connection would stay unreachable to every attempt. Options given win.
_RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", int(_INITIAL_BACKOFF * 1000)),
                      ("grpc.max_reconnect_backoff_ms", int(_MAX_BACKOFF * 1000)))
# On an address listing several daemons ("ipv4:h1:p,h2:p"), each call goes to
# the next connected one, not always to the first that answered (gRPC's
# pick_first): a failover's waits then ask every daemon, and a daemon cut off
# from etcd, which knows no leader while that lasts, does not hold the client
# while another leads (docs/ha.md). One daemon keeps pick_first, which waits
# for a port closed for a moment where round_robin fails the call at once.
_LISTED_OPTIONS = (("grpc.lb_policy_name", "round_robin"),)


def _lists_several(address: str) -> bool:
    """Whether `address` is a gRPC target listing several addresses."""
    return address.startswith(("ipv4:", "ipv6:")) and "," in address


class SlicedError(Exception):
    """Any failure: `.code` is a grpc.StatusCode, `.message` the server's text."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message


@dataclasses.dataclass
class ScalingConfig:
    """Ray Train's ScalingConfig (the fields JaxTrainer uses), same names and
    defaults. For TPUs a worker takes resources_per_worker["TPU"] (default: a
    whole host's chips), so a host runs chips / TPU-per-worker workers, and
    num_workers must fill whole slices (4x4 v6e with {"TPU": 1}: 16).
    tpu_resource_per_chip: TPU devices per chip (None = 1; 2 on v7x only).
    allow_subslice (sliced's): True lets each slice be carved out of a larger
    intact slice of the generation, False never; None (default) only when the
    cluster has no slice of the exact shape."""

    num_workers: int = 1
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    placement_strategy: str = "PACK"
    accelerator_type: Optional[str] = None
    use_tpu: bool = False
    topology: Optional[str] = None
    label_selector: Optional[Dict[str, str]] = None
    tpu_resource_per_chip: Optional[int] = None
    allow_subslice: Optional[bool] = None

    def to_proto(self) -> "_pb.ScalingConfig":
        extra = {} if self.allow_subslice is None else {"allow_subslice": self.allow_subslice}
        return _pb.ScalingConfig(**extra,
            num_workers=self.num_workers, use_gpu=self.use_gpu, use_tpu=self.use_tpu,
            topology=self.topology or "", accelerator_type=self.accelerator_type or "",
            placement_strategy=self.placement_strategy or "",
            resources_per_worker=dict(self.resources_per_worker or {}),
            label_selector=dict(self.label_selector or {}),
            tpu_resource_per_chip=self.tpu_resource_per_chip or 0)


@dataclasses.dataclass(frozen=True)
class Worker:
    """One placed worker. rank = (slice_index * hosts_per_slice + tpu_worker_id)
    * workers_per_host + its local rank on the host."""

    rank: int
    node_id: str
    address: str
    slice_name: str
    env: Dict[str, str]
    slice_index: int = 0
    tpu_worker_id: int = 0


@dataclasses.dataclass(frozen=True)
class Bundle:
    resources: Dict[str, float]
    label_selector: Dict[str, str]
    node_id: str  # "" while pending


@dataclasses.dataclass(frozen=True)
class PlacementGroup:
    """state: PENDING, CREATED, RESCHEDULING, PREEMPTING, REMOVED or
    INFEASIBLE. Field names are the proto's (dataclasses.asdict gives what
    `slicectl --json` and grpcurl print); `id` is short for
    placement_group_id. A PREEMPTING group still runs: it was preempted by
    `preempted_by` and keeps its capacity until `preemption_deadline` (unix
    seconds), then is requeued or removed (`on_preemption`).
    `placement_note`: what a CREATED group's placement had to do that the
    scheduler's rules avoid (e.g. CPU-only bundles on whole free TPU
    capacity); empty when nothing."""

    placement_group_id: str
    state: str
    pending_reason: str
    workers: List[Worker]
    job_id: str = ""
    name: str = ""
    request_id: str = ""
    compute_class: str = ""
    slice_names: List[str] = dataclasses.field(default_factory=list)
    bundles: List[Bundle] = dataclasses.field(default_factory=list)
    priority: int = 0
    priority_class: str = ""
    preemption_policy: str = "PREEMPT_LOWER_PRIORITY"
    on_preemption: str = "REQUEUE"
    preempted_by: str = ""
    preemption_deadline: Optional[float] = None
    preempting: List[str] = dataclasses.field(default_factory=list)
    placement_note: str = ""

    @property
    def id(self) -> str:
        return self.placement_group_id

    @property
    def ready(self) -> bool:
        return self.state == "CREATED"

    @classmethod
    def from_proto(cls, pg) -> "PlacementGroup":
        return cls(
            placement_group_id=pg.placement_group_id,
            state=_pb.PlacementGroupState.Name(pg.state),
            pending_reason=pg.pending_reason,
            workers=[Worker(rank=w.rank, node_id=w.node_id, address=w.address,
                            slice_name=w.slice_name, env=dict(w.env),
                            slice_index=w.slice_index, tpu_worker_id=w.tpu_worker_id)
                     for w in pg.workers],
            job_id=pg.job_id, name=pg.name, request_id=pg.request_id,
            compute_class=pg.compute_class, slice_names=list(pg.slice_names),
            bundles=[Bundle(resources=dict(b.resources), label_selector=dict(b.label_selector),
                            node_id=b.node_id) for b in pg.bundles],
            priority=pg.priority, priority_class=pg.priority_class,
            preemption_policy=_pb.PreemptionPolicy.Name(
                pg.preemption_policy or _pb.PREEMPT_LOWER_PRIORITY),
            on_preemption=_pb.OnPreemption.Name(pg.on_preemption or _pb.REQUEUE),
            preempted_by=pg.preempted_by,
            preemption_deadline=(pg.preemption_deadline.ToNanoseconds() / 1e9
                                 if pg.HasField("preemption_deadline") else None),
            preempting=list(pg.preempting), placement_note=pg.placement_note)


@dataclasses.dataclass(frozen=True)
class Node:
    """state: ALIVE, DRAINING or DEAD. quarantine_reason: why the node's
    agent reported it unhealthy ("" when healthy); a quarantined node takes
    no placements whatever its state. drain_when_back: a DEAD node that
    comes back DRAINING (drained before or while it was dead)."""

    node_id: str
    address: str
    state: str
    labels: Dict[str, str]
    resources: Dict[str, float]
    available: Dict[str, float]
    placement_group_ids: List[str]
    quarantine_reason: str = ""
    drain_when_back: bool = False

    @classmethod
    def from_proto(cls, n) -> "Node":
        return cls(node_id=n.node_id, address=n.address,
                   state=_pb.NodeState.Name(n.state), labels=dict(n.labels),
                   resources=dict(n.resources), available=dict(n.available),
                   placement_group_ids=list(n.placement_group_ids),
                   quarantine_reason=n.quarantine_reason,
                   drain_when_back=n.drain_when_back)


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why a group is pending: outcome is PLACED, UNSCHEDULABLE or INFEASIBLE."""

    outcome: str
    summary: str
    details: List[str]
    bundles: List[Bundle]


PgRef = Union[PlacementGroup, str]


def _describe(e: BaseException) -> str:
    if isinstance(e, KeyboardInterrupt):
        return "Ctrl-C"
    return "%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__


_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_NODE_LEVEL = "ray.io/node-id"
_PER_DOMAIN = "bundles_per_domain"


def _topology_levels(levels: List[Dict[str, Union[str, int]]]) -> list:
    """Ray's topology_strategy (a list of {label: strategy} dicts, outer first)
    as TopologyLevel messages: each dict's labels in order, then the node
    level last."""
    out, node = [], []
    for i, level in enumerate(levels):
        if not isinstance(level, dict):
            raise ValueError("topology_strategy[%d] must be a dict of label -> strategy, "
                             "got %r" % (i, level))
        per_domain = level.get(_PER_DOMAIN, 0)
        if not any(label != _PER_DOMAIN for label in level):
            raise ValueError("topology_strategy[%d] names no label: want {label: strategy}, "
                             "got %r" % (i, level))
        for label, strategy in level.items():
            if label == _PER_DOMAIN:
                continue
            if strategy not in _STRATEGIES:
                raise ValueError("topology_strategy[%d][%r] must be PACK, SPREAD, STRICT_PACK "
                                 "or STRICT_SPREAD, got %r" % (i, label, strategy))
            message = _pb.TopologyLevel(
                label=label, strategy=_pb.PlacementStrategy.Value(strategy),
                bundles_per_domain=0 if label == _NODE_LEVEL else int(per_domain))
            (node if label == _NODE_LEVEL else out).append(message)
    return out + node


_PREEMPTION_POLICIES = ("PREEMPT_LOWER_PRIORITY", "NEVER")
_ON_PREEMPTION = ("REQUEUE", "REMOVE")


def _preemption_fields(preemption_policy: str, on_preemption: str) -> dict:
    """The request fields for preemption_policy / on_preemption ("" for the
    defaults, PREEMPT_LOWER_PRIORITY and REQUEUE)."""
    for name, value, allowed in (("preemption_policy", preemption_policy, _PREEMPTION_POLICIES),
                                 ("on_preemption", on_preemption, _ON_PREEMPTION)):
        if value and value not in allowed:
            raise ValueError("%s must be one of %s, got %r"
                             % (name, ", ".join(allowed), value))
    return {"preemption_policy": _pb.PreemptionPolicy.Value(preemption_policy)
            if preemption_policy else 0,
            "on_preemption": _pb.OnPreemption.Value(on_preemption) if on_preemption else 0}


def _pg_id(pg: PgRef) -> str:
    return pg.id if isinstance(pg, PlacementGroup) else pg


def _client_closed() -> SlicedError:
    return SlicedError(grpc.StatusCode.CANCELLED, "the client is closed")


def _invoke(client: "Client", method, request, **kwargs):
    """method(request, **kwargs), but SlicedError(CANCELLED) on a closed
    client, where gRPC raises ValueError (the channel is closed)."""
    if client._closed:
        raise _client_closed()
    try:
        return method(request, **kwargs)
    except ValueError:
        if client._closed:
            raise _client_closed() from None
        raise


class PreemptionListener:
    """A thread that calls a callback for every preemption notice
    (Client.on_preempted). stop() ends it; `error` holds the SlicedError
    that ended it early, if any."""

    def __init__(self, client: "Client", callback, job_id: str, placement_group_id: str):
        self.error: Optional[SlicedError] = None
        self._lock = threading.Lock()
        self._wake = threading.Event()  # set by stop()
        self._stream = None
        self._stopped = False
        told = set()
        self._open = lambda: client._preemption_notices(
            job_id, placement_group_id, None, self._opened, told)
        self._callback = callback
        self._thread = threading.Thread(target=self._run, name="sliced-preemption",
                                        daemon=True)
        self._thread.start()

    def _opened(self, stream) -> None:
        with self._lock:
            self._stream = stream
            if self._stopped:
                stream.cancel()

    def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                for pg in self._open():
                    backoff = 0.5
                    try:
                        self._callback(pg)
                    except Exception:  # the listener outlives a bad callback
                        _log.exception("preemption callback failed for %s", pg.id)
                return
            except SlicedError as e:
                with self._lock:
                    if self._stopped:
                        return
                    if e.code != grpc.StatusCode.UNAVAILABLE:
                        self.error = e
                        return
                _log.warning("preemption notices: %s; watching again in %.1fs", e, backoff)
                if self._wake.wait(backoff):
                    return
                backoff = min(backoff * 2, 5.0)

    def stop(self, timeout: Optional[float] = 5.0) -> None:
        """Cancels the stream and waits for the thread."""
        with self._lock:
            self._stopped = True
            if self._stream is not None:
                self._stream.cancel()
        self._wake.set()
        self._thread.join(timeout)


class _Retries:
    """The attempts, backoff and redirects of one call (or of a watch's
    opening) under its deadline, as the C++ client's Retries."""

    def __init__(self, timeout: float, max_attempts: int, attempts: int):
        self.deadline = time.monotonic() + timeout
        self._max_attempts, self._left = max_attempts, attempts
        self._backoff, self._redirects = _INITIAL_BACKOFF, 0
        self._attempt_started, self._slowest_refusal = time.monotonic(), 0.0

    def starting(self) -> None:
        """An attempt starts now (a failover's refusal times it)."""
        self._attempt_started = time.monotonic()

    def may_follow(self) -> bool:
        """Whether a standby's redirect may be followed now: up to 3 in a row
        (a standby may still name the old leader for a moment, which then
        says it knows none: they count again after each wait)."""
        return self._redirects < _MAX_REDIRECTS

    def followed(self) -> None:
        """A redirect was followed: the next attempt goes at once."""
        self._redirects, self._backoff = self._redirects + 1, _INITIAL_BACKOFF

    def wait_for_next(self, failover: bool) -> bool:
        """After a failed attempt: sleeps before the next one and returns
        True, or returns False at once when no attempt is left or the
        deadline would pass meanwhile. `failover` (a standby that knows no
        leader yet, which did nothing): no attempt is spent, unless retries
        are off (max_attempts=1: the node agent, with its own backoff), and
        the wait is at most 0.5 s, random in its upper half (the clients that
        lost the leader together do not call in step), ending early enough
        for the next attempt to be answered (_FAILOVER_ATTEMPT_ROOM)."""
        failover = failover and self._max_attempts > 1
        if not failover:
            self._left -= 1
            if self._left <= 0:
                return False
        wait, room = self._backoff, 0.0
        if failover:
            wait = min(self._backoff, _FAILOVER_POLL) * random.uniform(0.5, 1.0)
            self._slowest_refusal = max(self._slowest_refusal,
                                        time.monotonic() - self._attempt_started)
            room = self._slowest_refusal + _FAILOVER_ATTEMPT_ROOM
        if time.monotonic() + wait + room >= self.deadline:
            return False
        time.sleep(wait)
        self._backoff, self._redirects = min(self._backoff * 2, _MAX_BACKOFF), 0
        return True


class Client:
    """A connection to sliced. Use as a context manager, or call close()."""

    def __init__(self, address: str = DEFAULT_ADDRESS, *, timeout: float = 10.0,
                 max_attempts: int = 4,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None,
                 options: Optional[List[tuple]] = None):
        """timeout: seconds per call, retries included. max_attempts: tries per
        retryable call (1: no retries, nor the wait for a new leader during a
        failover). credentials: grpc.ssl_channel_credentials(...) for TLS;
        None for plaintext. token: a bearer token sent on every call
        (`authorization: Bearer <token>`) when the daemon runs with tokens.
        options: gRPC channel arguments (by default the channel reconnects
        0.1 s after a refused connection, backing off to 2 s, as the
        attempts do, and spreads calls over the daemons an "ipv4:"/"ipv6:"
        address lists with round_robin)."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.address = address
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        given = {name for name, _ in options or ()}
        self._credentials = credentials
        self._options = list(options or []) + [
            o for o in _RECONNECT_OPTIONS if o[0] not in given]
        self._listed_options = [o for o in _LISTED_OPTIONS if o[0] not in given]
        self._home = address
        # One channel per address ever called (the daemons: a bounded set),
        # kept open for calls in flight on other threads until close().
        self._channels = {}
        self._channels_lock = threading.Lock()
        self._connecting_lock = threading.Lock()
        self._connecting = {}  # channel -> its channel_ready_future
        self._closed = False
        self._connect(address)

    def _connect(self, address: str):
        """Sends calls to `address` from now on, on its channel and stubs
        (made the first time: following a leader and back again reuses them,
        where a new channel per redirect grew without bound while a standby
        kept naming a leader this client could not reach). Returns them:
        (channel, inventory, placement, telemetry)."""
        with self._channels_lock:
            entry = self._channels.get(address)
            if entry is None:
                options = self._options + (self._listed_options if _lists_several(address)
                                           else [])
                channel = (
                    grpc.secure_channel(address, self._credentials, options=options)
                    if self._credentials else grpc.insecure_channel(address, options=options))
                entry = (channel, _pb_grpc.InventoryStub(channel),
                         _pb_grpc.PlacementStub(channel), _pb_grpc.TelemetryStub(channel))
                self._channels[address] = entry
        self.address = address
        self._channel, self._inventory, self._placement, self._telemetry = entry
        return entry

    def _refused(self, error: grpc.RpcError, method, may_follow: bool):
        """After an UNAVAILABLE `error`: (how, method). A standby (docs/ha.md)
        names the leader in the trailing metadata `sliced-leader`; when
        `may_follow` and it is another daemon, how is "followed" and `method`
        is bound to the leader's channel. An empty name, how "failover": a
        daemon not leading knows no leader yet and did nothing. No name (the
        daemon may be gone) or an empty one: calls go back to the address
        given (which may list every daemon)."""
        leader = dict(error.trailing_metadata() or ()).get(_LEADER_KEY)
        if leader:
            # Bound to another daemon's channel (this call's, or one another
            # thread's redirect moved the client from), it follows the leader.
            followed = self._rebind(method, leader) if may_follow else None
            if followed is not None and followed is not method:
                return "followed", followed
            return None, method
        # Back to the address given, also for a call still bound to a daemon
        # another thread's call already came back from.
        method = self._rebind(method, self._home) or method
        if leader is None:  # the daemon may be down, or back in a moment
            self._keep_connecting()
        return ("failover" if leader == "" else None), method

    def _retryable(self, error: grpc.RpcError, method, retries: "_Retries"):
        """After a failed attempt: (how, method) as _refused() gives them for
        UNAVAILABLE; (None, method) for CANCELLED that this client did not
        cause (`error.cancelled()`, True only for its own): a daemon dropped
        the call as it stopped (a standby turning leader, docs/ha.md), so it
        did nothing. Raises SlicedError for anything else, and once the
        client is closed."""
        if self._closed:
            raise _client_closed()
        if error.code() == grpc.StatusCode.UNAVAILABLE:
            return self._refused(error, method, retries.may_follow())
        if error.code() == grpc.StatusCode.CANCELLED and not error.cancelled():
            return None, method
        raise SlicedError(error.code(), error.details()) from None

    def _keep_connecting(self) -> None:
        """The channel calls go to connects in the background until it is
        connected (or the client closed). A gRPC channel whose connection
        failed connects again only while something in its process polls it,
        which a call failing at once does not: without this a daemon back
        after a moment (a port handed from standby to leader, a restart)
        would stay unreachable to this client until gRPC's backup poll, up
        to 5 s later, past all of a call's attempts."""
        channel = self._channel
        with self._connecting_lock:
            future = self._connecting.get(channel)
            if future is None or future.done():
                self._connecting[channel] = grpc.channel_ready_future(channel)

    def _rebind(self, method, address: str):
        """Connects to `address`; returns `method` (a stub method of this
        client, bound to any daemon's channel) on its channel; None for a
        method of no stub of this client."""
        with self._channels_lock:
            entries = list(self._channels.values())
        for entry in entries:
            for i, stub in enumerate(entry[1:], start=1):
                for name, bound in vars(stub).items():
                    if bound is method:
                        return getattr(self._connect(address)[i], name)
        return None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the channels. A call or watch under way, or made after,
        raises SlicedError(CANCELLED, "the client is closed"); a preemption
        listener ends with that error."""
        self._closed = True
        with self._connecting_lock:
            for future in self._connecting.values():
                future.cancel()
        for entry in self._channels.values():
            entry[0].close()

    # ------------------------------------------------------------ placement

    def submit(self, scaling_config: ScalingConfig, *, job_id: str = "",
               compute_class: str = "", request_id: Optional[str] = None,
               priority: int = 0, name: str = "",
               priority_class: str = "", preemption_policy: str = "",
               on_preemption: str = "") -> PlacementGroup:
        """Submits a ScalingConfig; returns the group (CREATED, PENDING or
        INFEASIBLE). An invalid config raises SlicedError(INVALID_ARGUMENT)
        with Ray's message. The same request_id returns the same group.
        priority_class names one of the daemon's classes (by default
        production, batch, best-effort) and sets the priority; a group that
        does not fit may preempt running groups of lower priority unless
        preemption_policy="NEVER"; on_preemption ("REQUEUE" or "REMOVE") says
        what becomes of this group when it is preempted itself."""
        request = _pb.SubmitScalingConfigRequest(
            scaling_config=scaling_config.to_proto(), job_id=job_id, name=name,
            request_id=request_id or "req-" + uuid.uuid4().hex,
            compute_class=compute_class, priority=priority,
            priority_class=priority_class,
            **_preemption_fields(preemption_policy, on_preemption))
        return PlacementGroup.from_proto(
            self._call(self._placement.SubmitScalingConfig, request, retry=True))

    def create_placement_group(
            self, bundles: List[Dict[str, float]], strategy: Optional[str] = None, *,
            topology_strategy: Optional[List[Dict[str, Union[str, int]]]] = None,
            bundle_label_selector: Optional[List[Dict[str, str]]] = None,
            job_id: str = "", name: str = "", compute_class: str = "",
            request_id: Optional[str] = None, priority: int = 0,
            priority_class: str = "", preemption_policy: str = "",
            on_preemption: str = "") -> PlacementGroup:
        """Ray's placement_group(): one resource dict per bundle, strategy
        PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD, and optionally one
        label selector per bundle. topology_strategy takes Ray's shape, a list
        of levels, outer first, each {label: strategy}, e.g.
        [{"ray.io/node-id": "STRICT_SPREAD", "ray.io/gpu-domain": "STRICT_PACK"}]
        (all bundles in one GPU domain, on distinct nodes); "ray.io/node-id" is
        the node level, and a level's "bundles_per_domain": k puts each
        consecutive group of k bundles in its own domain (sliced's extension,
        e.g. one TPU slice per group). As in Ray, strategy and
        topology_strategy are not given together. Returns the group (CREATED,
        PENDING or INFEASIBLE); the same request_id returns the same group."""
        if strategy is not None and strategy not in _STRATEGIES:
            raise ValueError("strategy must be one of %s, got %r"
                             % (", ".join(_STRATEGIES), strategy))
        if strategy is not None and topology_strategy is not None:
            raise ValueError(
                "`strategy` and `topology_strategy` cannot both be specified. Pass "
                "node-level packing via `topology_strategy['ray.io/node-id']`.")
        selectors = bundle_label_selector or [{}] * len(bundles)
        if len(selectors) != len(bundles):
            raise ValueError("bundle_label_selector needs one selector per bundle "
                             "(%d bundles, %d selectors)" % (len(bundles), len(selectors)))
        request = _pb.CreatePlacementGroupRequest(
            bundles=[_pb.Bundle(resources=dict(b), label_selector=dict(sel))
                     for b, sel in zip(bundles, selectors)],
            strategy=_pb.PlacementStrategy.Value(strategy) if strategy else 0,
            topology_strategy=_topology_levels(topology_strategy or []),
            job_id=job_id, name=name, compute_class=compute_class, priority=priority,
            priority_class=priority_class,
            request_id=request_id or "req-" + uuid.uuid4().hex,
            **_preemption_fields(preemption_policy, on_preemption))
        return PlacementGroup.from_proto(
            self._call(self._placement.CreatePlacementGroup, request, retry=True))

    def get(self, pg: PgRef) -> PlacementGroup:
        """The group's current state; SlicedError(NOT_FOUND) if there is none."""
        return PlacementGroup.from_proto(self._call(
            self._placement.GetPlacementGroup,
            _pb.GetPlacementGroupRequest(placement_group_id=_pg_id(pg)), retry=True))

    def placement_groups(self, job_id: str = "", state: str = "") -> List[PlacementGroup]:
        """Every group, or those of a job and/or in a state ("PENDING", ...),
        all pages."""
        request = _pb.ListPlacementGroupsRequest(
            job_id=job_id, state=_pb.PlacementGroupState.Value(state.upper()) if state else 0)
        return [PlacementGroup.from_proto(pg) for pg in self._all_pages(
            lambda: self._placement.ListPlacementGroups, request, "placement_groups")]

    def remove(self, pg: PgRef) -> None:
        """Removes the group and releases its capacity. Retried like the
        other calls: NOT_FOUND after an attempt that may have reached the
        daemon (its reply lost, or a daemon's CANCELLED) means that attempt
        removed it, and returns; NOT_FOUND otherwise raises."""
        self._call(self._placement.RemovePlacementGroup,
                   _pb.RemovePlacementGroupRequest(placement_group_id=_pg_id(pg)),
                   retry=True, remove=True)

    def wait_ready(self, pg: PgRef, timeout: Optional[float] = None) -> PlacementGroup:
        """Blocks until the group is CREATED (watching, not polling) and
        returns it. Raises SlicedError with DEADLINE_EXCEEDED when `timeout`
        seconds pass first (None: wait forever), FAILED_PRECONDITION if the
        group is INFEASIBLE, NOT_FOUND if it does not exist or was removed.
        A watch that breaks (the daemon stepped down or restarted, or the
        reader fell behind) is opened again after a fresh read of the group,
        and the group is read again at least every 30 s, so a removal the
        watch could not report (a removed group is not in a new watch's
        current state) still ends the wait."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        backoff = 0.1
        while True:
            current = self.get(pg)  # NOT_FOUND: gone
            if current.state in _SETTLED:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise SlicedError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                  "placement group %s is still %s after %.1fs%s" % (
                                      current.id, current.state, time.monotonic() - start,
                                      ": " + current.pending_reason
                                      if current.pending_reason else ""))
            window = _WAIT_RECHECK if remaining is None else min(remaining, _WAIT_RECHECK)
            events = self._watch("", current.id, window, None, reopen=False)
            try:
                for event in events:
                    current = event
                    if current.state in _SETTLED:
                        break
            except SlicedError as e:
                if e.code not in _WAIT_AGAIN:
                    raise
                if e.code != grpc.StatusCode.DEADLINE_EXCEEDED:
                    _log.warning("watching placement group %s: %s; reading it again",
                                 current.id, e)
                    left = None if deadline is None else deadline - time.monotonic()
                    time.sleep(backoff if left is None else max(0.0, min(backoff, left)))
                    backoff = min(backoff * 2, 2.0)
            finally:
                events.close()  # cancels the stream
            if current.state in _SETTLED:
                break
        if current.state == "INFEASIBLE":
            raise SlicedError(grpc.StatusCode.FAILED_PRECONDITION,
                              "placement group %s is INFEASIBLE: %s"
                              % (current.id, current.pending_reason))
        if current.state == "REMOVED":
            raise SlicedError(grpc.StatusCode.NOT_FOUND,
                              "placement group %s was removed" % current.id)
        return current

    def submit_and_wait(self, scaling_config: ScalingConfig, *,
                        timeout: Optional[float] = None, keep: bool = False,
                        **submit_args) -> PlacementGroup:
        """submit() then wait_ready(). If the wait fails (timeout, INFEASIBLE,
        an error, Ctrl-C), the group is removed before the exception goes on,
        unless `keep`; either way a warning on the "sliced_client" logger names
        the group and what became of it. When no answer says whether the
        group was created (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED after
        the retries; UNKNOWN, INTERNAL), the error names the request id: submitting again with
        it returns that group, not a second one."""
        request_id = submit_args.pop("request_id", None) or "req-" + uuid.uuid4().hex
        try:
            pg = self.submit(scaling_config, request_id=request_id, **submit_args)
        except SlicedError as e:
            if e.code not in _OUTCOME_UNKNOWN:
                raise
            raise SlicedError(e.code, "%s; the group may exist: submit again with "
                              "request_id=%r to get it, not a second one"
                              % (e.message, request_id)) from None
        try:
            return self.wait_ready(pg, timeout=timeout)
        except BaseException as e:
            self._release(pg.id, keep, "the wait ended with %s" % _describe(e))
            raise

    @contextlib.contextmanager
    def placement(self, scaling_config: ScalingConfig, *,
                  timeout: Optional[float] = None, keep: bool = False,
                  **submit_args) -> Iterator[PlacementGroup]:
        """Submits, waits until CREATED, yields the group, and removes it when
        the block ends (normally, by an exception or Ctrl-C) unless `keep`:

            with client.placement(config, job_id="job-1", timeout=300) as pg:
                run(pg.workers)

        A failed wait removes the group too (see submit_and_wait)."""
        pg = self.submit_and_wait(scaling_config, timeout=timeout, keep=keep,
                                  **submit_args)
        try:
            yield pg
        except BaseException as e:
            self._release(pg.id, keep, "the block raised %s" % _describe(e))
            raise
        if keep:
            _log.warning("leaving placement group %s (keep=True)", pg.id)
            return
        try:
            self.remove(pg)
        except SlicedError as e:
            # Removed meanwhile (on_preemption REMOVE, an operator): done.
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise
            _log.warning("placement group %s was already removed", pg.id)

    def _release(self, pg_id: str, keep: bool, why: str) -> None:
        """Removes `pg_id` after a failure (unless `keep`) and says so."""
        if keep:
            _log.warning("%s; leaving placement group %s (keep=True)", why, pg_id)
            return
        try:
            self.remove(pg_id)
        except SlicedError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                _log.warning("%s; could not remove placement group %s, it is left "
                             "behind: %s", why, pg_id, e)
                return
        _log.warning("%s; removed placement group %s", why, pg_id)

    def watch(self, job_id: str = "", placement_group_id: str = "",
              timeout: Optional[float] = None) -> Iterator[PlacementGroup]:
        """Yields the matching groups' current state, then every change, until
        the generator is closed (or `timeout` seconds pass: SlicedError with
        DEADLINE_EXCEEDED). Closing it cancels the stream. Opened on a standby,
        it is opened again on the leader the standby names; UNAVAILABLE before
        the first event (no leader yet, during a failover) is retried with
        backoff, as reads are. If the reader
        falls so far behind that the daemon ends the stream (ABORTED, "fell
        behind"), it is opened again: the current state follows, then every
        change (up to 3 times)."""
        return self._watch(job_id, placement_group_id, timeout, None)

    def _watch(self, job_id: str, placement_group_id: str, timeout: Optional[float],
               opened: Optional[Callable], reopen: bool = True) -> Iterator[PlacementGroup]:
        """watch(); `opened(stream)`, when given, is told of every stream
        opened (so that another thread can cancel it). `reopen`: open it
        again when it fell behind (else that ABORTED is raised). `timeout`
        bounds the whole watch, re-opened streams included."""
        request = _pb.WatchPlacementGroupsRequest(job_id=job_id,
                                                  placement_group_id=placement_group_id)
        method = self._placement.WatchPlacementGroups
        deadline = None if timeout is None else time.monotonic() + timeout
        reopened = 0
        # Opening is retried as reads are (_retryable): UNAVAILABLE, or a
        # daemon's CANCELLED, before the first event backs off and tries
        # again, within the client's timeout and attempts (a failover spends
        # no attempt).
        retries = _Retries(self._timeout, self._max_attempts, self._max_attempts)
        while True:
            delivered = False  # by this stream
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            retries.starting()
            stream = _invoke(self, method, request, timeout=left,
                             metadata=self._metadata)
            if opened is not None:
                opened(stream)
            try:
                for event in stream:
                    delivered = True
                    yield PlacementGroup.from_proto(event.placement_group)
                return
            except grpc.RpcError as e:
                if (reopen and e.code() == grpc.StatusCode.ABORTED
                        and "fell behind" in (e.details() or "") and reopened < 3):
                    reopened += 1
                    _log.warning("watch fell behind, opening it again: %s", e.details())
                    continue
                if delivered:
                    raise SlicedError(e.code(), e.details()) from None
                how, method = self._retryable(e, method, retries)
                if how == "followed":
                    retries.followed()
                    continue
                if not retries.wait_for_next(how == "failover"):
                    raise SlicedError(e.code(), e.details()) from None
            finally:
                stream.cancel()

    def preemption_notices(self, job_id: str = "", placement_group_id: str = "",
                           timeout: Optional[float] = None) -> Iterator[PlacementGroup]:
        """Yields a matching group each time it is preempted (goes PREEMPTING),
        once per preemption, including groups already PREEMPTING when it
        starts: the moment to checkpoint. The group keeps its capacity until
        its preemption_deadline; removing it sooner lets the preemptor start
        sooner. Built on watch(): same filters, timeout and errors."""
        return self._preemption_notices(job_id, placement_group_id, timeout, None, set())

    def _preemption_notices(self, job_id: str, placement_group_id: str,
                            timeout: Optional[float], opened: Optional[Callable],
                            told: set) -> Iterator[PlacementGroup]:
        """`told`: the notices given so far (kept across re-opened watches,
        whose current state repeats them)."""
        for pg in self._watch(job_id, placement_group_id, timeout, opened):
            if pg.state != "PREEMPTING":
                continue
            notice = (pg.id, pg.preempted_by, pg.preemption_deadline)
            if notice not in told:
                told.add(notice)
                yield pg

    def on_preempted(self, callback: Callable[[PlacementGroup], None], *,
                     job_id: str = "", placement_group_id: str = "") -> "PreemptionListener":
        """Calls `callback(group)` on a background thread for every preemption
        notice (see preemption_notices) until the returned listener is
        stopped. An exception in the callback is logged and the listener goes
        on. A daemon that steps down, restarts or can't be reached
        (UNAVAILABLE) is waited for: the watch is opened again, with backoff,
        and no notice is given twice; any other error ends the listener (see
        `.error`)."""
        return PreemptionListener(self, callback, job_id, placement_group_id)

    def explain(self, target: Union[PgRef, ScalingConfig], *, job_id: str = "",
                compute_class: str = "", priority: int = 0,
                priority_class: str = "", preemption_policy: str = "") -> Explanation:
        """Why a group is pending (or where it is placed). Given a
        ScalingConfig instead, a dry run: what would happen if it were
        submitted now (nothing is created); when it would wait behind groups
        of lower priority, a detail line names the ones it would preempt."""
        if isinstance(target, ScalingConfig):
            request = _pb.ExplainPlacementGroupRequest(
                dry_run_scaling_config=_pb.SubmitScalingConfigRequest(
                    scaling_config=target.to_proto(), job_id=job_id,
                    compute_class=compute_class, priority=priority,
                    priority_class=priority_class,
                    **_preemption_fields(preemption_policy, "")))
        else:
            request = _pb.ExplainPlacementGroupRequest(placement_group_id=_pg_id(target))
        r = self._call(self._placement.ExplainPlacementGroup, request, retry=True)
        return Explanation(outcome=r.outcome, summary=r.summary, details=list(r.details),
                           bundles=[Bundle(resources=dict(b.resources),
                                           label_selector=dict(b.label_selector),
                                           node_id=b.node_id) for b in r.bundles])

    # ------------------------------------------------------------ inventory

    def nodes(self, selector: Optional[Dict[str, str]] = None) -> List[Node]:
        """Every node matching a Ray label selector ("v", "!v", "in(a,b)",
        "!in(a,b)"; entries ANDed), all pages."""
        request = _pb.ListNodesRequest(label_selector=dict(selector or {}))
        return [Node.from_proto(n) for n in self._all_pages(
            lambda: self._inventory.ListNodes, request, "nodes")]

    def _all_pages(self, method, request, field: str) -> list:
        """The items of `field` over every page of a list call. `method()`
        gives the call for each page: the stubs change when the client
        follows a new leader."""
        out = []
        while True:
            response = self._call(method(), request, retry=True)
            out.extend(getattr(response, field))
            if not response.next_page_token:
                return out
            request.page_token = response.next_page_token

    def drain(self, node_id: str) -> Node:
        """DRAINING: the node keeps its placements and takes no new ones. A
        DEAD node stays DEAD and comes back DRAINING (drain_when_back)."""
        return Node.from_proto(self._call(
            self._inventory.DrainNode, _pb.DrainNodeRequest(node_id=node_id),
            retry=True).node)

    def undrain(self, node_id: str) -> Node:
        """Back ALIVE: the node takes new placements again (a no-op on an
        ALIVE node). A DEAD node stays DEAD and comes back ALIVE (clears
        drain_when_back)."""
        return Node.from_proto(self._call(
            self._inventory.UndrainNode, _pb.UndrainNodeRequest(node_id=node_id),
            retry=True).node)

    def node(self, node_id: str) -> Node:
        """One node; SlicedError(NOT_FOUND) if there is none."""
        return Node.from_proto(self._call(
            self._inventory.GetNode, _pb.GetNodeRequest(node_id=node_id), retry=True))

    # ------------------------------------------------------------ node agents
    # What sliced_agent calls, with sliced.v1 messages; sent once (the agent
    # has its own backoff).

    def register(self, nodes: List["_pb.Node"]) -> List[Node]:
        """Upserts nodes (RegisterNodes); returns them as stored."""
        response = self._call(self._inventory.RegisterNodes,
                              _pb.RegisterNodesRequest(nodes=nodes), retry=False)
        return [Node.from_proto(n) for n in response.nodes]

    def heartbeat(self, node_id: str, health: Optional[List[str]] = None,
                  state: str = "") -> float:
        """Renews the node's lease; returns the lease in seconds. health:
        None = no report, [] = healthy, else the problems (quarantine)."""
        beat = _pb.NodeHeartbeat(node_id=node_id,
                                 state=_pb.NodeState.Value(state) if state else 0)
        if health is not None:
            beat.health.problems.extend(health)
            beat.health.SetInParent()
        return self._call(self._inventory.Heartbeat,
                          _pb.HeartbeatRequest(heartbeats=[beat]), retry=False).lease_seconds

    def report_tpu_metrics(self, nodes: List["_pb.NodeTpuMetrics"]) -> None:
        self._call(self._telemetry.ReportTpuMetrics,
                   _pb.ReportTpuMetricsRequest(nodes=nodes), retry=False)

    def append_logs(self, node_id: str, lines: List["_pb.LogLine"]) -> None:
        self._call(self._telemetry.AppendLogs,
                   _pb.AppendLogsRequest(node_id=node_id, lines=lines), retry=False)

    # ------------------------------------------------------------ plumbing

    def _call(self, method, request, *, retry: bool, remove: bool = False):
        """One call under the client's deadline, with attempts as _Retries
        counts them (one unless `retry`). `remove`: NOT_FOUND after an
        attempt that may have reached the daemon (one that failed without a
        `sliced-leader`, the mark of a refusal that did nothing) is that
        attempt's success, and returns None."""
        retries = _Retries(self._timeout, self._max_attempts,
                           self._max_attempts if retry else 1)
        may_have_landed = False
        while True:
            retries.starting()
            try:
                return _invoke(self, method, request,
                               timeout=max(0.001, retries.deadline - time.monotonic()),
                               metadata=self._metadata)
            except grpc.RpcError as e:
                if remove and may_have_landed and e.code() == grpc.StatusCode.NOT_FOUND:
                    return None  # gone: the lost attempt removed it
                how, method = self._retryable(e, method, retries)
                may_have_landed = may_have_landed or (
                    _LEADER_KEY not in dict(e.trailing_metadata() or ()))
                if how == "followed":
                    # A standby did nothing: any call goes to the leader it names.
                    retries.followed()
                    continue
                # A failover in progress did nothing either: any call waits
                # for the new leader.
                if not retries.wait_for_next(how == "failover"):
                    raise SlicedError(e.code(), e.details()) from None
