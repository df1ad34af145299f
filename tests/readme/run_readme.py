#!/usr/bin/python3
"""Runs the README (and docs/clients.md) as a user would, and checks it.

Every ```sh block's `$ command` runs, in document order, against one fresh
daemon, with only the addresses substituted (127.0.0.1:50051 and
127.0.0.1:9464 become the test daemon's); ```python blocks run with the
.venv the README's install block made (else /usr/bin/python3 with
PYTHONPATH=client/python). Where the document shows output under a command, the real
output must contain it: whitespace is ignored and "..." stands for anything,
so the shown text is a sequence of fragments that must appear in order.

What is not run, and why:
  - ```sh blocks without `$ ` lines (the two set-up commands, which CI runs
    as its own command; log excerpts);
  - a block preceded by `<!-- readme-test: skip: WHY -->` (the WHY is printed).
A command whose comment says "Ctrl-C" runs for STREAM_SECONDS, then gets
SIGINT, as a user would stop it. `grpcurl` is tests/readme/grpcurl (Debian
has no grpcurl). Commands run in a scratch directory holding copies of
client/python and proto (pip builds there) and links to examples/ and to the
build directory as build/.

Usage (CTest sets the environment): run_readme.py README.md [docs/clients.md]
Environment: SLICED_BIN, SLICED_PY, SLICED_BUILD (the CMake build dir).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

from sliced_testlib import REPO, Daemon, sliced_pb2, sliced_pb2_grpc  # noqa: E402

STREAM_SECONDS = 3
COMMAND_TIMEOUT = 120
DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_METRICS = "127.0.0.1:9464"


class Block:
    def __init__(self, doc, line, lang, text, skip):
        self.doc, self.line, self.lang, self.text, self.skip = doc, line, lang, text, skip


def blocks_of(path):
    """Fenced blocks of a markdown file, with their language and skip mark."""
    lines = open(path).read().split("\n")
    out, i, skip = [], 0, None
    while i < len(lines):
        stripped = lines[i].strip()
        m = re.match(r"<!-- readme-test: skip: (.*) -->", stripped)
        if m:
            skip = m.group(1)
        elif stripped.startswith("```"):
            indent = len(lines[i]) - len(lines[i].lstrip())
            lang, body, start = stripped[3:].strip(), [], i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
                i += 1
            out.append(Block(os.path.relpath(path, REPO), start, lang, "\n".join(body), skip))
            skip = None
        elif stripped:
            skip = skip if stripped.startswith("<!--") else None
        i += 1
    return out


def commands_of(text):
    """(command, shown output) pairs of a shell block: a `$ ` line and its
    indented continuation lines, then the lines up to the next command or
    comment line."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        cmd = [lines[i][2:]]
        i += 1
        while i < len(lines) and lines[i].startswith("    ") and (
                cmd[-1].rstrip().endswith("\\") or open_quote(cmd)):
            cmd.append(lines[i])
            i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ ") and not lines[i].startswith("#"):
            shown.append(lines[i])
            i += 1
        out.append(("\n".join(cmd), "\n".join(shown).strip()))
    return out


def open_quote(cmd_lines):
    """True while a single-quoted string is still open (a -d '{...} spanning lines)."""
    text = "\n".join(cmd_lines)
    text = re.sub(r"#[^'\n]*$", "", text)
    return text.count("'") % 2 == 1


def contains_in_order(actual, shown):
    """Whitespace-insensitive: the fragments of `shown` between "..." appear
    in `actual` in order. Returns the first fragment missing, or None."""
    squash = lambda s: re.sub(r"\s+", "", s)  # noqa: E731
    hay, pos = squash(actual), 0
    for fragment in (squash(f) for f in shown.split("...")):
        if not fragment:
            continue
        found = hay.find(fragment, pos)
        if found < 0:
            return fragment
        pos = found + len(fragment)
    return None


