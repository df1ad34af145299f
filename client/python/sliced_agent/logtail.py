"""Tails libtpu's log files and ships their lines to the daemon.

LogTailer reads every regular file in a directory ($TPU_LOG_DIR, default
/tmp/tpu_logs; symlinks such as glog's `<program>.INFO` are skipped, they
name a file already read). glog writes each line to its severity's file and
to every lower one's (`<base>.log.INFO.<date>-<time>.<pid>` holds the
WARNING file's lines too): of one process's files only the lowest severity
is read, so that a warning is shipped once. Files are followed by inode
with the file kept open, so a rotated (renamed or deleted) file is read to its end before it is
let go; within one poll, older files (by mtime) are read first. Beyond
max_open files, the least recently written are closed and reopened at their
offset when they grow (a directory of old rotated logs holds no fds). A file that
shrinks was truncated: it is read again from its start. A line without its
newline yet waits for it (or for its file to go away).

Severity comes from glog's prefix (`I1123 04:05:06.123456  1234 file.cc:12]`:
I, W, E, F); a line without one (a stack trace's) takes its file's last.

LogBuffer holds lines while the daemon is unreachable, up to a bound; beyond
it the oldest are dropped and counted, and the next batch sent starts with a
WARNING line saying how many were lost.

Not thread-safe: one tailer and one buffer per agent loop.
"""
import collections
import dataclasses
import datetime
import os
import re
import time
from typing import Deque, Dict, List, Optional

MAX_LINE_BYTES = 4096  # the daemon's limit per line
MAX_BATCH = 1000       # the daemon's limit per AppendLogs
SEVERITIES = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL"}
_GLOG = re.compile(r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})\s")
# glog's file names: <program>.<host>.<user>.log.<SEVERITY>.<yyyymmdd-hhmmss>.<pid>
_GLOG_FILE = re.compile(r"^(.*)\.log\.(INFO|WARNING|ERROR|FATAL)\.\d{8}-\d{6}\.(\d+)$")
_GLOG_RANK = {"INFO": 0, "WARNING": 1, "ERROR": 2, "FATAL": 3}


@dataclasses.dataclass
class Line:
    text: str
    severity: str        # INFO, WARNING, ERROR, FATAL, or "" (unknown)
    time: float          # seconds since the epoch
    file: str = ""


def parse_glog(text: str, now: Optional[float] = None):
    """(severity, epoch seconds) from a glog prefix, or None. glog writes no
    year and local time: the year is this one, or last year if that would
    put the line more than a day in the future."""
    m = _GLOG.match(text)
    if not m:
        return None
    now = time.time() if now is None else now
    month, day, hour, minute, second, micro = (int(g) for g in m.groups()[1:])
    year = datetime.datetime.fromtimestamp(now).year
    try:
        when = datetime.datetime(year, month, day, hour, minute, second, micro).timestamp()
        if when > now + 86400:
            when = datetime.datetime(year - 1, month, day, hour, minute, second,
                                     micro).timestamp()
    except ValueError:
        return None
    return SEVERITIES[m.group(1)], when


def clip(text: str, limit: int = MAX_LINE_BYTES) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


class _File:
    def __init__(self, path: str, handle, offset: int):
        self.path = path
        self.handle = handle
        self.offset = offset
        self.partial = b""
        self.severity = ""
        self.skip_first = offset > 0  # started mid-file: the first line is a fragment


_NOTHING = _File("", None, 0)  # a parked file that did not grow


