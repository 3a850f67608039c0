"""The thin edge between a Snakemake rule and the package.

Every rule runs its own adapter, `scripts/steps/<rule>.py`, which imports the rule's function
directly (one import away from the rule, for a reader and an editor) and hands it to a
RuleProcess: the step's log becomes the process's output, a StepContext is built (job, validated
record, named inputs and outputs, settings) and the function runs. An RlkeepError ends the step
with its message as the log's last line (`rlkeep: ...`) and exit status 1; the outputs are left
unwritten, so Snakemake records the step as failed and a rerun resumes there. A TransientError
is tried again first (run_step), a bounded number of times; any other failure only once.
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from rlkeep.diskspace import is_no_space, no_space_message
from rlkeep.errors import RlkeepError, StepTerminated, TransientError
from rlkeep.pipeline import step_function
from rlkeep.jsonio import partial_files
from rlkeep.records import JobRecord, load_record, record_path
from rlkeep.waits import seconds_from_env

if TYPE_CHECKING:  # regions imports the storage layer (boto3), which only transfer steps need
    from rlkeep.regions import Region

log = logging.getLogger("rlkeep")


@dataclass
class StepContext:
    job: str
    record: JobRecord
    data_root: Path
    inputs: dict[str, Path]
    outputs: dict[str, Path]
    settings: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def job_dir(self) -> Path:
        return self.data_root / self.job

    def work_dir(self, name: str) -> Path:
        """A private scratch folder of this step, kept across reruns (resume), under <job>/.work/."""
        path = self.job_dir / ".work" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def authorized(self, key: str) -> bool:
        """Authority granted on the command line for this job (see is_authorized)."""
        return is_authorized(self.config, key, self.job)


def is_authorized(config: Mapping[str, Any], key: str, job: str) -> bool:
    """Authority granted on the command line for `job`: `--config key=<job>` names exactly this job;
    a list (`--config 'key=[<job>, <other>]'`) grants it to each job it names. The Snakefile
    (rules/common.smk) and the steps (StepContext.authorized) both ask this function."""
    value = config.get(key)
    if isinstance(value, (list, tuple)):
        return job in [str(item) for item in value]
    return value is not None and str(value) == job


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
        if isinstance(error, TransientError):
            if number < tries:
                return 1, error
            _say(f"rlkeep: {error} (a transient failure, {tries} tries; rerun later)", name)
            return 1, None
        _say(f"rlkeep: {error}", name)  # permanent: no retry can change it
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


def context_from_snakemake(smk: Any) -> StepContext:
    config = dict(smk.config)
    data_root = Path.cwd()
    job = smk.wildcards["job"]
    records_dir = data_root / str(config.get("records", "records"))
    record = load_record(record_path(records_dir, job))

    def named(io: Any) -> dict[str, Path]:
        return {name: Path(value) for name, value in io.items() if isinstance(value, str)}

    return StepContext(
        job=job,
        record=record,
        data_root=data_root,
        inputs=named(smk.input),
        outputs=named(smk.output),
        settings=dict(smk.params.get("settings") or {}),
        config=config,
    )


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


def sentinel(status: str, **evidence: Any) -> dict[str, Any]:
    """Every sentinel is JSON with a status and its evidence (docs/contract.md §4)."""
    if status not in {"completed", "not_applicable"}:
        raise ValueError(status)
    return {"status": status, **evidence}


def not_applicable(reason: str, **evidence: Any) -> dict[str, Any]:
    return sentinel("not_applicable", reason=reason, **evidence)


def check_transfer(ctx: StepContext, *, nbytes: int, what: str, source: Region | None = None,
                   dest: Region | None = None) -> dict[str, Any]:
    """Stop a large or cross-region transfer before it starts, unless this invocation allows it.

    The allowance is `--config allow_transfer=<job>` for exactly this job (docs/contract.md §6).
    source/dest: where each end is and how that is known (rlkeep.regions); absent means not looked
    up for this transfer. A region that is unknown is said in the log, never assumed. Returns the
    evidence for the step's sentinel: the regions compared and their sources, and whether the
    allowance was used.
    """
    from rlkeep.regions import Region, compare

    source = source or Region(None, "not looked up for this transfer")
    dest = dest or Region(None, "not looked up for this transfer")
    crossing = compare(source, dest)
    allowed = ctx.authorized("allow_transfer")
    evidence: dict[str, Any] = {
        "what": what, "bytes": nbytes, "source_region": source.to_json(), "dest_region": dest.to_json(),
        "regions_compared": crossing is not None, "cross_region": crossing,
        "allowed_by": f"--config allow_transfer={ctx.job}" if allowed else None,
    }
    if crossing is None:
        unknown = [f"{end} region unknown ({region.source})" for end, region in (("source", source), ("destination", dest))
                   if not region.known]
        log.info("%s: regions not compared: %s", what, "; ".join(unknown))
    else:
        log.info("%s: source region %s, destination region %s: %s", what, source.describe(), dest.describe(),
                 "crosses regions" if crossing else "same region")
    if allowed:
        return evidence
    limit = int(ctx.config.get("policy", {}).get("max_transfer_bytes", 0) or 0)
    if limit and nbytes > limit:
        raise RlkeepError(
            f"{what}: {nbytes:,} bytes is over policy.max_transfer_bytes = {limit:,}; nothing was transferred. "
            f"To allow it for this job only, rerun with --config allow_transfer={ctx.job}"
        )
    if crossing:
        raise RlkeepError(
            f"{what}: crosses regions ({source.name} -> {dest.name}): source region from {source.source}, "
            f"destination region from {dest.source}; nothing was transferred. To allow it for this job only, rerun with --config allow_transfer={ctx.job}"
        )
    return evidence
