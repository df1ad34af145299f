"""Runs periodic tasks on a few threads: one agent's loops, or a thousand
simulated agents' in one process.

A task is a callable returning the seconds until it should run again. A task
never runs twice at once; different tasks run in parallel on `workers`
threads. An exception is logged and the task retried after `retry_after`.

Thread-safe: add() and stop() may be called from any thread (and from a
signal handler's deferred work through add()).
"""
import heapq
import itertools
import logging
import threading
import time
from typing import Callable, List, Tuple

_log = logging.getLogger("sliced_agent")
Task = Callable[[], float]


class Runner:
    def __init__(self, workers: int = 4, retry_after: float = 5.0):
        self._heap: List[Tuple[float, int, str, Task]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._retry_after = retry_after
        self._threads = [threading.Thread(target=self._work, name="sliced-agent-%d" % i,
                                          daemon=True) for i in range(workers)]

    def add(self, task: Task, delay: float = 0.0, name: str = "") -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq),
                                        name or getattr(task, "__name__", "task"), task))
            self._cond.notify()

    def start(self) -> "Runner":
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stops taking tasks and waits (up to `timeout`) for running ones."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _next(self):
        with self._cond:
            while not self._stopped:
                if self._heap and self._heap[0][0] <= time.monotonic():
                    return heapq.heappop(self._heap)
                wait = self._heap[0][0] - time.monotonic() if self._heap else None
                self._cond.wait(wait)
            return None

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            _, _, name, task = item
            try:
                delay = task()
            except Exception:  # a bug in one loop must not stop the others
                _log.exception("%s failed; retrying in %.0fs", name, self._retry_after)
                delay = self._retry_after
            if delay is not None and delay >= 0:
                self.add(task, delay, name)
