"""Four costs of the Snakemake process that rlkeep takes off without changing what Snakemake decides.

Measured on the demo's no-op (`snakemake --profile local rl-demo/DONE` over a finished run, Snakemake
9.27, no SLURM plugin; tests/benchmarks/bench_invocation.py): 2.0-2.5 s and 175 MB, of which the
first and third below; the second and fourth are paid by every invocation that runs a job:

- 0.4 s and about 68 MB are pandas (with numpy and pyarrow): to compare a job's params with the
  ones it ran with, Snakemake's `PersistenceBase._serialize_param` picks a pandas-aware serializer
  whenever pandas is *installed*, and that serializer imports it. rlkeep's params are plain values
  and pandas is installed for the steps, so every invocation paid for an import it never used. A
  value can only be a pandas object if pandas was imported already, so asking `sys.modules` gives
  the same serialization for every value (an upstream fix to propose);
- the same import again for every invocation that runs a `script:` job (the sync command's Snakemake
  peaked at 174-180 MB against the no-op's 111 MB): `Snakemake._safely_store_params`, run in
  Snakemake's process to hand a job its params, imports pandas, numpy and polars to convert their
  objects. It runs unchanged, with the imports of those not loaded yet refused in its own thread
  (ModuleNotFoundError, which it takes for "not installed"): again, an object of a module that is
  not loaded cannot be among the params;
- 0.4 s after the last exit handler: the interpreter's final garbage collection walks every object
  of the heap Snakemake built, to free memory the operating system reclaims at exit anyway.
  `gc.freeze()` in an exit handler that runs after rlkeep's views are written leaves those objects
  out of it; files, logs and locks are closed by their own handlers (logging.shutdown, the
  TemporaryDirectory finalizers) as before, which run after it. Python never promised `__del__` at
  exit for objects still alive then;
- up to 1 s between the last job and the exit handlers of any invocation that ran a job: Snakemake's
  job rate limiter (on by default, --max-jobs-per-timespan 100/1s) arms a 1 s `threading.Timer` to
  re-run the scheduler after every scheduling round, and the interpreter joins such a non-daemon
  thread before it runs exit handlers. The scheduler has finished when the onsuccess and onerror
  handlers run, so `cancel_rescheduling_timers` there stops the timers it left (measured on the
  demo: 0.66 s of 1.8 s between its last job and its exit).

Each patch checks the shape it replaces and does nothing when a Snakemake release changed it
(tests/test_snakemake_process.py fails then, so the cost comes back visibly, never silently wrong).
"""
from __future__ import annotations

import atexit
import functools
import gc
import importlib.abc
import sys
import threading
from collections.abc import Callable
from typing import Any


def serializer_for_loaded_modules(persistence: Any) -> Callable[[Any], Any]:
    """Snakemake's pandas-aware serializer once pandas is loaded, its builtin one before."""
    if "pandas" in sys.modules:
        return persistence._serialize_param_pandas
    return persistence._serialize_param_builtin


def params_check_without_pandas_import() -> bool:
    """Replace Snakemake's choice of params serializer by `serializer_for_loaded_modules`.
    False (and nothing changed) when this Snakemake has no such choice to replace."""
    try:
        from snakemake.persistence import PersistenceBase
    except ImportError:
        return False
    chosen = PersistenceBase.__dict__.get("_serialize_param")
    if not isinstance(chosen, property) or not all(
        hasattr(PersistenceBase, name)
        for name in ("_serialize_param_pandas", "_serialize_param_builtin")
    ):
        return False
    PersistenceBase._serialize_param = property(serializer_for_loaded_modules)
    return True


CONVERTED_PARAM_MODULES = ("pandas", "numpy", "polars")  # what _safely_store_params imports to convert


class _RefusedInThisThread(importlib.abc.MetaPathFinder):
    """Refuses, in the thread that asked, the imports of the names in `refused.names`."""

    refused = threading.local()

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name in getattr(self.refused, "names", ()):
            raise ModuleNotFoundError(f"No module named {name!r} (not loaded: rlkeep.snakemake_process)", name=name)
        return None


_REFUSER = _RefusedInThisThread()


def with_loaded_modules_only(store: Callable[..., Any]) -> Callable[..., Any]:
    """`store` (Snakemake._safely_store_params) with the imports of CONVERTED_PARAM_MODULES that are
    not loaded yet refused while it runs, in its thread only."""
    @functools.wraps(store)
    def stored(self: Any, params: Any) -> Any:
        previous = getattr(_REFUSER.refused, "names", ())
        _REFUSER.refused.names = {name for name in CONVERTED_PARAM_MODULES if name not in sys.modules}
        try:
            return store(self, params)
        finally:
            _REFUSER.refused.names = previous

    stored.__rlkeep_patched__ = True  # type: ignore[attr-defined]
    return stored


def script_params_without_pandas_import() -> bool:
    """Wrap Snakemake's `Snakemake._safely_store_params` in `with_loaded_modules_only`. False (and
    nothing changed) when this Snakemake has no such method."""
    try:
        from snakemake.iocontainers import Snakemake
    except ImportError:
        return False
    store = Snakemake.__dict__.get("_safely_store_params")
    if not callable(store):
        return False
    if not getattr(store, "__rlkeep_patched__", False):
        Snakemake._safely_store_params = with_loaded_modules_only(store)
    if _REFUSER not in sys.meta_path:
        sys.meta_path.insert(0, _REFUSER)
    return True


def skip_final_collection() -> None:
    """Leave every object alive now out of the interpreter's last garbage collection."""
    gc.freeze()


def exit_without_final_collection() -> None:
    """Register `skip_final_collection` to run after the exit handlers registered later, before
    those registered earlier (exit handlers run last-registered first)."""
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
