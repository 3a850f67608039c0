"""The one interface the pipeline asks of a record's scheduler (`scheduler:`), and what every
scheduler shares: the exact-stop loop `stop_each`, the refusal while an attempt still runs,
the command timeout and numbers read from the environment.

A scheduler captures chain.json's attempts, stops pending retries for retries.json, and says where
an attempt's trainer log can be read (rlkeep.sync; `log_cli`, a LogCommand, where a command line
proves a log complete). It imports no scheduler: each one imports it. What its record must look like (the chain's
job-id shape, a `cluster:`) is data in rlkeep.records (CHAIN_ID_CHECKS).
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from rlkeep.context import StepContext
from rlkeep.errors import SchedulerError
from rlkeep.jsonio import read_json, write_json
from rlkeep.records import JobRecord

COMMAND_TIMEOUT_S = 600


class JobGoneError(SchedulerError):
    """The controller does not know the job (deleted after its retention period, or never existed)."""


@dataclass(frozen=True)
class LogFetch:
    """One attempt's log as the scheduler's command line gave it, and whether it is provably the whole log."""

    text: str | None
    complete: bool | None  # True proven; False known truncated or unavailable; None not provable
    detail: str
    form: str | None


class LogCommand(Protocol):
    """A command line that prints an attempt's log with proof of completeness (Iris: IrisCli)."""

    def logs(self, job_id: str) -> LogFetch:
        """The log of `job_id`, or the reason it cannot be proven whole; JobGoneError when the job is gone."""


class Scheduler(ABC):
    """What the pipeline asks of the scheduler that ran a record's chain (`scheduler:` in the
    record): the attempts' states for chain.json, the exact stop of pending retries for
    retries.json, and where an attempt's trainer log can be read (rlkeep.sync)."""

    name: ClassVar[str]
    terminal_states: ClassVar[frozenset[str] | None] = None  # None: this scheduler reports no states
    # states of a job that has started and not ended: stop_retries refuses while an attempt is in one
    running_states: ClassVar[frozenset[str]] = frozenset()
    # states of a job that has not ended (pending or running): a look-alike in one holds checkpoint reads
    unfinished_states: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, record: JobRecord) -> None:
        self.record = record

    @abstractmethod
    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(every attempt's chain.json entry in record order, the scheduler's own chain.json fields)."""

    @abstractmethod
    def stop_retries(self, chain: dict[str, Any], journal: StopJournal) -> dict[str, Any]:
        """retries.json: the chain's pending retries stopped by exact id, nothing else (`journal`
        keeps each stop sent, so a rerun after a kill still counts the stops it sent)."""

    def all_terminal(self, attempts: list[dict[str, Any]]) -> bool | None:
        """Whether every attempt has ended; None where this scheduler reports no states."""
        if self.terminal_states is None:
            return None
        return all(attempt["state"] in self.terminal_states for attempt in attempts)

    def is_final(self, attempts: list[dict[str, Any]], unrecorded: list[dict[str, Any]]) -> bool:
        """Whether asking the scheduler again could change what rlkeep does (rlkeep.chain_recapture):
        not while an attempt still runs (stop_retries refuses) or a look-alike the record does not
        exclude is pending or running (checkpoint reads wait). A pending attempt does not keep the
        capture open: stop_retries ends it by exact id, asking its state again first."""
        return not any(attempt["state"] in self.running_states for attempt in attempts) and \
            not any(entry["state"] in self.unfinished_states for entry in unrecorded)

    def log_cli(self) -> LogCommand | None:
        """A command line that prints an attempt's log with proof of completeness, if there is one."""
        return None

    def stdout_paths(self, attempts: list[dict[str, Any]]) -> dict[str, str]:
        """{attempt slug: the path its scheduler wrote its stdout to}, where the scheduler says one."""
        return {}


def env_number(name: str, default: float) -> float:
    """A number from the environment variable `name`, or default when it is unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SchedulerError(f"environment {name}={raw!r}: expected a number") from None


def refuse_running(running: list[str], what: str) -> None:
    """Nothing is stopped while an attempt still runs: the run has not ended."""
    if running:
        raise SchedulerError(
            f"{what} {running[0]} is still running; rlkeep preserves finished runs: wait for it to end or stop it yourself"
        )


class StopJournal:
    """The stops stop_retries sent, kept across its reruns: `<job>/.work/stop_retries/sent.json`,
    {id: retries.json entry so far}. An id is written before its stop is sent and again with the
    answer, so a step killed after the scheduler acted still knows, when it runs again, that the
    attempt it now finds ended was ended by rlkeep (`stopped_earlier`). No path: nothing is kept."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def sent(self) -> dict[str, dict[str, Any]]:
        if self.path is None or not self.path.is_file():
            return {}
        return read_json(self.path)

    def record(self, entry: dict[str, Any]) -> None:
        if self.path is not None:
            write_json(self.path, {**self.sent(), entry["id"]: entry})


def stop_each(pending: list[dict[str, Any]], stop: Callable[[str], str], ended: Callable[[str], dict[str, Any]],
              extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda entry: {},
              journal: StopJournal | None = None) -> list[dict[str, Any]]:
    """The one stop loop: stop each pending chain entry by its exact id, then confirm it ended
    (`ended` raises when it did not); the retries.json entry of each."""
    journal = journal or StopJournal(None)
    stopped = []
    for entry in pending:
        sending = {"id": entry["id"], "state_before": entry["state"], **extra(entry)}
        journal.record(sending)
        output = stop(entry["id"]).strip()
        journal.record({**sending, "stop_output": output})
        after = ended(entry["id"])
        stopped.append({**sending, "state_after": after["state"], "stop_output": output})
    return stopped


def stopped_earlier(captured: list[dict[str, Any]], now: list[dict[str, Any]], journal: StopJournal,
                    ended_states: frozenset[str]) -> list[dict[str, Any]]:
    """The retries.json entries of stops an earlier, interrupted try of this step sent: attempts
    chain.json saw unfinished that have ended since, and whose stop the journal holds. (An attempt
    that ended with no stop of ours in the journal ended on its own: it is not claimed.)"""
    sent = journal.sent()
    return [{**sent[before["id"]], "state_after": after["state"],
             "stop_output": sent[before["id"]].get("stop_output", ""), "sent_by_an_earlier_try": True}
            for before, after in zip(captured, now)
            if before["id"] in sent and after["state"] != before["state"] and after["state"] in ended_states]


def states_asked_again(captured: list[dict[str, Any]], now: list[dict[str, Any]]) -> dict[str, str]:
    """retries.json's `states_now`: {id: state} of each attempt whose state changed since chain.json."""
    return {after["id"]: after["state"] for before, after in zip(captured, now) if after["state"] != before["state"]}


def asked_again(attempts: list[dict[str, Any]], unfinished: frozenset[str],
                ask: Callable[[str], dict[str, Any]]) -> list[dict[str, Any]]:
    """The attempts with each one chain.json saw unfinished asked again: a pending retry may have
    started (never stop a running attempt) or ended since the capture (a stop held back earlier)."""
    return [{**attempt, **ask(attempt["id"])} if attempt["state"] in unfinished else attempt for attempt in attempts]


def checked_states(chain: dict[str, Any]) -> list[dict[str, Any]]:
    """retries.json's `checked`: each attempt's id and state as chain.json had them."""
    return [{"id": attempt["id"], "state": attempt["state"]} for attempt in chain["attempts"]]
