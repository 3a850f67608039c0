"""Errors that end a step with a clear message instead of a traceback."""
from __future__ import annotations


class RlkeepError(Exception):
    """A failure the operator can act on: the message names the file, field or object."""


class TransientError(RlkeepError):
    """A failure another try may cure: a network error, a 5xx, a 429 within its bound. The step
    retries it itself, a bounded number of times (rlkeep.runner.run_step); every other failure (a
    missing program, a bad record, a refusal, a schema error, a bug) is permanent and fails the
    step once (docs/running.md, "Which errors are retried")."""


class RecordError(RlkeepError):
    """A job record is missing, malformed or asks for something that cannot be done."""


class StoreError(RlkeepError):
    """The object store refused, lost or corrupted something."""


class SchedulerError(RlkeepError):
    """The scheduler command failed or printed something rlkeep cannot read."""


class BlockedError(RlkeepError):
    """A step cannot proceed until the operator decides something (e.g. no selection rule)."""


class StepTerminated(BaseException):
    """The step was asked to stop (SIGTERM from SLURM preemption, SIGHUP from a closed login
    session, SIGINT from Ctrl-C). A BaseException, like KeyboardInterrupt, so no `except
    Exception` retry loop swallows it, while every finally block and temp-file cleanup runs."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")