class Runner:
    def __init__(self, daemon, scratch):
        self.daemon, self.scratch, self.failures = daemon, scratch, []
        self.address = "127.0.0.1:%d" % daemon.port
        self.metrics = "127.0.0.1:%d" % int(daemon.banner.split("metrics on port ")[1])
        self.env = dict(os.environ, PATH=HERE + os.pathsep + os.environ["PATH"],
                        SLICED_SERVER=self.address, NO_COLOR="1")
        # Shell variables the document sets (`$ S=build/client/slicectl`), as
        # a user's terminal keeps them: run before every later command.
        self.prelude = []

    def substitute(self, text):
        return text.replace(DEFAULT_ADDRESS, self.address).replace(DEFAULT_METRICS, self.metrics)

    def run_shell(self, block):
        for cmd, shown in commands_of(block.text):
            where = "%s:%d: $ %s" % (block.doc, block.line, cmd.split("\n")[0])
            print(where, flush=True)
            streaming = "Ctrl-C" in cmd
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S+", cmd.strip()):
                self.prelude.append(cmd.strip())
            script = "\n".join(self.prelude + [self.substitute(cmd)])
            proc = subprocess.Popen(["bash", "-c", script], cwd=self.scratch,
                                    env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            try:
                if streaming:
                    time.sleep(STREAM_SECONDS)
                    os.killpg(proc.pid, signal.SIGINT)
                out, _ = proc.communicate(timeout=COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                self.fail(where, "still running after %d s" % COMMAND_TIMEOUT, out)
                continue
            # A stream stopped by Ctrl-C ends with 130 (or 0 if it ended first).
            ok = (0, 130, -signal.SIGINT) if streaming else (0,)
            if proc.returncode not in ok:
                self.fail(where, "exit code %d" % proc.returncode, out)
            elif shown and contains_in_order(out, shown) is not None:
                self.fail(where, "output lacks %r" % contains_in_order(out, shown)[:120], out)

    def run_python(self, block):
        where = "%s:%d: python block" % (block.doc, block.line)
        print(where, flush=True)
        # The README's own interpreter: the .venv its install block made
        # (no PYTHONPATH); before that block, the checkout's client.
        venv = os.path.join(self.scratch, ".venv", "bin", "python")
        if os.path.exists(venv):
            python, env = venv, self.env
        else:
            python = "/usr/bin/python3"
            env = dict(self.env, PYTHONPATH=os.path.join(self.scratch, "client", "python"))
        try:
            proc = subprocess.run([python, "-c", self.substitute(block.text)],
                                  cwd=self.scratch, env=env, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            self.fail(where, "still running after %d s" % COMMAND_TIMEOUT,
                      "%s%s" % (e.stdout or "", e.stderr or ""))
            return
        if proc.returncode != 0:
            self.fail(where, "exit code %d" % proc.returncode, proc.stdout + proc.stderr)

    def fail(self, where, why, output):
        self.failures.append(where)
        print("FAIL %s: %s\n--- output ---\n%s\n--------------" % (where, why, output), flush=True)

    def run(self, block):
        if block.skip:
            print("%s:%d: skipped: %s" % (block.doc, block.line, block.skip))
        elif block.lang == "python":
            self.run_python(block)
        elif block.lang in ("sh", "console") and re.search(r"^\$ ", block.text, re.M):
            self.run_shell(block)


def make_scratch(build):
    scratch = tempfile.mkdtemp(prefix="sliced-readme-")
    for name in ("proto", os.path.join("client", "python")):
        shutil.copytree(os.path.join(REPO, name), os.path.join(scratch, name),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "_gen",
                                                      "__pycache__"))
    os.symlink(os.path.join(REPO, "examples"), os.path.join(scratch, "examples"))
    os.symlink(build, os.path.join(scratch, "build"))
    return scratch


def main():
    docs = sys.argv[1:] or ["README.md"]
    build = os.environ["SLICED_BUILD"]
    scratch = make_scratch(build)
    data = tempfile.mkdtemp(prefix="sliced-readme-data-")
    # As `scripts/run.sh --heartbeat_timeout=0`: the README's demo has no
    # agents, and its fleet must not turn DEAD while the blocks run.
    daemon = Daemon(os.path.join(data, "data"), "--heartbeat_timeout=0").start()
    try:
        runner = Runner(daemon, scratch)
        for doc in docs:
            for block in blocks_of(os.path.join(REPO, doc)):
                runner.run(block)
        # The documents give back what they take: no group is left.
        with daemon.channel() as ch:
            left = sliced_pb2_grpc.PlacementStub(ch).ListPlacementGroups(
                sliced_pb2.ListPlacementGroupsRequest(), timeout=10).placement_groups
        if left:
            runner.fail("end of the documents", "groups left behind: %s" % ", ".join(
                "%s (job %s)" % (g.placement_group_id, g.job_id) for g in left), "")
    finally:
        daemon.close()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
    if runner.failures:
        print("%d README command(s) failed:\n  %s" % (len(runner.failures),
                                                      "\n  ".join(runner.failures)))
        sys.exit(1)
    print("every README block ran as written")


if __name__ == "__main__":
    main()
