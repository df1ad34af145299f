"""Helpers for end-to-end tests: run the real `sliced` binary on a free
loopback port with a temp data dir, and talk to it with real gRPC clients.

Environment: SLICED_BIN (the daemon) and SLICED_PY (the generated stubs dir)
are set by CTest; see tests/CMakeLists.txt.
"""
import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.environ.get("SLICED_PY", ""))

import grpc  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, json_format  # noqa: E402
from google.protobuf import message_factory  # noqa: E402
from sliced.v1 import sliced_pb2, sliced_pb2_grpc  # noqa: E402,F401
from sliced_ext import reflection_pb2, reflection_pb2_grpc  # noqa: E402

SLICED_BIN = os.environ.get("SLICED_BIN", "sliced")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Daemon:
    """One sliced process. start() waits for its start-up line."""

    def __init__(self, data_dir, *extra_args):
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = None
        self.banner = ""

    def start(self, timeout=20):
        self.proc = subprocess.Popen(
            [SLICED_BIN, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--data_dir=" + self.data_dir] + self.extra_args,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The daemon logs every state change on stderr: read it all the time,
        # or a busy test fills the pipe and the daemon blocks on a write.
        self.stderr_lines = queue.Queue()  # for wait_for_stderr
        self._stderr_all = []
        self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_reader.start()
        deadline = time.time() + timeout
        while time.time() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                self.banner = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        if "serving on" not in self.banner:
            err = self.stop_and_collect()
            raise RuntimeError("sliced did not start: %r %r" % (self.banner, err))
        self.port = int(self.banner.split("serving on ")[1].split(",")[0].rsplit(":", 1)[1])
        return self

    def _read_stderr(self):
        for line in self.proc.stderr:
            self._stderr_all.append(line)
            self.stderr_lines.put(line)

    def stop_and_collect(self, timeout=20):
        """Waits for exit (after a kill or a failed start); returns stderr."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.stderr_text()

    def stderr_text(self):
        """All the daemon wrote on stderr. REQUIRES: it has exited."""
        self._stderr_reader.join(timeout=20)
        return "".join(self._stderr_all)

    def wait_for_stderr(self, *patterns, timeout=20):
        """Reads stderr lines (from the last one read on) until each regex of
        `patterns` has matched one, in any order: the lines of one commit come
        in the order the daemon logs them (its groups' changes, then its
        nodes')."""
        deadline = time.monotonic() + timeout
        missing, seen = list(patterns), []
        while missing:
            try:
                line = self.stderr_lines.get(
                    timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no stderr line matching %r in %.0fs; saw %r"
                                     % (missing, timeout, seen)) from None
            seen.append(line)
            missing = [p for p in missing if not re.search(p, line)]

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=20)

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)
        return self.proc.returncode

    def channel(self):
        return grpc.insecure_channel("127.0.0.1:%d" % self.port)

    def wait_for_output(self, text, timeout=20):
        """Reads the daemon's stdout up to a line holding `text` (e.g. the
        line it prints after handling SIGHUP) and returns that line."""
        found = []

        def read():
            for line in self.proc.stdout:
                if text in line:
                    found.append(line)
                    return
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not found:
            raise AssertionError("sliced printed no line with %r in %.0fs" % (text, timeout))
        return found[0]

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=20)
        if self.proc:
            self._stderr_reader.join(timeout=20)
        for stream in (self.proc.stdout, self.proc.stderr) if self.proc else ():
            stream.close()


class TcpProxy:
    """A TCP proxy on loopback to `port`. cut() turns it into a network
    partition: nothing more goes through, and new connections are closed.
    lose_replies() drops what the server sends on the connections open at
    that moment (their calls reach it, their replies never come back) until
    close_connections() closes those connections; connections made since go
    through as usual."""

    def __init__(self, port):
        self.target, self.is_cut = port, threading.Event()
        self._lock = threading.Lock()
        self._open, self._losing = set(), set()  # (client side, server side)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.is_cut.is_set():
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self._lock:
                self._open.add((conn, upstream))
            threading.Thread(target=self._pump, args=(conn, upstream), daemon=True).start()

    def _pump(self, a, b):
        try:
            while not self.is_cut.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is b and (a, b) in self._losing:
                        continue
                    (b if sock is a else a).sendall(data)
        except (OSError, ValueError):
            pass  # closed by close_connections()
        finally:
            with self._lock:
                self._open.discard((a, b))
            if not self.is_cut.is_set():
                a.close()
                b.close()

    def cut(self):
        self.is_cut.set()

    def lose_replies(self):
        with self._lock:
            self._losing = set(self._open)

    def close_connections(self):
        with self._lock:
            losing = set(self._losing)
        for pair in losing:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        with self._lock:
            self._losing -= losing

    def close(self):
        self.listener.close()


