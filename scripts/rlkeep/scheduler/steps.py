"""The scheduler's pipeline steps: `<job>/chain.json` (capture_chain_step) and
`<job>/retries.json` (stop_retries_step), both through the record's Scheduler."""
from __future__ import annotations

from rlkeep.jsonio import read_json, write_json
from rlkeep.scheduler.named import scheduler_for
from rlkeep.steps import StepContext, sentinel


def capture_chain_step(ctx: StepContext) -> None:
    """`<job>/chain.json`: every attempt in record order with its scheduler state, plus (Iris)
    the CLI forms used and the owner's unrecorded attempts of this run."""
    record = ctx.record
    scheduler = scheduler_for(record)
    attempts, extra = scheduler.capture(ctx)
    evidence = {
        "job": record.job,
        "scheduler": record.scheduler,
        "cluster": record.cluster,
        "attempts": attempts,
        "tracker_url": record.tracker_url,
        "kind": record.kind,
        "terminal": scheduler.all_terminal(attempts),
        **extra,
    }
    write_json(ctx.outputs["chain"], sentinel("completed", **evidence))


def stop_retries_step(ctx: StepContext) -> None:
    """`<job>/retries.json`: stop the chain's pending retries by exact id, nothing else."""
    write_json(ctx.outputs["retries"], scheduler_for(ctx.record).stop_retries(read_json(ctx.inputs["chain"])))
