"""The one place rlkeep changes how the Snakemake process behaves, and reads what Snakemake offers no
public accessor for.

`install()`, called once by rules/invocation.smk, switches on the patches below, only on a Snakemake
version the suite proves them on (PROVEN_SNAKEMAKE_VERSIONS): on any other version it changes
nothing and says so in one line, so an upgrade never runs half-patched. RLKEEP_NO_PATCHES=1 switches
them all off (a comma-separated list of names switches off those only). Every patch is an
optimisation: the pipeline gives the same results without it, only slower.
Each one's upstream fix, with a reproduction, is in docs/upstream/; bench/results/
bench_patches.json has what each one gains on the install `make setup` builds (a patch that gained
too little to be worth owning was removed: docs/upstream/README.md says which).

- `final_collection`: the interpreter's last garbage collection walks every object of the heap
  Snakemake built, to free memory the operating system reclaims at exit anyway. `gc.freeze()` in an
  exit handler registered before rlkeep's own (so it runs after them) leaves those objects out;
  files, logs and locks are closed by their own handlers as before.
- Not a patch, and on every version: `quiet_after_stop()`. After Ctrl-C, Snakemake prints every
  stopped job's error (`Error in rule`, `RuleException`, `CalledProcessError`, `WorkflowError`),
  about 140 lines before what matters. From the first SIGINT on, the terminal's log handler (a
  filter, the public logging API) drops Snakemake's lines while its log file keeps them all, and
  the onerror handler prints `stopped_note()`: what was stopped, the log's path, the same command.
- Not a patch, and on every version: `hold_interrupt_in_steps()`. A terminal's Ctrl-C reaches every
  process of its group, a step just started too; one still in Snakemake's script preamble or an
  import would die there and print its KeyboardInterrupt traceback to the terminal. Through
  Snakemake's public `shell.prefix`, each step starts with SIGINT blocked (coreutils'
  `env --block-signal`), so a Ctrl-C waits, pending, until the step's own handler is in place
  (rlkeep.runner.stop_signals_raise unblocks it) and then stops the step as any other stop does.
- `rescheduling_timers`: Snakemake's job rate limiter arms a non-daemon `threading.Timer` to re-run
  the scheduler after every scheduling round, and the interpreter waits for such a thread before it
  exits. `scheduler_finished()` (the onsuccess and onerror handlers: the scheduler has finished)
  cancels the ones it left, recognised by the qualname of the method that makes them.
"""
from __future__ import annotations

import atexit
import gc
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# The Snakemake releases the suite runs the patches on: requirements.lock pins one of them
# (tests/test_snakemake_process.py checks), and a new pin needs the suite to pass before it is added.
PROVEN_SNAKEMAKE_VERSIONS = frozenset({"9.27.1"})
SWITCH = "RLKEEP_NO_PATCHES"
PATCHES = ("final_collection", "rescheduling_timers")

_installed: set[str] = set()


def switched_off(environ: Mapping[str, str]) -> frozenset[str]:
    """The patches RLKEEP_NO_PATCHES switches off: all for any value but a list of their names."""
    value = environ.get(SWITCH, "").strip()
    if value in ("", "0"):
        return frozenset()
    names = {name.strip() for name in value.split(",")}
    return frozenset(names) if names <= set(PATCHES) else frozenset(PATCHES)


def installed_snakemake_version() -> str | None:
    try:
        return version("snakemake")
    except PackageNotFoundError:
        return None


def install(environ: Mapping[str, str] = os.environ, snakemake_version: str | None = None) -> frozenset[str]:
    """Switch on the patches (once per process) unless the Snakemake version is not proven or
    RLKEEP_NO_PATCHES says otherwise; the names of those on."""
    snakemake_version = snakemake_version or installed_snakemake_version()
    wanted = [name for name in PATCHES if name not in switched_off(environ)]
    if not wanted or _installed:
        return frozenset(_installed)
    if snakemake_version not in PROVEN_SNAKEMAKE_VERSIONS:
        print(f"rlkeep: Snakemake {snakemake_version} is not among the versions rlkeep's process patches are "
              f"proven on ({', '.join(sorted(PROVEN_SNAKEMAKE_VERSIONS))}): running without them (slower, same results)",
              file=sys.stderr)
        return frozenset()
    for name in wanted:
        _PATCH_INSTALLERS[name]()
        _installed.add(name)
    return frozenset(_installed)


def skip_final_collection() -> None:
    """Leave every object alive now out of the interpreter's last garbage collection."""
    gc.freeze()


def _skip_final_collection_at_exit() -> None:
    # exit handlers run last-registered first: this one runs after those the Snakefile registers later
    atexit.register(skip_final_collection)


RESCHEDULING = "JobScheduler._schedule_reevalutation."  # the qualname prefix of the timers' function (sic)


def cancel_rescheduling_timers() -> int:
    """Cancel the pending timers that would re-run Snakemake's finished scheduler; how many. Only
    timers whose function Snakemake's JobScheduler made: any other timer is left alone."""
    cancelled = 0
    for thread in threading.enumerate():
        function = getattr(thread, "function", None)
        if isinstance(thread, threading.Timer) and getattr(function, "__qualname__", "").startswith(RESCHEDULING):
            thread.cancel()
            cancelled += 1
    return cancelled


def scheduler_finished() -> int:
    """Called by the onsuccess and onerror handlers: the timers cancelled (none unless installed)."""
    return cancel_rescheduling_timers() if "rescheduling_timers" in _installed else 0