def lost_its_port(stderr):
    """Whether a daemon's start failed (its `stderr`) because a port it was
    given is held by another process: free_port() picks a port free when
    chosen, and a test running beside may bind it before the daemon does."""
    return "cannot listen on" in stderr or "cannot serve metrics on" in stderr


def start_with_stubs(test, data=None, *args):
    """A daemon (leases off, on `data` or a fresh temp dir) that `test` stops
    at cleanup, and Inventory and Placement stubs on one channel to it."""
    d = Daemon(data or temp_data_dir(test), "--heartbeat_timeout=0", *args).start()
    test.addCleanup(d.close)
    ch = d.channel()
    test.addCleanup(ch.close)
    return d, sliced_pb2_grpc.InventoryStub(ch), sliced_pb2_grpc.PlacementStub(ch)


def list_all_groups(placement, timeout=10, **request):
    """Every placement group ListPlacementGroups returns, over all pages."""
    out, token = [], ""
    while True:
        page = placement.ListPlacementGroups(sliced_pb2.ListPlacementGroupsRequest(
            page_token=token, **request), timeout=timeout)
        out.extend(page.placement_groups)
        token = page.next_page_token
        if not token:
            return out


def wait_until(condition, timeout=20, what="the condition"):
    """Polls `condition()` until it returns a true value, which it returns;
    fails after `timeout` seconds. Only for states that no event announces
    (a lease or an age running out on the daemon's clock): every caller says
    why it can't wait for an event instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(0.05)


class Caller:
    """Calls `call()` every `interval` seconds on a thread of its own until
    stop(): counts the calls that returned (`ok`) and keeps what the others
    raised (`errors`)."""

    def __init__(self, call, interval=0.002):
        self.ok, self.errors = 0, []
        self._call, self._interval = call, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self._call()
                self.ok += 1
            except Exception as e:  # the test asserts on them
                self.errors.append(e)
            time.sleep(self._interval)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)


def first_event_then(events, on_event):
    """Reads the stream `events` on a thread, calling on_event(event) for each
    until it returns True; returns the thread once the first event (the
    current state, which a watch sends before any change) has arrived, so the
    caller knows the stream is subscribed."""
    subscribed = threading.Event()

    def read():
        try:
            for event in events:
                subscribed.set()
                if on_event(event):
                    return
        finally:
            subscribed.set()
    reader = threading.Thread(target=read)
    reader.start()
    if not subscribed.wait(20):
        raise AssertionError("the stream sent no first event in 20s")
    return reader


def temp_data_dir(test):
    d = tempfile.TemporaryDirectory(prefix="sliced-e2e-")
    test.addCleanup(d.cleanup)
    return os.path.join(d.name, "data")


# ----- A reflection client doing what grpcurl does: no proto files. -----

def _reflect(channel, request):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    assert len(responses) == 1
    return responses[0]


def list_services(channel):
    resp = _reflect(channel, reflection_pb2.ServerReflectionRequest(list_services=""))
    return sorted(s.name for s in resp.list_services_response.service)


def pool_for_symbol(channel, symbol):
    """A descriptor pool built only from what the server sends for `symbol`."""
    resp = _reflect(channel, reflection_pb2.ServerReflectionRequest(
        file_containing_symbol=symbol))
    if resp.HasField("error_response"):
        raise LookupError(resp.error_response.error_message)
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in resp.file_descriptor_response.file_descriptor_proto]
    pool = descriptor_pool.DescriptorPool()
    # Dependencies first (the server may send them in any order).
    added, pending = set(), list(files)
    while pending:
        progressed = False
        for f in list(pending):
            if all(dep in added or dep.startswith("google/protobuf/")
                   for dep in f.dependency):
                for dep in f.dependency:
                    if dep.startswith("google/protobuf/") and dep not in added:
                        from google.protobuf import timestamp_pb2  # noqa: F401
                        pool.AddSerializedFile(
                            descriptor_pool.Default().FindFileByName(dep).serialized_pb)
                        added.add(dep)
                pool.Add(f)
                added.add(f.name)
                pending.remove(f)
                progressed = True
        assert progressed, "unresolvable descriptors"
    return pool


def dynamic_call(channel, method, request_json):
    """Calls "pkg.Service/Method" with a JSON request, like `grpcurl -d`."""
    service_name, method_name = method.split("/")
    pool = pool_for_symbol(channel, service_name)
    method_desc = pool.FindServiceByName(service_name).FindMethodByName(method_name)
    factory = message_factory.MessageFactory(pool)
    req_cls = factory.GetPrototype(method_desc.input_type)
    resp_cls = factory.GetPrototype(method_desc.output_type)
    call = channel.unary_unary("/" + method, request_serializer=req_cls.SerializeToString,
                               response_deserializer=resp_cls.FromString)
    resp = call(json_format.Parse(request_json, req_cls()), timeout=10)
    return json_format.MessageToDict(resp, preserving_proto_field_name=False)
