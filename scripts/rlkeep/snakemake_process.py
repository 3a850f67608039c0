"""The one place rlkeep changes how the Snakemake process behaves, and reads what Snakemake offers no
public accessor for.

`install()`, called once by rules/common.smk, switches on the patches below, only on a Snakemake
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
- `rescheduling_timers`: Snakemake's job rate limiter arms a non-daemon `threading.Timer` to re-run
  the scheduler after every scheduling round, and the interpreter waits for such a thread before it
  exits. `scheduler_finished()` (the onsuccess and onerror handlers: the scheduler has finished)
  cancels the ones it left, recognised by the qualname of the method that makes them.
"""
from __future__ import annotations

import atexit
import gc
import os
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
