"""The thin edge between a Snakemake rule and the package: the process that runs one step.

Every rule runs its own adapter, `scripts/steps/<rule>.py`, which hands the `snakemake` object to a
RuleProcess: the step's log becomes the process's output, the function the rule's row names
(rlkeep.pipeline, column `function`) is imported, a StepContext is built (rlkeep.context) and the
function runs. An RlkeepError ends the step with its message as the log's last line (`rlkeep: ...`)
and exit status 1; the outputs are left unwritten, so Snakemake records the step as failed and a
rerun resumes there. A TransientError is tried again first (run_step), a bounded number of times;
any other failure only once.
"""
from __future__ import annotations

import gc
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO

from rlkeep.context import StepContext, context_from_snakemake
from rlkeep.diskspace import is_no_space, no_space_message
from rlkeep.errors import RlkeepError, StepTerminated, TransientError
from rlkeep.jsonio import partial_files
from rlkeep.pipeline import step_function
from rlkeep.waits import seconds_from_env

log = logging.getLogger("rlkeep")


def configure_logging(stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "httpx", "httpx2", "httpcore", "huggingface_hub", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# After a stop request the step has this long to clean up; then SIGALRM's default action ends it.
CLEANUP_SECONDS = 30


def _stop_requested(signum: int, frame: Any) -> None:
    for other in TERMINATING_SIGNALS:
        signal.signal(other, signal.SIG_IGN)  # one stop is enough: a second must not cut the cleanup short
    signal.alarm(CLEANUP_SECONDS)
    raise StepTerminated(signum)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP raise StepTerminated in the main thread, so temp files and
    half-written targets are removed by the code that made them (finally / except BaseException)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # A signal ignored on entry stays ignored: `nohup` (SIGHUP) and background jobs of a shell (SIGINT) mean it.
    previous = {signum: signal.signal(signum, _stop_requested) for signum in TERMINATING_SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        # A step starts with SIGINT blocked (rlkeep.snakemake_process.step_prefix): one that came
        # while it started is delivered here, to the handler above.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, previous)
        yield
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is _stop_requested:  # one set to SIG_IGN since (a stop came) stays so
                signal.signal(signum, handler)


def _remove_outputs(ctx: StepContext) -> None:
    """A failed step leaves nothing that could pass for its output. Snakemake would remove the outputs
    of a failed job too, but only after the step's last message: on a full disk that message needs
    the space an output (a consolidated model) holds. A write stopped before its temporary file was
    named leaves that file too: it goes with the output."""
    for path in ctx.outputs.values():
        if path.name.startswith("."):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            path.unlink(missing_ok=True)
        for partial in partial_files(path):
            partial.unlink(missing_ok=True)


def _say(message: str, step: str) -> None:
    """The step's last line, in its log; where the log cannot take it (its disk is full), on the
    stderr Snakemake shows, with the step's name, so the reason is never lost."""
    try:
        print(message, file=sys.stderr, flush=True)
    except OSError:
        print(f"{message} [step {step}; its log could not take this line]", file=sys.__stderr__, flush=True)


# Which failures are retried, and where: a transient one (rlkeep.errors.TransientError: a network
# error, a 5xx) is tried again here, in the step's own process, so that a permanent one (a missing
# program, a bad record, a refusal, a schema error, a bug) fails once: Snakemake's `retries` cannot
# tell the two apart, so the profiles set it to 0.
STEP_RETRIES_ENV = "RLKEEP_STEP_RETRIES"  # further tries after a transient failure; default 2
RETRY_WAIT_ENV = "RLKEEP_STEP_RETRY_WAIT"  # seconds before the first further try (then 3x each time)


def step_retries() -> int:
    text = os.environ.get(STEP_RETRIES_ENV, "").strip() or "2"
    if not text.isdigit():
        raise RlkeepError(f"{STEP_RETRIES_ENV}={text!r}: expected a number of retries >= 0")
    return int(text)


StepFunction = Callable[["StepContext"], None]


def run_step(name: str, function: StepFunction, ctx: StepContext, *, process_ends: bool = False) -> int:
    """Run the step `name` (its rule) by calling `function`; the exit status of the step (0, 1, or
    128 + a stop signal). A transient failure is tried again, at most step_retries() times; any
    other fails at once.

    process_ends: the process exits right after (a Snakemake job): once the step's outputs are whole,
    stop signals are ignored, since dying of one now would leave Snakemake a failed job whose outputs
    exist, which its next run forces (--rerun-incomplete) and then plans nothing downstream of an
    ancient() input of it (Snakemake 9.27, dag.py update_needrun: such jobs are masked, then skipped).
    """
    tries = 1 + step_retries()
    pause = seconds_from_env(RETRY_WAIT_ENV, 5.0)
    for number in range(1, tries + 1):
        status, transient = _try_step(name, function, ctx, number, tries, process_ends)
        if transient is None:
            return status
        log.warning("step %s: %s; a transient failure: try %d of %d in %.0f s", name, transient, number + 1,
                    tries, pause)
        try:
            with stop_signals_raise():
                time.sleep(pause)
        except StepTerminated as stop:
            _say(f"rlkeep: {name} {stop} while waiting to try again; nothing partial kept: rerun the same "
                 "command to resume", name)
            return 128 + stop.signum
        pause *= 3
    raise AssertionError("unreachable: the last try returns its status")


def _try_step(name: str, function: StepFunction, ctx: StepContext, number: int, tries: int,
              process_ends: bool) -> tuple[int, TransientError | None]:
    """One try: (exit status, None), or (1, the error) for a transient failure that may be tried again."""
    target = f"{name} ({function.__module__}:{function.__name__})"
    started = time.monotonic()
    log.info("step %s for job %s%s", target, ctx.job, f" (try {number} of {tries})" if number > 1 else "")
    try:
        with stop_signals_raise():
            function(ctx)
            if process_ends:
                for signum in TERMINATING_SIGNALS:
                    signal.signal(signum, signal.SIG_IGN)
    except RlkeepError as error:
        _remove_outputs(ctx)
        log.error("step %s failed after %.1fs", target, time.monotonic() - started)
        told = _told(error, ctx)
        if isinstance(error, TransientError):
            if number < tries:
                return 1, error
            _say(f"rlkeep: {told} (a transient failure, {tries} tries; rerun later)", name)
            return 1, None
        _say(f"rlkeep: {told}", name)  # permanent: no retry can change it
        return 1, None
    except OSError as error:
        if not is_no_space(error):
            raise
        _remove_outputs(ctx)
        log.error("step %s failed after %.1fs: out of disk space", target, time.monotonic() - started)
        _say(f"rlkeep: {target}: {no_space_message(error, ctx.job_dir)}", name)
        return 1, None
    except StepTerminated as stop:
        _remove_outputs(ctx)
        log.error("step %s %s after %.1fs; temporary files removed", target, stop, time.monotonic() - started)
        _say(f"rlkeep: {target} {stop}; nothing partial kept: rerun the same command to resume", name)
        return 128 + stop.signum, None
    log.info("step %s done in %.1fs (%s)", target, time.monotonic() - started, _process_cost())
    return 0, None


def _told(error: RlkeepError, ctx: StepContext) -> str:
    """The failure's message; a store the record names that cannot be reached, in the record's words."""
    from rlkeep.storage.failures import WorldError

    if isinstance(error, WorldError):
        from rlkeep.world import in_record_words

        return in_record_words(error, ctx.record)
    return str(error)


def _process_cost() -> str:
    """What this process has cost so far, its start and imports included: where a step's time goes.
    The peak is VmHWM (ru_maxrss would carry the peak of the process that exec'd this one)."""
    times = os.times()
    cost = f"process CPU {times.user:.2f} s user, {times.system:.2f} s system"
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            peak = next((line.split()[1] for line in status if line.startswith("VmHWM:")), None)
    except OSError:
        peak = None
    return f"{cost}, peak {int(peak) / 1024:.0f} MB" if peak is not None else cost


class RuleProcess:
    """The process Snakemake starts for one job of a rule, as its adapter (scripts/steps/<rule>.py)
    drives it: the log opens at once, the adapter imports its step function `with
    process.importing()`, then `process.run(function)` runs it and exits with the step's status."""

    def __init__(self, smk: Any) -> None:
        self.smk = smk
        log_path = Path(smk.log[0])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.stream = open(log_path, "a", buffering=1, encoding="utf-8", errors="replace")
        sys.stdout = sys.stderr = self.stream
        configure_logging(self.stream)

    @contextmanager
    def importing(self) -> Iterator[None]:
        """Around the adapter's import of its function: a module may take seconds to import (torch for
        an export), and a stop signal meanwhile ends the step as a stop (its line in the log, status
        128 + n), never a traceback."""
        try:
            with stop_signals_raise():
                yield
        except StepTerminated as stop:
            self._stopped_before_it_began(stop)

    def run_rule_function(self) -> NoReturn:
        """Import the function the rule's row names (rlkeep.pipeline's `function` column), then run it."""
        with self.importing():
            function = step_function(self.smk.rule)
        self.run(function)

    def run(self, function: StepFunction) -> NoReturn:
        try:
            with stop_signals_raise():
                ctx = context_from_snakemake(self.smk)
        except RlkeepError as error:
            self._exit(f"rlkeep: {error}", 1)
        except StepTerminated as stop:
            self._stopped_before_it_began(stop)
        status = run_step(self.smk.rule, function, ctx, process_ends=True)
        _close_log(self.stream, self.smk.rule, status)
        # The outputs are whole and the log flushed: the interpreter's last collection would only walk
        # every object the step's libraries built (0.1-0.3 s with torch or pyarrow loaded) to free
        # memory the system takes back at exit (rlkeep.snakemake_process does the same for Snakemake).
        gc.freeze()
        sys.exit(status)

    def _stopped_before_it_began(self, stop: StepTerminated) -> NoReturn:
        self._exit(f"rlkeep: step {self.smk.rule} {stop} before it began; nothing was done: rerun the same command",
                   128 + stop.signum)

    def _exit(self, message: str, status: int) -> NoReturn:
        print(message, file=self.stream, flush=True)
        sys.exit(status)


def _close_log(stream: TextIO, step: str, status: int) -> None:
    """Flush the step's log. When its disk is full, the step's status stands (a step that finished
    wrote its outputs whole) and the standard streams go back to the ones Snakemake gave, so the
    interpreter's own flush at exit cannot turn the status into a failure with no reason."""
    try:
        stream.flush()
    except OSError:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        if status == 0:
            print(f"rlkeep: step {step} done; its log could not take its last lines (no space left on its disk)",
                  file=sys.stderr, flush=True)