class LogTailer:
    def __init__(self, directory: str, initial_bytes: int = 64 * 1024, max_open: int = 64):
        """initial_bytes: of a file already there at the first poll, only
        its last initial_bytes are read (files that appear later are read
        whole). max_open: beyond this many files, the least recently
        written are closed ("parked" with their offset) and reopened if they
        grow; a parked file deleted before it grows loses nothing it had
        when parked."""
        self.directory = directory
        self.initial_bytes = initial_bytes
        self.max_open = max(1, max_open)
        self._files: Dict[int, _File] = {}
        self._parked: Dict[int, _File] = {}  # handle closed
        self._first_poll = True

    def close(self) -> None:
        for f in self._files.values():
            f.handle.close()
        self._files.clear()

    def poll(self, now: Optional[float] = None) -> List[Line]:
        """New complete lines of every file, in file order."""
        now = time.time() if now is None else now
        present = self._scan()
        out: List[Line] = []
        for ino in [ino for ino in self._files if ino not in present]:
            f = self._files.pop(ino)  # rotated away: read to the end, flush, let go
            out.extend(self._read(f, now, final=True))
            f.handle.close()
        for ino in [ino for ino in self._parked if ino not in present]:
            out.extend(self._flush(self._parked.pop(ino), now))
        for ino, (path, _, size) in sorted(present.items(), key=lambda kv: (kv[1][1], kv[0])):
            f = self._files.get(ino) or self._unpark(ino, path, size) or self._open(path, ino)
            if f is None or f is _NOTHING:
                continue
            f.path = path
            out.extend(self._read(f, now, final=False))
        self._park_idle(present)
        self._first_poll = False
        return out

    def _unpark(self, ino: int, path: str, size: int) -> Optional[_File]:
        """A parked file again, if it grew (else _NOTHING: nothing to read)."""
        f = self._parked.get(ino)
        if f is None:
            return None
        if size <= f.offset:
            return _NOTHING
        try:
            handle = open(path, "rb")
        except OSError:
            return _NOTHING
        if os.fstat(handle.fileno()).st_ino != ino:  # replaced since the scan
            handle.close()
            return _NOTHING
        f.handle = handle
        del self._parked[ino]
        self._files[ino] = f
        return f

    def _park_idle(self, present) -> None:
        extra = len(self._files) - self.max_open
        if extra <= 0:
            return
        by_age = sorted(self._files, key=lambda ino: present.get(ino, ("", 0.0, 0))[1])
        for ino in by_age[:extra]:
            f = self._files.pop(ino)
            f.handle.close()
            self._parked[ino] = f

    def _flush(self, f: "_File", now: float) -> List[Line]:
        """The partial line of a file that went away while parked."""
        if not f.partial:
            return []
        text = f.partial.decode("utf-8", "replace")
        f.partial = b""
        parsed = parse_glog(text, now)
        return [Line(clip(text), parsed[0] if parsed else f.severity,
                     parsed[1] if parsed else now, f.path)]

    def _scan(self) -> Dict[int, tuple]:
        """inode -> (path, mtime, size) of the directory's regular files."""
        present = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return present
        for e in entries:
            try:
                if e.is_symlink() or not e.is_file():
                    continue
                st = e.stat()
            except OSError:
                continue
            present[st.st_ino] = (e.path, st.st_mtime, st.st_size)
        return _without_glog_copies(present)

    def _open(self, path: str, ino: int) -> Optional[_File]:
        try:
            handle = open(path, "rb")
        except OSError:
            return None
        st = os.fstat(handle.fileno())
        if st.st_ino != ino:  # replaced between the scan and the open: next poll
            handle.close()
            return None
        offset = max(0, st.st_size - self.initial_bytes) if self._first_poll else 0
        f = _File(path, handle, offset)
        self._files[ino] = f
        return f

    def _read(self, f: _File, now: float, final: bool) -> List[Line]:
        size = os.fstat(f.handle.fileno()).st_size
        if size < f.offset:  # truncated
            f.offset, f.partial, f.skip_first = 0, b"", False
        f.handle.seek(f.offset)
        data = f.handle.read()
        f.offset += len(data)
        data = f.partial + data
        *complete, f.partial = data.split(b"\n")
        if final and f.partial:
            complete.append(f.partial)
            f.partial = b""
        if f.skip_first and complete:
            complete = complete[1:]
            f.skip_first = False
        lines = []
        for raw in complete:
            text = raw.decode("utf-8", "replace").rstrip("\r")
            if not text:
                continue
            parsed = parse_glog(text, now)
            if parsed:
                f.severity = parsed[0]
            lines.append(Line(clip(text), f.severity, parsed[1] if parsed else now, f.path))
        return lines


# The `file` of the buffer's own drop notice (a file name no tailed line has).
_DROP_NOTICE = "<sliced-agent: dropped lines>"


class LogBuffer:
    """Lines waiting to be shipped, at most `capacity` (oldest dropped)."""

    def __init__(self, capacity: int = 10000):
        self.capacity = max(1, capacity)
        self._lines: Deque[Line] = collections.deque()
        self.dropped_total = 0
        self._dropped_unreported = 0

    def __len__(self) -> int:
        return len(self._lines)

    def pending(self) -> bool:
        """True while a batch() would send something: lines, or a drop notice."""
        return bool(self._lines) or self._dropped_unreported > 0

    def extend(self, lines: List[Line]) -> int:
        """Adds lines; returns how many old ones were dropped to fit."""
        self._lines.extend(lines)
        dropped = 0
        while len(self._lines) > self.capacity:
            self._lines.popleft()
            dropped += 1
        self.dropped_total += dropped
        self._dropped_unreported += dropped
        return dropped

    def batch(self, now: Optional[float] = None) -> List[Line]:
        """The next lines to send (not removed until commit()); a WARNING
        about dropped lines first, if any were."""
        out = list(self._head(MAX_BATCH))
        if self._dropped_unreported:
            # Dated just before the oldest line kept: where the gap is.
            when = (out[0].time - 1e-6) if out else (time.time() if now is None else now)
            notice = Line("sliced-agent: dropped %d log lines (buffer of %d full while the "
                          "daemon was unreachable)" % (self._dropped_unreported, self.capacity),
                          "WARNING", when, _DROP_NOTICE)
            out = [notice] + out[:MAX_BATCH - 1]
        return out

    def commit(self, batch: List[Line]) -> None:
        """Removes a batch returned by batch() that was sent."""
        n = len(batch)
        if batch and batch[0].file == _DROP_NOTICE:
            self._dropped_unreported = 0
            n -= 1
        for _ in range(min(n, len(self._lines))):
            self._lines.popleft()

    def _head(self, n: int):
        for i, line in enumerate(self._lines):
            if i >= n:
                return
            yield line


def _without_glog_copies(present: Dict[int, tuple]) -> Dict[int, tuple]:
    """`present` less the glog files of a severity above the lowest one of
    the same process (their lines are in that one too)."""
    glog = {}  # inode -> ((base, pid), rank) of the glog files
    for ino, (path, _, _) in present.items():
        m = _GLOG_FILE.match(os.path.basename(path))
        if m:
            glog[ino] = ((m.group(1), m.group(3)), _GLOG_RANK[m.group(2)])
    lowest = {}
    for key, rank in glog.values():
        lowest[key] = min(rank, lowest.get(key, rank))
    return {ino: entry for ino, entry in present.items()
            if ino not in glog or glog[ino][1] == lowest[glog[ino][0]]}
