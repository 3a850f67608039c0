"""The Iris scheduler: chain capture (each attempt's state, where a gone attempt's log is still
kept, and the owner's unrecorded attempts of this run) and the exact stop of pending retries.

The controller cancels the unfinished descendants of a job that ends in any state but
succeeded, so an exact stop of a pending attempt with children is refused unless every
unfinished child is itself a pending attempt of this run. A stop is confirmed by polling the
state (bounded); states are polled, never inferred from log strings. Only ids the record names
are ever stopped; an unrecorded attempt that still runs blocks checkpoint reads instead.
"""
from __future__ import annotations

import time
from typing import Any

from rlkeep.errors import BlockedError, RlkeepError, SchedulerError
from rlkeep.records import JobRecord, load_record
from rlkeep.scheduler.interface import (Scheduler, StopJournal, asked_again, checked_states, env_number, refuse_running,
                                       states_asked_again, stop_each, stopped_earlier)
from rlkeep.context import StepContext, sentinel
from rlkeep.scheduler.iris_cli import IrisCli
from rlkeep.scheduler.iris_output import GONE, PENDING_STATES, TERMINAL_STATES, UNFINISHED_STATES
from rlkeep.storage import open_store

STOP_WAIT_S = 120.0  # after a stop/cancel that may return early: how long the state is polled
STOP_POLL_S = 2.0  # the longest pause between two looks; the first is FIRST_POLL_S, each doubles
FIRST_POLL_S = 0.1  # a cancel that ends the job within a second is seen within one


def _wait_until_ended(iris: IrisCli, job_id: str, wait_s: float, poll_s: float) -> dict[str, Any]:
    """Poll the state after a stop/cancel that may return before the job ended (bounded); the pauses
    grow from FIRST_POLL_S to poll_s."""
    deadline = time.monotonic() + wait_s
    pause = min(FIRST_POLL_S, poll_s)
    while True:
        after = iris.entry(job_id)
        if after["state"] in TERMINAL_STATES or after["state"] == GONE:
            return after
        left = deadline - time.monotonic()
        if left <= 0:
            raise SchedulerError(f"iris job {iris.forms.stop[0] if iris.forms.stop else 'stop'} {job_id}: the job is "
                                 f"still {after['state']} {wait_s:g}s afterwards (RLKEEP_IRIS_STOP_WAIT_S)")
        time.sleep(min(pause, left))
        pause = min(pause * 2, poll_s)


def children_in_the_way(iris: IrisCli, pending: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Per pending attempt, its unfinished descendants that are not themselves pending attempts of this run."""
    if iris.forms.listing is None:
        raise SchedulerError(
            f"cannot list the children of {', '.join(pending)}: the installed iris CLI has no `job list`, and "
            "stopping a job cancels its unfinished children whatever flag is passed; nothing was stopped. "
            "Check `iris job list` on a newer CLI, or stop them yourself")
    in_the_way = {}
    for job_id in pending:
        children = [(child, state) for child, state in iris.list_jobs(job_id + "/")
                    if state not in TERMINAL_STATES and child not in pending]
        if children:
            in_the_way[job_id] = children
    return in_the_way


def stop_pending_retries(iris: IrisCli, chain: list[dict[str, Any]], *, named: set[str] | None = None,
                         wait_s: float | None = None, poll_s: float | None = None,
                         journal: StopJournal | None = None) -> list[dict[str, Any]]:
    """Stop the chain's attempts that are queued again (a pending resubmission or a scheduler retry of
    the same task, back in pending with failures), by exact id only, and only ids the record names.

    A running attempt means the run has not ended: an error, nothing is stopped. So is a pending
    attempt with an unfinished child that is not itself a pending attempt of this run: the
    controller would cancel that child with its parent.
    """
    named = {entry["id"] for entry in chain} if named is None else named
    wait_s = env_number("RLKEEP_IRIS_STOP_WAIT_S", STOP_WAIT_S) if wait_s is None else wait_s
    poll_s = env_number("RLKEEP_IRIS_STOP_POLL_S", STOP_POLL_S) if poll_s is None else poll_s
    refuse_running([entry["id"] for entry in chain if entry["state"] in UNFINISHED_STATES - PENDING_STATES], "attempt")
    pending = [entry for entry in chain if entry["state"] in PENDING_STATES and entry["id"] in named]
    if not pending:
        return []
    iris.forms.require("stop")
    in_the_way = children_in_the_way(iris, [entry["id"] for entry in pending])
    if in_the_way:
        named_children = "; ".join(f"{parent}: {', '.join(f'{c} ({s})' for c, s in kids)}"
                                   for parent, kids in in_the_way.items())
        raise SchedulerError(
            f"nothing was stopped: stopping a pending attempt would also cancel its unfinished children, which are "
            f"not attempts of this run ({named_children}); the controller cancels the unfinished descendants of a "
            "job that ends other than succeeded, whatever flag is passed. Let them finish or stop them yourself, then rerun")
    return stop_each(pending, iris.stop, lambda job_id: _wait_until_ended(iris, job_id, wait_s, poll_s),
                     lambda entry: {"queued_retry": entry.get("queued_retry"),
                                    "stop_form": "iris job " + " ".join(iris.forms.stop or ()).format(job=entry["id"])},
                     journal)


def extends_run(job_id: str, roots: set[str]) -> bool:
    """`/u/j-r2`, `/u/j_retry`, `/u/j.2` extend `/u/j`; children (`/u/j/eval`) and other users' jobs do not."""
    if job_id.count("/") != 2:
        return False
    return any(job_id.startswith(root) and len(job_id) > len(root) and job_id[len(root)] in "-_." for root in roots)