_PATCH_INSTALLERS: dict[str, Callable[[], None]] = {
    "final_collection": _skip_final_collection_at_exit,
    "rescheduling_timers": lambda: None,  # acts in scheduler_finished
}


# What rlkeep reads of the `workflow` object the Snakefile is given beyond its documented attributes
# (no public accessor exists; each is asked for upstream in docs/upstream/). A Snakemake that drops
# one gets the answer that costs only time, never a wrong result.

def dag_settings(workflow: Any) -> Any:
    """The invocation's DAG settings (--forcerun, --until, ...), or None when they cannot be read
    (rlkeep.settled.planning_is_forced then plans every job fully)."""
    return getattr(workflow, "dag_settings", None)


def is_main_process(workflow: Any) -> bool:
    """Whether this is Snakemake's own process, not a job it runs elsewhere (a remote job parses the
    Snakefile again). Without the attribute: whether the command line names no `--mode`, which
    Snakemake passes to every job it starts that way."""
    main = getattr(workflow, "is_main_process", None)
    return bool(main) if main is not None else "--mode" not in sys.argv


# --------------------------------------------------------------------------- a quiet Ctrl-C

SNAKEMAKE_LOGGER = "snakemake.logging"
_stopped_by: list[int] = []  # the first SIGINT of this process, once it came
_running: dict[Any, str] = {}  # Snakemake's started, unfinished jobs: jobid -> rule name


class _RunningJobs:
    """A logging filter on Snakemake's logger that lets every record through and notes which jobs
    started (a JOB_INFO record names its rule) and finished (JOB_FINISHED)."""

    def filter(self, record: Any) -> bool:
        event = getattr(getattr(record, "event", None), "name", None)
        if event == "JOB_INFO" and not _stopped_by:
            _running[getattr(record, "jobid", None)] = str(getattr(record, "rule_name", "?"))
        elif event == "JOB_FINISHED":
            _running.pop(getattr(record, "job_id", None), None)
        return True


class _QuietAfterStop:
    """A logging filter: lets a record through to the terminal until a stop came. (logging is
    imported only when a stop comes: importing it here would add an exit handler to every process.)"""

    def filter(self, record: Any) -> bool:
        return not _stopped_by


def _terminal_handlers() -> list[Any]:
    """Snakemake's handlers that write to the terminal (a log file's handler is a StreamHandler too)."""
    import logging

    return [handler for handler in logging.getLogger(SNAKEMAKE_LOGGER).handlers
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)]


def quiet_after_stop() -> bool:
    """From the first SIGINT on, Snakemake's lines go to its log file only; whether it was set up
    (not where SIGINT is ignored, nor off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN or previous is None:
        return False

    def on_stop(signum: int, frame: Any) -> None:
        if not _stopped_by:
            _stopped_by.append(signum)
            for handler in _terminal_handlers():
                handler.addFilter(_QuietAfterStop())
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    import logging

    logging.getLogger(SNAKEMAKE_LOGGER).addFilter(_RunningJobs())
    signal.signal(signal.SIGINT, on_stop)
    return True


# Snakemake's own prefix for bash (it gives it up once a prefix is set); `exec` so that the step is the
# process Snakemake started and waits on.
SNAKEMAKE_BASH_PREFIX = "set -euo pipefail; "
BLOCKED_INTERRUPT_PREFIX = "exec env --block-signal=INT "


def env_blocks_signals() -> bool:
    """Whether this host's `env` can start a command with a signal blocked (coreutils 8.31 or later)."""
    import subprocess

    try:
        return subprocess.run(["env", "--block-signal=INT", "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode == 0
    except OSError:
        return False


def step_prefix(env_can_block: Callable[[], bool] = env_blocks_signals) -> str | None:
    """The shell prefix every step's command gets: Snakemake's own, then SIGINT blocked until the
    step unblocks it; None where `env` cannot block a signal (coreutils before 8.31, BSD env)."""
    return SNAKEMAKE_BASH_PREFIX + BLOCKED_INTERRUPT_PREFIX if env_can_block() else None


def hold_interrupt_in_steps(shell: Any) -> bool:
    """Give Snakemake's `shell` (snakemake.shell.shell, the one the Snakefile sees) the step prefix;
    whether it could."""
    prefix = step_prefix()
    if prefix is None:
        return False
    shell.prefix(prefix)
    return True


def stopped_note(logfiles: Any, argv: list[str] | None = None) -> str | None:
    """What the terminal shows after a stop, or None when none came: what was stopped, where
    Snakemake's whole output is, and the command that goes on (this one, as it was typed)."""
    if not _stopped_by:
        return None
    argv = list(sys.argv if argv is None else argv)
    command = shlex.join(["snakemake", *argv[1:]])
    logs = ", ".join(str(path) for path in (logfiles or [])) or "none (Snakemake wrote no log file)"
    rules = list(dict.fromkeys(_running.values()))
    what = (f"the running {'step' if len(rules) == 1 else 'steps'} {', '.join(rules)}" if rules
            else "Snakemake between steps")
    return (f"rlkeep: stopped by {signal.Signals(_stopped_by[0]).name}: {what} stopped, Snakemake released its "
            "lock; every finished step is kept.\n"
            f"Snakemake's whole output: {logs}\n"
            f"To go on, run the same command:\n  {command}")
