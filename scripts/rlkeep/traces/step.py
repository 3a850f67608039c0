"""The pipeline step `stage_traces`: the record's trace settings and the sync manifest into one
dataset build in `<job>/stage/traces/`."""
from __future__ import annotations

import logging
from typing import Any

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.hub.client import resolve_target
from rlkeep.jsonio import read_json
from rlkeep.traces.build import build_trace_dataset
from rlkeep.traces.card import CardInfo
from rlkeep.traces.coverage import DEFAULT_MIN_COVERAGE
from rlkeep.traces.shards import DEFAULT_TRIALS_PER_SHARD

LOG = logging.getLogger(__name__)


def _flag(settings: dict[str, Any], key: str) -> bool:
    value = settings.get(key, False)
    if not isinstance(value, bool):
        raise RlkeepError(f"config traces.{key} must be true or false, not {value!r}")
    return value


def stage_traces_step(ctx: StepContext) -> None:
    """`<job>/stage/traces/`: the dataset rebuilt from the full synced tree (never a monitor sample),
    gated on coverage before anything can be uploaded."""

    sync_manifest = read_json(ctx.inputs["manifest"])
    settings = ctx.settings
    publish = ctx.record.publish or {}
    card = CardInfo(job=ctx.job, dataset_repo=publish.get("traces"), model_repo=publish.get("model"),
                    endpoint=resolve_target().endpoint)
    manifest = build_trace_dataset(
        ctx.inputs["tar"], ctx.outputs["stage"],
        episodes=str(settings.get("episodes", "last")),
        filter=str(settings.get("filter", "none")),
        min_coverage=float(settings.get("min_coverage", DEFAULT_MIN_COVERAGE)),
        trials_per_shard=int(settings.get("trials_per_shard", DEFAULT_TRIALS_PER_SHARD)),
        source_sha256=sync_manifest["sha256"],
        clean_terminal_noise=_flag(settings, "clean_terminal_noise"),
        sharegpt=_flag(settings, "sharegpt"),
        card=card,
    )
    LOG.info(
        "trace dataset: %s rows from %s result.json files (coverage %.4f), %d shards",
        manifest.get("row_count"), manifest.get("result_count"), manifest.get("result_coverage", 0.0),
        len(manifest.get("shards", [])))
