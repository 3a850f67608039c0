"""Which jobs the campaign target (`snakemake all`) may leave out of planning.

Snakemake decides that a completed job has nothing to do only after building its whole DAG: about
seventeen jobs and 28 ms of CPU per record, so 30 s to say "Nothing to be done" over a campaign of
1,000 finished runs (bench/results/planning_1000.json). A job whose completion record still
describes it is *settled*, and the campaign target asks for it no more:

- `<job>/DONE` and `<job>/REPORT.md` exist and DONE names the sha256 of the record as it is now
  (a DONE written before rlkeep recorded that digest never counts as settled);
- every step's evidence file of the job's kind exists and is no newer than DONE (a step rerun
  since, or a sentinel removed to redo a step, unsettles the job);
- the invocation names the job in no `--config` value (authority granted now, such as
  `reclaim_authorized=<job>`, must reach the job's rules) and forces nothing (`--forcerun`,
  `--forceall`, `--until`, ...: the caller wants Snakemake's full judgement).

Naming `<job>/DONE` as a target always plans the whole job, as Snakemake would.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rlkeep.steps import is_authorized


def unsettled_reason(job_dir: Path, record_sha256: str,
                     evidence_of: Callable[[str], Iterable[str | Path]]) -> str | None:
    """None when the job is settled, else why not. `evidence_of(kind)`: the paths of the step
    evidence files of a run kind (rlkeep.pipeline.evidence_of). The kind is DONE's: the record is
    the one DONE describes, so it is the record's, and the record is not parsed again."""
    done_path = job_dir / "DONE"
    try:
        done_mtime = done_path.stat().st_mtime
        done = json.loads(done_path.read_bytes())
    except FileNotFoundError:
        return "no completion record"
    except (OSError, ValueError) as error:
        return f"{done_path} unreadable: {error}"
    if not isinstance(done, dict) or done.get("record_sha256") != record_sha256:
        return "the record differs from the one DONE describes"
    if not (job_dir / "REPORT.md").is_file():
        return "REPORT.md is missing"
    if not isinstance(done.get("kind"), str):
        return "DONE names no run kind"
    for path in evidence_of(done["kind"]):
        try:
            mtime = Path(path).stat().st_mtime
        except FileNotFoundError:
            return f"{path} is missing"
        if mtime > done_mtime:
            return f"{path} is newer than DONE"
    return None


def named_in_config(config: Mapping[str, Any], job: str) -> bool:
    """Whether any config value names this job as authority is granted (rlkeep.steps.is_authorized:
    the job itself, or a list naming it), whatever the key."""
    return any(is_authorized(config, key, job) for key in config)


def planning_is_forced(dag_settings: Any) -> bool:
    """Snakemake's DAG settings ask for more than its own rerun rules: plan every job fully."""
    return bool(getattr(dag_settings, "forceall", False) or getattr(dag_settings, "forcetargets", False)
                or getattr(dag_settings, "forcerun", None) or getattr(dag_settings, "until", None)
                or getattr(dag_settings, "omit_from", None))
