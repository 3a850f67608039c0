"""Stop signals under `rlkeep demo`: Snakemake is let finish its own clean-up, the services stop, and
no traceback is shown.

Snakemake answers a stop by stopping its jobs, waiting for them and releasing its lock
(.snakemake/locks). Killed in the middle of that, it keeps the lock, and the same command then stops at
once with "Directory cannot be locked". `subprocess.run`, when interrupted, SIGKILLs its child 0.25 s
later; hence `run_to_its_end`: the child runs in its own process group (a terminal's Ctrl-C does not
reach it directly), is stopped once, and is waited for however long its clean-up takes (each step
bounds its own, rlkeep.runner.CLEANUP_SECONDS).

Whatever stop the demo gets, Snakemake gets SIGINT and its jobs SIGTERM. SIGINT, because a
KeyboardInterrupt anywhere in Snakemake releases its lock (a context manager), while its SIGTERM handler
exists only once jobs are scheduled: a SIGTERM before that kills it holding the lock. SIGTERM for the
jobs, because a step stops the same way for either, but a job still starting Python (before rlkeep
handles signals) dies of SIGTERM silently, where SIGINT prints a KeyboardInterrupt traceback.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_SECONDS = 0.5  # how often jobs Snakemake started after the stop are looked for


class Stopped(BaseException):
    """A stop signal arrived while the demo itself (not Snakemake) was working. A BaseException, as
    KeyboardInterrupt is, so no `except Exception` on the way (a retry loop, a readiness poll) takes it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Ended:
    returncode: int
    stopped_by: int | None  # the first stop signal that arrived while the child ran
    running: tuple[str, ...] = ()  # the rules whose jobs had started and not finished when the stop came


# Snakemake's lines that start and end a job ("rule x:" or "localrule x:", then "    jobid: 5";
# "Finished jobid: 5 (Rule: x)" or, older, "Finished job 5.")
JOB_RULE = re.compile(r"^(?:local)?rule (\w+):\s*$")
JOB_ID = re.compile(r"^\s+jobid: (\d+)\s*$")
JOB_FINISHED = re.compile(r"^Finished job(?:id)?:? (\d+)")


