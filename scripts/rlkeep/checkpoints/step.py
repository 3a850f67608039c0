"""The checkpoint pipeline steps: `list_checkpoints` (every saved step in the store, complete or
not) and `select_checkpoint` (the record's rule over the complete ones and the metric surface).
"""
from __future__ import annotations

from rlkeep.checkpoints.listing import (
    LATEST_TXT,
    Candidate,
    CheckpointError,
    candidates_from_listing,
    keys_to_read,
    parse_latest_step,
)
from rlkeep.checkpoints.selection import select_checkpoint
from rlkeep.context import StepContext
from rlkeep.jsonio import read_json, write_json
from rlkeep.metrics import read_metrics_csv
from rlkeep.scheduler import refuse_while_unrecorded_attempts_run
from rlkeep.storage import open_store

MAX_SMALL_FILE = 16 << 20  # an index or config larger than this is not one; leave it unread


def list_checkpoints_step(ctx: StepContext) -> None:
    """`<job>/checkpoint/candidates.json`: every saved step under the record's ckpts/ and
    exports/, complete or not with reasons. Runs after retries.json, so no attempt of the chain still
    writes, and refuses while chain.json lists an unrecorded attempt that is pending or running."""

    record = ctx.record
    if ctx.inputs.get("chain") is not None:  # an attempt the record does not name may still write

        record_file = f"{ctx.config.get('records', 'records')}/{record.job}.yaml"
        refuse_while_unrecorded_attempts_run(read_json(ctx.inputs["chain"]), record_file)
    store = open_store(record.store)
    ckpts, exports = record.layout["ckpts"].strip("/"), record.layout["exports"].strip("/")
    keys: dict[str, int] = {}
    for prefix in (ckpts, exports):
        keys.update((info.key, info.size) for info in store.list(prefix))
    txt_key = f"{ckpts}/{LATEST_TXT}"
    latest_text = store.read_bytes(txt_key).decode("utf-8", "replace") if txt_key in keys else None
    contents = {key: store.read_bytes(key) for key in keys_to_read(keys, ckpts_prefix=ckpts, exports_prefix=exports)
                if key != txt_key and keys[key] <= MAX_SMALL_FILE}
    found = candidates_from_listing(keys, ckpts_prefix=ckpts, exports_prefix=exports, latest_step_text=latest_text,
                                    interval=record.checkpoint_interval, contents=contents)
    write_json(ctx.outputs["candidates"], {
        "status": "completed",
        "store": record.store,
        "ckpts": ckpts,
        "exports": exports,
        "latest_ckpt_global_step": parse_latest_step(latest_text, record.url_of(txt_key)),
        "interval": record.checkpoint_interval,
        "objects_listed": len(keys),
        "valid": [candidate.step for candidate in found if candidate.complete],
        "candidates": [candidate.to_json() for candidate in found],
    })


def select_checkpoint_step(ctx: StepContext) -> None:
    """`<job>/checkpoint/selected.json`: the record's rule applied to the complete candidates
    over metrics.csv. Without a rule the step is blocked with the list of valid candidates."""

    listing = read_json(ctx.inputs["candidates"])
    try:
        candidates = [Candidate.from_json(item) for item in listing["candidates"]]
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{ctx.inputs['candidates']}: not a candidates.json ({error!r})") from None
    # from the record, the one way (the rule's params only rerun the step when these change)
    record = ctx.record
    rows = read_metrics_csv(ctx.inputs["metrics"])
    selected = select_checkpoint(candidates, record.selection_rule, rows, record.behavior_break_step)
    chosen = next(candidate for candidate in candidates if candidate.step == selected["step"])
    write_json(ctx.outputs["selected"], {
        "status": "completed",
        "job": ctx.job,
        "store": listing.get("store"),
        **selected,
        "ema": None if selected["ema"] is None else {str(step): value for step, value in selected["ema"].items()},
        "keys": {source: chosen.keys.get(source, []) for source in chosen.complete_sources},
        "reasons": chosen.reasons,
    })
