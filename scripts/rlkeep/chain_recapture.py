"""When `<job>/chain.json` is captured again: while it is not final, and never once it is.

A capture is final when nothing it names can still change what rlkeep does (the record's
Scheduler decides, `Scheduler.is_final`: no attempt still running, no look-alike the record does
not exclude still pending or running). A capture that is not final must not look up to date to
Snakemake, or the steps it held back would read the same stale answer on every rerun.

The lever is the capture rule's params (rules/common.smk get_chain_settings): Snakemake compares
them with the params it recorded when the rule last ran, while mtime and input cannot say "the
output itself is stale". Snakemake recorded the params computed at planning, *before* that run,
so the `recapture` token of a final capture must be the one it was itself captured under:

- never captured: no token (the params a chain had before this key existed);
- the last capture was not final: its own capture id, a value no earlier run was recorded with,
  so the capture runs again;
- the last capture was final: the token it was captured under, which is what Snakemake recorded,
  so it is never captured again.

The capture step keeps this bookkeeping in `<job>/.work/capture_chain/capture.json`, not in
chain.json: Snakemake deletes chain.json before the capture runs again, and evaluates the step's
params anew after that, so the step reads the token from the bookkeeping exactly as planning did.
A chain captured before the bookkeeping existed counts as final (`--forcerun capture_chain` asks
again). Only the standard library and rlkeep.jsonio: planning calls this for every job (tests/test_pipeline_table.py).
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from rlkeep.jsonio import write_json

CAPTURE_BOOKKEEPING = Path(".work") / "capture_chain" / "capture.json"  # under <job>/


def read_bookkeeping(job_dir: Path) -> dict[str, Any] | None:
    """The last capture's bookkeeping, or None (never captured, or unreadable: asked again once)."""
    try:
        data = json.loads((job_dir / CAPTURE_BOOKKEEPING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recapture_token(last: dict[str, Any] | None) -> str | None:
    """The `recapture` param that follows the last capture's bookkeeping (see the module doc)."""
    if last is None:
        return None
    token = last.get("captured_under") if last.get("final") is True else last.get("capture_id")
    return token if isinstance(token, str) else None


def recapture_settings(job_dir: Path) -> dict[str, Any]:
    """`{"recapture": token}`, or nothing when there is no token: a chain captured final the first
    time keeps the params it had before this key existed, so no finished run is captured again."""
    token = recapture_token(read_bookkeeping(job_dir))
    return {} if token is None else {"recapture": token}


def write_bookkeeping(job_dir: Path, final: bool) -> dict[str, Any]:
    """After chain.json is written: this capture's id, whether it is final, and the token it ran
    under (what planning computed from the previous bookkeeping, which only this step writes)."""
    entry = {"capture_id": uuid.uuid4().hex, "final": final,
             "captured_under": recapture_token(read_bookkeeping(job_dir))}
    path = job_dir / CAPTURE_BOOKKEEPING
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, entry)
    return entry


def captured_for(job_dir: Path, chain: list[str], scheduler: str, cluster: str | None) -> bool:
    """Whether chain.json was captured by this rlkeep (it kept the bookkeeping) for this chain (same
    attempts in order, scheduler, cluster): only then may its readers ignore a new capture
    (rules/common.smk get_chain_input). An older capture stays a plain input, so a data root made
    before keeps its one-time migration (`--touch`, tests/test_pipeline_table.py) as it was."""
    if read_bookkeeping(job_dir) is None:
        return False
    try:
        captured = json.loads((job_dir / "chain.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(captured, dict) or not isinstance(captured.get("attempts"), list):
        return False
    return ([attempt.get("id") for attempt in captured["attempts"] if isinstance(attempt, dict)] == chain
            and captured.get("scheduler") == scheduler and captured.get("cluster") == cluster)