class RunningJobs:
    """Which rules have a started, unfinished job, from Snakemake's output read line by line."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self._rule: str | None = None

    def feed(self, line: str) -> None:
        if started := JOB_RULE.match(line):
            self._rule = started[1]
        elif (job := JOB_ID.match(line)) and self._rule:
            self.jobs[job[1]] = self._rule
            self._rule = None
        elif finished := JOB_FINISHED.match(line):
            self.jobs.pop(finished[1], None)

    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.jobs.values()))


def _copy_output(stream: Any, log: Any, stopper: "_Stopper", jobs: RunningJobs, at_stop: list[tuple[str, ...]]) -> None:
    """Every line to the log; to the terminal only until a stop came (what follows a stop is Snakemake
    unwinding its jobs: the log keeps it, the operator is told where it is)."""
    for raw in iter(stream.readline, b""):
        log.write(raw)
        log.flush()
        if stopper.received:
            if not at_stop:
                at_stop.append(jobs.rules())
            continue
        jobs.feed(raw.decode(errors="replace"))
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()


def _handled(handler: Any) -> dict[int, Any]:
    """Install `handler` for every stop signal not ignored on entry (nohup's SIGHUP stays ignored)."""
    return {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS
            if signal.getsignal(signum) is not signal.SIG_IGN}


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


_DEFERRING: list[int] = []  # one entry per open stops_deferred block
_PENDING: list[int] = []  # a stop that came while one was open


@contextmanager
def stops_raise() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Stopped, so `with` blocks (the services) unwind and stop."""
    previous: dict[int, Any] = {}

    def stop(signum: int, frame: Any) -> None:
        for other in previous:
            signal.signal(other, signal.SIG_IGN)  # one stop is enough: a second must not cut the unwinding short
        if _DEFERRING:
            _PENDING.append(signum)
            return
        raise Stopped(signum)

    previous.update(_handled(stop))
    try:
        yield
    finally:
        _restore(previous)


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Inside stops_raise: a stop that comes in this block is raised as it ends. Around starting a
    service: a stop raised while its process is being spawned would leave it running, unknown to the
    code that stops it.

    A Ctrl-C can also reach the service itself: until the spawned child calls setsid it is still in
    the terminal's process group, and Python's vfork path has already reset its handlers to the
    default. It dies of the SIGINT and its start fails (seen in CI: `weed mini` exited with -2); that
    failure is the stop's doing and is raised as the stop."""
    _DEFERRING.append(1)
    try:
        yield
    except Exception as failure:
        if len(_DEFERRING) == 1 and _PENDING:
            raise Stopped(_PENDING.pop()) from failure
        raise
    finally:
        _DEFERRING.pop()
    if not _DEFERRING and _PENDING:
        raise Stopped(_PENDING.pop())


def group_members(pgid: int) -> list[int] | None:
    """The processes of process group `pgid` but its leader (from /proc); None where there is no /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").is_file():
        return None
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name: state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue  # it ended meanwhile
        if int(fields[2]) == pgid and int(stat.parent.name) != pgid:
            members.append(int(stat.parent.name))
    return members


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # it ended meanwhile
        pass


class _Stopper:
    """Stops a child and its process group once (see the module docstring), and its later jobs too."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.received: list[int] = []
        self.stopped: set[int] = set()

    def on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if len(self.received) == 1:
            print(f"\nrlkeep demo: {signal.Signals(signum).name}: Snakemake stops its jobs and releases its lock; "
                  "waiting for it to finish", file=sys.stderr, flush=True)
        elif len(self.received) == 2:
            print("rlkeep demo: still waiting for Snakemake's clean-up (another signal is not passed on: it would "
                  "leave the lock behind)", file=sys.stderr, flush=True)
        self.stop()

    def stop(self) -> None:
        if self.child is None or not self.received:
            return
        if not self.stopped:
            self.stopped.add(self.child.pid)
            members = group_members(self.child.pid)
            if members is None:  # no /proc: as a terminal would, SIGINT to the whole group
                os.killpg(self.child.pid, signal.SIGINT)
                return
            _send(self.child.pid, signal.SIGINT)
        for pid in group_members(self.child.pid) or []:
            if pid not in self.stopped:
                self.stopped.add(pid)
                _send(pid, signal.SIGTERM)


def run_to_its_end(command: list[str], *, cwd: Path, env: dict[str, str] | None, log: Path | None = None) -> Ended:
    """Run `command` and wait until it exits; the first stop signal stops it as the module docstring
    says, and none after it is passed on (a second one would cut its clean-up short). With `log`, its
    output goes there whole and to the terminal until a stop comes."""
    stopper = _Stopper()
    jobs = RunningJobs()
    at_stop: list[tuple[str, ...]] = []
    previous = _handled(stopper.on_signal)
    copier = None
    log_file = open(log, "ab") if log is not None else None  # noqa: SIM115 - closed below, after the copier
    try:
        argv = [*command]  # an argument list, never a string a shell would read
        piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if log_file else {}
        stopper.child = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, **piped)
        if log_file is not None:
            copier = threading.Thread(target=_copy_output, args=(stopper.child.stdout, log_file, stopper, jobs, at_stop),
                                      daemon=True)
            copier.start()
        while True:
            stopper.stop()  # a signal that came before the child existed; jobs started since the stop
            try:
                returncode = stopper.child.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        _restore(previous)
        if copier is not None:
            copier.join(timeout=30)
        if log_file is not None:
            log_file.close()
    running = at_stop[0] if at_stop else jobs.rules()
    return Ended(returncode, stopper.received[0] if stopper.received else None, running)