def unrecorded_attempts(iris: IrisCli, user: str, job: str, chain: list[str],
                        other_runs: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """The owner's jobs that extend the run's id and that the chain does not name, and how that was checked.

    other_runs: job ids that another record in the same records folder names ({id: that job}):
    they are that run's attempts (`rl-demo-b` beside `rl-demo`), not unrecorded ones of this run.
    """
    other_runs = other_runs or {}
    if iris.forms.listing is None:
        return [], "not checked: the installed iris CLI has no `job list`"
    roots = {f"/{user}/{job}", *(job_id for job_id in chain if job_id.count("/") == 2)}
    prefixes = sorted(root for root in roots if not any(root != other and root.startswith(other) for other in roots))
    found: dict[str, str] = {}
    for prefix in prefixes:
        for job_id, state in iris.list_jobs(prefix):
            if job_id not in chain and job_id not in other_runs and extends_run(job_id, roots) \
                    and job_id.startswith(f"/{user}/"):
                found[job_id] = state
    how = "listed with " + ", ".join("iris job " + " ".join(iris.forms.listing).format(prefix=p) for p in prefixes)
    return [{"id": job_id, "state": state, "blocks_checkpoint_reads": state in UNFINISHED_STATES}
            for job_id, state in sorted(found.items())], how


def active_unrecorded(chain: dict[str, Any]) -> list[dict[str, Any]]:
    """chain.json's unrecorded attempts that may still write checkpoints (pending or running)."""
    return [entry for entry in chain.get("unrecorded") or [] if entry.get("state") in UNFINISHED_STATES]


def refuse_while_unrecorded_attempts_run(chain: dict[str, Any], record_file: str) -> None:
    """Checkpoint folders are not read while an attempt the record does not name may write them."""
    active = active_unrecorded(chain)
    if active:
        named = ", ".join(f"{entry['id']} ({entry['state']})" for entry in active)
        lines = "\n".join(f"  - {entry['id']}" for entry in active)
        raise BlockedError(
            f"unrecorded attempt(s) of this run still pending or running: {named}; they may still write "
            "checkpoints, so none are read. rlkeep never stops an attempt the record does not name. If it belongs "
            f"to this run, add it to `chain:` in {record_file}:\n{lines}\nand rerun (rlkeep then stops it by exact "
            "id if it is still pending). If it is not an attempt of this run (an eval job named like the run), "
            "add the same lines under `chain_excludes:` instead and rerun. Otherwise let it end or stop it "
            "yourself, then rerun: rlkeep asks the scheduler again")


def _store_log(record: JobRecord, slug: str) -> dict[str, Any]:
    """Where a gone attempt's log is still kept: the store's `<layout.logs>/<attempt>.out`, if there."""
    key = f"{record.layout['logs']}/{slug}.out"
    try:
        present = open_store(record.store).exists(key)
    except Exception as error:  # noqa: BLE001 - an unreachable store only leaves this unknown
        return {"store_log": None, "store_log_reason": f"could not check {record.url_of(key)}: {error}"}
    return {"store_log": record.url_of(key) if present else None,
            **({} if present else {"store_log_reason": f"no {record.url_of(key)}"})}


def chains_of_other_records(ctx: StepContext) -> dict[str, str]:
    """{job id: job} for every attempt another readable record of this data root names."""
    records_dir = ctx.data_root / str(ctx.config.get("records", "records"))
    claimed: dict[str, str] = {}
    for path in sorted(records_dir.glob("*.yaml")) if records_dir.is_dir() else []:
        if path.stem == ctx.job:
            continue
        try:
            other = load_record(path)
        except RlkeepError:
            continue  # an unreadable record names nothing; its own run reports it
        claimed.update({job_id: other.job for job_id in other.chain})
    return claimed


class IrisScheduler(Scheduler):
    """`scheduler: iris`: the iris CLI of the record's cluster."""

    name = "iris"
    terminal_states = frozenset(TERMINAL_STATES | {GONE})
    running_states = frozenset(UNFINISHED_STATES - PENDING_STATES)
    unfinished_states = frozenset(UNFINISHED_STATES)


    def __init__(self, record: JobRecord) -> None:
        super().__init__(record)
        self.iris = IrisCli(record.cluster or "")

    def capture(self, ctx: StepContext) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        record = self.record
        self.iris.forms.require("status")
        attempts = []
        for job_id, slug in zip(record.chain, record.attempts):
            entry = {"slug": slug, **self.iris.entry(job_id)}
            if entry["state"] == GONE:
                entry.update(_store_log(record, slug))
            attempts.append(entry)
        unrecorded, how = unrecorded_attempts(self.iris, record.user, record.job, list(record.chain),
                                              chains_of_other_records(ctx))
        return attempts, {"iris_cli": self.iris.forms.to_json(), "unrecorded": unrecorded, "unrecorded_check": how}

    def stop_retries(self, chain: dict[str, Any], journal: StopJournal) -> dict[str, Any]:
        attempts = asked_again(chain["attempts"], self.unfinished_states, self.iris.entry)
        stopped = stopped_earlier(chain["attempts"], attempts, journal, self.terminal_states) + \
            stop_pending_retries(self.iris, attempts, named=set(self.record.chain), journal=journal)
        return sentinel(
            "completed", stopped=stopped, checked=checked_states(chain),
            states_now=states_asked_again(chain["attempts"], attempts),
            not_stopped_unrecorded=[u["id"] for u in chain.get("unrecorded") or []],
            note=(f"stopped exact ids only ({stopped[0]['stop_form'].replace(stopped[0]['id'], 'JOB')})" if stopped
                  else "no pending retries"),
        )

    def log_cli(self) -> IrisCli | None:
        return self.iris
