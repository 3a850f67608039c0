"""The scheduler's pipeline steps: `<job>/chain.json` (capture_chain_step) and
`<job>/retries.json` (stop_retries_step), both through the record's Scheduler."""
from __future__ import annotations

from typing import Any

from rlkeep.chain_recapture import write_bookkeeping
from rlkeep.context import StepContext, sentinel
from rlkeep.jsonio import read_json, write_json
from rlkeep.scheduler.interface import StopJournal
from rlkeep.scheduler.named import scheduler_for


def split_excluded(unrecorded: list[dict[str, Any]], excludes: tuple[str, ...]) -> tuple[list[dict[str, Any]],
                                                                                           list[dict[str, Any]]]:
    """(the look-alikes still taken for unrecorded attempts, chain.json's `chain_excludes`): every id the
    record excludes, with its state when the listing showed it (null when it did not, or this
    scheduler lists no look-alikes). An excluded job never holds checkpoint reads or the capture open."""
    listed = {entry["id"]: entry["state"] for entry in unrecorded}
    return ([entry for entry in unrecorded if entry["id"] not in excludes],
            [{"id": job_id, "state": listed.get(job_id)} for job_id in excludes])


def capture_chain_step(ctx: StepContext) -> None:
    """`<job>/chain.json`: every attempt in record order with its scheduler state, plus (Iris)
    the CLI forms used and the owner's unrecorded attempts of this run, the look-alikes the
    record excludes, and whether the capture is final (rlkeep.chain_recapture)."""
    record = ctx.record
    scheduler = scheduler_for(record)
    attempts, extra = scheduler.capture(ctx)
    unrecorded, excluded = split_excluded(extra.get("unrecorded") or [], record.chain_excludes)
    if "unrecorded" in extra:
        extra["unrecorded"] = unrecorded
    evidence = {
        "job": record.job,
        "scheduler": record.scheduler,
        "cluster": record.cluster,
        "attempts": attempts,
        "tracker_url": record.tracker_url,
        "kind": record.kind,
        "terminal": scheduler.all_terminal(attempts),
        **extra,
        "chain_excludes": excluded,
        "final": scheduler.is_final(attempts, unrecorded),  # else the next invocation asks again
    }
    write_json(ctx.outputs["chain"], sentinel("completed", **evidence))
    write_bookkeeping(ctx.job_dir, evidence["final"])


def stop_retries_step(ctx: StepContext) -> None:
    """`<job>/retries.json`: stop the chain's pending retries by exact id, nothing else."""
    journal = StopJournal(ctx.work_dir("stop_retries") / "sent.json")
    write_json(ctx.outputs["retries"], scheduler_for(ctx.record).stop_retries(read_json(ctx.inputs["chain"]), journal))
