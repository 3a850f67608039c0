"""The step table: every rule that runs a package function, for which run kinds and what proves it.
What a rule needs from a cluster is not here: each rule (rules/*.smk) declares its `resources`
(mem_mb, runtime in minutes, cpus_per_task), which the SLURM executor reads, and `localrule: True`
when it stays on the host. Its adapter, `scripts/steps/<rule>.py`, runs the row's `function`
(`rlkeep step <rule>` too, rlkeep.step_cli); tests/test_pipeline_table.py checks that every row
has its rule and adapter.

Where a step's function lives, one rule for every row: `rlkeep.<concern>.step:<rule>_step`, the
function named after its rule in the `step` module of the package under scripts/rlkeep/ that owns
its concern (rlkeep.sync.step:sync_logs_step, rlkeep.hub.step:publish_model_step). The package
holds the concern's logic; its `step` module is the thin edge that reads the StepContext
(rlkeep.context) and writes the rule's outputs. tests/test_pipeline_table.py holds every row to it.

Everything else reads this table rather than restating it:
- STEPS (the rows with `evidence`): the steps DONE, STATUS.json, REPORT.md and the campaign page
  report on, in this order (rlkeep.report);
- `kinds`: which steps apply to each run kind (steps_for_kind, kind_has), so a kind's DONE
  inputs and reclamation inputs follow (rules/common.smk);
- `verify`: the verify/<name>.json sentinels reclamation waits on (verify_sentinels) and DONE's
  `verification` names (verifications);
- `archived`: the archive rule's inputs (archive_inputs) and the job files it keeps under rlkeep/
  (ARCHIVED_JOB_FILES), which the restore rehearsal compares;
- `after`: the step graph (which rules' outputs each rule takes), from which STATUS.json names the
  failed ancestor holding back a step that has not run (rlkeep.stepstate); the rules' inputs are the
  graph Snakemake runs, and tests/test_step_graph.py keeps the two equal.

This module imports no step module and no heavy library (step_function imports one when its step
runs): planning and every step process import it.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlkeep.errors import RlkeepError

ALL_KINDS = frozenset({"rl", "sft", "datagen", "eval"})
RL = frozenset({"rl"})
TRACE_KINDS = frozenset({"rl", "datagen", "eval"})  # kinds with a trace tree
TRACE_PUBLISHING = frozenset({"rl", "datagen"})  # kinds that can publish a trace dataset


@dataclass(frozen=True)
class Step:
    name: str  # the Snakemake rule (rules/*.smk), its adapter scripts/steps/<name>.py, the step in DONE
    kinds: frozenset[str]  # the run kinds (rlkeep.kinds) it applies to
    # the function its adapter runs, `rlkeep.<concern>.step:<rule>_step` (imported only when the step runs)
    function: str
    # the file (relative to <job>/) whose status DONE reports; None: a helper rule (staging, DONE itself)
    evidence: str | None = None
    verify: str | None = None  # writes verify/<verify>.json, a sentinel reclamation waits on
    remaining: str = ""  # what an operator does when this step's own run failed
    # rules its continue command forces: its fix is in data an earlier step already copied (the
    # operator corrects the store's log; without the force, logs.tar would be read as it was)
    forcerun: tuple[str, ...] = ()
    # the rules whose outputs this rule takes (rules/*.smk inputs), read by `parents`; an entry
    # "<rule> if <condition>" holds only for the records CONDITIONS names (the rule's input function);
    # "archived" and "verified" stand for every step with an `archived` or a `verify` column
    after: tuple[str, ...] = ()
    # (input key of the archive rule, file under <job>/) for each output of this step the archive
    # takes: a sync tar is unpacked into the archive's trees, any other file is kept under rlkeep/
    archived: tuple[tuple[str, str], ...] = ()



PIPELINE: tuple[Step, ...] = (
    Step("capture_chain", ALL_KINDS, "rlkeep.scheduler.step:capture_chain_step", evidence="chain.json",
         remaining="make the Iris chain readable (iris on PATH, cluster reachable) and rerun",
         archived=(("chain", "chain.json"),)),
    Step("stop_retries", ALL_KINDS, "rlkeep.scheduler.step:stop_retries_step", evidence="retries.json",
         remaining="stop the run's pending retries, then rerun",
         after=("capture_chain",),
         archived=(("retries", "retries.json"),)),
    Step("sync_logs", ALL_KINDS, "rlkeep.sync.step:sync_logs_step", evidence="sync/logs.manifest.json",
         remaining="make every attempt's trainer log readable, then rerun",
         after=("capture_chain", "stop_retries"),
         archived=(("logs", "sync/logs.tar"), ("logs_manifest", "sync/logs.manifest.json"))),
    Step("sync_traces", TRACE_KINDS, "rlkeep.sync.step:sync_traces_step", evidence="sync/trace_jobs.manifest.json",
         remaining="fix the trace prefix or the skip policy named in the log, then rerun",
         after=("stop_retries",),
         archived=(("traces", "sync/trace_jobs.tar"),
                   ("traces_manifest", "sync/trace_jobs.manifest.json"))),
    Step("list_checkpoints", RL, "rlkeep.checkpoints.step:list_checkpoints_step", evidence="checkpoint/candidates.json",
         remaining="make the store's ckpts/ and exports/ listable, then rerun",
         after=("capture_chain", "stop_retries")),
    Step("metric_surface", RL, "rlkeep.metrics.step:metric_surface_step", evidence="metrics/metrics.csv",
         remaining="correct the trainer log named in the log where the run keeps it (the store's logs/ or the "
                   "scheduler), then rerun: the command copies the logs again",
         forcerun=("sync_logs",), after=("sync_logs", "list_checkpoints")),
    Step("trial_table", RL, "rlkeep.metrics.step:trial_table_step", evidence="metrics/trials.csv",
         remaining="correct the trace object named in the log in the store, then rerun: the command copies the "
                   "traces again",
         forcerun=("sync_traces",), after=("sync_traces",)),
    Step("generation_stats", RL, "rlkeep.generation_stats.step:generation_stats_step", evidence="metrics/generation.md",
         remaining="correct the log named in the log where the run keeps it, then rerun: the command copies the "
                   "logs again",
         forcerun=("sync_logs",), after=("sync_logs",)),
    Step("select_checkpoint", RL, "rlkeep.checkpoints.step:select_checkpoint_step", evidence="checkpoint/selected.json",
         remaining="declare checkpoint.rule in the record (ema_max, latest or step) from the listed candidates, "
                   "then rerun",
         after=("list_checkpoints", "metric_surface")),
    Step("export_model", RL, "rlkeep.export.step:export_model_step", evidence="export.json",
         remaining="consolidate the selected checkpoint as the log says (an export job for Megatron), then rerun",
         after=("list_checkpoints", "select_checkpoint")),
    Step("stage_model", RL, "rlkeep.hub.step:stage_model_step",
         after=("capture_chain", "sync_logs", "metric_surface", "select_checkpoint", "export_model")),
    Step("publish_model", RL, "rlkeep.hub.step:publish_model_step", evidence="verify/model_upload.json",
         verify="model_upload",
         remaining="fix the publication problem named in the log (staging is kept), then rerun: the upload resumes",
         after=("stage_model if publish", "capture_chain if no publish")),
    Step("stage_traces", TRACE_PUBLISHING, "rlkeep.traces.step:stage_traces_step", after=("sync_traces",)),
    Step("publish_traces", TRACE_PUBLISHING, "rlkeep.hub.step:publish_traces_step", evidence="verify/traces.json",
         verify="traces",
         remaining="fix the trace dataset problem named in the log (coverage, Hub), then rerun",
         after=("stage_traces if publish", "capture_chain if no publish")),
    Step("link_model_card", RL, "rlkeep.hub.step:link_model_card_step", evidence="verify/model.json", verify="model",
         remaining="fix the card problem named in the log, then rerun: the link is one commit that changes "
                   "README.md only",
         after=("publish_model", "stage_model if publish", "publish_traces if publish.traces")),
    Step("register", RL, "rlkeep.registry.step:register_step", evidence="register.json",
         remaining="resolve the registry problem named in the log, then rerun",
         after=("publish_traces", "link_model_card")),
    Step("archive", ALL_KINDS, "rlkeep.archive.step:archive_step", evidence="archive/MANIFEST",
         remaining="fix the archive problem named in the log, then rerun",
         after=("archived",)),
    Step("verify_archive", ALL_KINDS, "rlkeep.archive.step:verify_archive_step", evidence="verify/archive.json",
         verify="archive", remaining="make archive.dest reachable or fix the mismatch named in the log, then rerun",
         after=("archive",)),
    Step("rehearse_restore", ALL_KINDS, "rlkeep.restore.step:rehearse_restore_step", evidence="verify/restore.json", verify="restore",
         remaining="the restore rehearsal names a changed or missing archive member: rerun, and the command "
                   "builds and uploads the archive again",
         forcerun=("archive",),
         after=("archived", "metric_surface", "trial_table", "archive", "verify_archive")),
    Step("reclaim", ALL_KINDS, "rlkeep.reclaim.step:reclaim_step", evidence="reclaim.json",
         remaining="rerun with --config reclaim_authorized=<job> once every verification passed",
         after=("verified", "sync_logs", "sync_traces", "archive")),
    Step("done", ALL_KINDS, "rlkeep.report.step:done_step"),
    # on demand, not part of DONE: `<job>/restore/DONE`, the archive restored into <job>/restore/tree/
    Step("restore", ALL_KINDS, "rlkeep.restore.step:restore_step", after=("archive", "verify_archive")),
)

STEPS: tuple[Step, ...] = tuple(step for step in PIPELINE if step.evidence is not None)
STEP_BY_NAME: dict[str, Step] = {step.name: step for step in PIPELINE}

# When an edge "<rule> if <condition>" exists: the record's `publish` section (rules/common.smk's
# get_publish_model_inputs, get_publish_traces_inputs, get_link_model_card_inputs).
CONDITIONS: dict[str, Callable[[Mapping[str, Any] | None], bool]] = {
    "publish": lambda publish: publish is not None,
    "no publish": lambda publish: publish is None,
    "publish.traces": lambda publish: bool(publish and publish.get("traces")),
}
# `after` entries that stand for every step with the column: the archive and the restore rehearsal
# take each archived output, reclamation waits on each verify sentinel.
GROUPS: dict[str, Callable[[], tuple[str, ...]]] = {
    "archived": lambda: tuple(step.name for step in PIPELINE if step.archived),
    "verified": lambda: tuple(step.name for step in PIPELINE if step.verify),
}
# What a report assumes when the record cannot be read: every publication edge holds.
EVERY_DESTINATION: Mapping[str, Any] = {"model": "unknown", "traces": "unknown"}


def parents(rule: str, kind: str, publish: Mapping[str, Any] | None = EVERY_DESTINATION) -> tuple[str, ...]:
    """The rules whose outputs `rule` takes in a run of this kind whose record has this `publish`
    section: its `after` entries whose condition holds, less the steps the kind does not have (a
    kind-dependent input exists only for the kinds whose step makes it). `done` takes every step
    of the kind. tests/test_step_graph.py checks this against `snakemake --rulegraph`."""
    if rule == "done":
        return steps_for_kind(kind)
    found: list[str] = []
    for entry in step_for_rule(rule).after:
        name, _, condition = entry.partition(" if ")
        if condition and not CONDITIONS[condition](publish):
            continue
        for member in GROUPS[name]() if name in GROUPS else (name,):
            if kind in STEP_BY_NAME[member].kinds and member not in found:
                found.append(member)
    return tuple(found)


def step_for_rule(rule: str) -> Step:
    """The row of `rule`; an unknown name is a clear error (a rule added without its row)."""
    try:
        return STEP_BY_NAME[rule]
    except KeyError:
        raise RlkeepError(f"rule {rule!r} has no row in rlkeep.pipeline.PIPELINE; expected one of: "
                          f"{', '.join(STEP_BY_NAME)}") from None


def steps_for_kind(kind: str) -> tuple[str, ...]:
    """The names of STEPS that apply to a run kind, in table order."""
    return tuple(step.name for step in STEPS if kind in step.kinds)


def kind_has(kind: str, step: str) -> bool:
    """Whether a run of this kind has the step (the others are `not_applicable` in DONE)."""
    return kind in step_for_rule(step).kinds


def verify_sentinels(kind: str) -> tuple[str, ...]:
    """The verify/<name>.json files that must exist before reclamation (archive always): rl's
    model_upload (the model on the Hub, its trace link pending) and model (the complete card)."""
    return tuple(step.verify for step in STEPS if kind in step.kinds and step.verify)


def verifications() -> tuple[str, ...]:
    """Every verify/<name>.json a step writes, in table order (DONE's `verification` names them all)."""
    return tuple(step.verify for step in STEPS if step.verify)


def archive_inputs(job: str, kind: str) -> dict[str, str]:
    """The archive rule's inputs in a run of this kind: each `archived` output of a step the kind has."""
    return {key: f"{job}/{path}" for step in PIPELINE if kind in step.kinds for key, path in step.archived}


# The job files the archive keeps under rlkeep/ (member name, input key of the archive rule); the
# record follows them as rlkeep/records/<job>.yaml. The restore rehearsal compares the same list.
ARCHIVED_JOB_FILES: tuple[tuple[str, str], ...] = tuple(
    (path, key) for step in PIPELINE for key, path in step.archived if not path.endswith(".tar"))


def step_function(rule: str) -> Callable[..., Any]:
    """The function the rule's step runs (its `function` column), imported now."""
    module, _, name = step_for_rule(rule).function.partition(":")
    return getattr(importlib.import_module(module), name)


def evidence_of(job: str, kind: str) -> dict[str, str]:
    """Each step a run kind has, and the file DONE reads for it, relative to the data root."""
    return {step.name: f"{job}/{step.evidence}" for step in STEPS if kind in step.kinds}
