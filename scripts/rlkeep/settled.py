"""Which jobs the campaign target (`snakemake all`) may leave out of planning.

Snakemake decides that a completed job has nothing to do only after building its whole DAG, some
seventeen jobs per record, so saying "Nothing to be done" over a campaign of a thousand finished
runs takes most of a minute (bench/results/planning_1000.json). A job whose completion record still
describes it is *settled*, and the campaign target asks for it no more:

- `<job>/DONE` and `<job>/REPORT.md` exist and DONE names the sha256 of the record as it is now
  (a DONE written before rlkeep recorded that digest never counts as settled);
- every step's evidence file of the job's kind exists and is no newer than DONE (a step rerun
  since, or a sentinel removed to redo a step, unsettles the job);
- the invocation names the job in no `--config` value (authority granted now, such as
  `reclaim_authorized=<job>`, must reach the job's rules) and forces nothing (`--forcerun`,
  `--forceall`, `--until`, ...: the caller wants Snakemake's full judgement).

Naming `<job>/DONE` as a target always plans the whole job, as Snakemake would.

A record whose job has not started (no `<job>/` folder) cannot be settled, and Snakemake plans
all of its jobs, nearly all of that time Snakemake's own per-job work (bench/results/planning_1000.json).
So the campaign target also admits at most `max_new_jobs` records that have not
started per invocation, in name order (`admitted_jobs`); the others wait for a later invocation and
planning says so. Started jobs and jobs a `--config` value names are never held back.

Every record the campaign target would plan or hold back is loaded alone: one that does not load
(rlkeep.records.load_record's RecordError) is *refused*. Its job is not planned and takes no place
among the new jobs; every other record is planned as if it were absent, and planning lists each
refused record with its own error (`refusal_message`), again at the end of a run.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rlkeep.context import is_authorized
from rlkeep.readable import plural


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


class Admission(NamedTuple):
    """The campaign target's decision, each list in the order of the records."""

    planned: list[str]   # their DONEs are asked for
    waiting: list[str]   # not started, beyond max_new_jobs: a later invocation takes them
    refused: list[str]   # needed planning, but the record does not load: never planned, named instead


def admitted_jobs(jobs: Iterable[str], *, started: Callable[[str], bool],
                  needs_planning: Callable[[str], bool], named: Callable[[str], bool],
                  max_new_jobs: int | None, loads: Callable[[str], bool] = lambda job: True) -> Admission:
    """Which jobs the campaign target plans, which wait, which are refused.

    A job a `--config` value names is planned; a started job is planned while it needs planning
    (not settled, or the invocation forces planning); of the jobs not started, the first
    `max_new_jobs` are planned (None: all) and the rest wait. Each record that would be planned
    or wait is loaded alone (`loads`), and one that does not load is refused and takes no place
    among the new jobs; a settled job's record is not read (DONE was made from this very file)."""
    admission = Admission([], [], [])
    new_admitted = 0
    for job in jobs:
        if named(job) or (started(job) and needs_planning(job)):
            (admission.planned if loads(job) else admission.refused).append(job)
        elif started(job):
            continue
        elif not loads(job):
            admission.refused.append(job)
        elif max_new_jobs is None or new_admitted < max_new_jobs:
            admission.planned.append(job)
            new_admitted += 1
        else:
            admission.waiting.append(job)
    return admission


def waiting_message(waiting: list[str], max_new_jobs: int) -> str:
    """What planning prints when records wait for a later invocation."""
    shown = ", ".join(waiting[:3]) + (", ..." if len(waiting) > 3 else "")
    return (f"rlkeep: {plural(len(waiting), 'record')} whose job has not started {'waits' if len(waiting) == 1 else 'wait'} for a later invocation "
            f"({shown}): the campaign target takes at most {plural(max_new_jobs, 'new job')} per invocation "
            "(config max_new_jobs). Run the same command again after this one, name a job's DONE, or "
            "take more with --config max_new_jobs=<n> (or =all).")


def refusal_message(errors: list[str]) -> str:
    """What planning prints when records are refused: one line per record, its own error."""
    return "\n".join([f"rlkeep: {plural(len(errors), 'record')} refused; their jobs are not planned, every other record's "
                      "are. Correct each file as its line says and run the same command again "
                      "(campaign/refused.json lists the refused records after each run):",
                      *(f"  {error}" for error in errors)])


def named_in_config(config: Mapping[str, Any], job: str) -> bool:
    """Whether any config value names this job as authority is granted (rlkeep.context.is_authorized:
    the job itself, or a list naming it), whatever the key."""
    return any(is_authorized(config, key, job) for key in config)


# The settings of Snakemake's DAGSettings (snakemake.settings.types, the dataclass its API takes)
# that ask for more than its own rerun rules. Read from the workflow object the Snakefile is given:
# no public accessor exists, so a Snakemake that renames or drops one is taken to force planning,
# which only costs time (Snakemake judges every job), never a job left out.
FORCING_SETTINGS = ("forceall", "forcetargets", "forcerun", "until", "omit_from")


def planning_is_forced(dag_settings: Any) -> bool:
    """Snakemake's DAG settings ask for more than its own rerun rules (or cannot be read): plan
    every job fully."""
    missing = object()
    values = [getattr(dag_settings, name, missing) for name in FORCING_SETTINGS]
    return any(value is missing or bool(value) for value in values)
