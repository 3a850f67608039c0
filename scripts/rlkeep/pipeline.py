"""The one step table: every rule that runs a package function, what it runs, for which run kinds,
what proves it, and what it needs from a cluster.

Follow a rule to its code: `rules/<stage>.smk` names the rule; its row here names the function as
`rlkeep.<module>:<function>` (the module path and the function's own name, nothing computed: grep
or "go to file" finds it, and `rlkeep step rlkeep.<module>:<function> --job J` runs it by hand);
`scripts/run_step.py` hands the Snakemake job to `rlkeep.steps.run_from_snakemake`, which picks the
row by `snakemake.rule` and imports only that row's module (`Step.load`).

Why a reference and not an imported function: this module is imported by every step process
(Snakemake starts one per job, about twenty per run) and by planning (rules/common.smk reads the
table through rlkeep.kinds and rlkeep.report). Importing every step module here made each of them
pay for pyarrow, huggingface_hub, numpy and the rest (about 0.6 s before the step did anything),
and planning pay for all of it. Deferring every such library into the functions that use it would
scatter imports through modules whose types and schemas are built from them; one reference per row
keeps the cost decision in one place (a module that serves two steps may still defer the one
library only one of them needs, saying its cost: rlkeep.archive's Hub upload and redaction).
tests/test_pipeline_table.py resolves every reference (a renamed or moved function fails there,
not in a run) and checks that planning imports none of the heavy libraries.

Everything else reads this table rather than restating it:
- STEPS (the rows with `evidence`): the steps DONE, STATUS.json, REPORT.md and the campaign page
  report on, in this order (rlkeep.report);
- `kinds`: which steps apply to each run kind (rlkeep.kinds.KindSpec.steps), so a kind's DONE
  inputs and reclamation inputs follow (rules/common.smk);
- `verify`: the verify/<name>.json sentinels reclamation waits on (KindSpec.verify_sentinels);
- `after`: the step graph (which rules' outputs each rule takes), from which STATUS.json names the
  failed ancestor holding back a step that has not run (rlkeep.stepstate); the rules' inputs are the
  graph Snakemake runs, and tests/test_step_graph.py keeps the two equal;
- `threads`, `mem_mb`, `runtime`: profiles/slurm/profile.yaml's set-threads and set-resources
  (tests/test_pipeline_table.py keeps the two equal; `rlkeep install-profiles` sizes a rule the
  file does not name from this table).

The function is not a Snakemake `params` entry, so renaming or moving it never reruns a finished
step. This module imports no step module, so any module may import it at its top.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlkeep.errors import RlkeepError

if TYPE_CHECKING:
    from rlkeep.steps import StepContext

ALL_KINDS = frozenset({"rl", "sft", "datagen", "eval"})
RL = frozenset({"rl"})
TRACE_KINDS = frozenset({"rl", "datagen", "eval"})  # kinds with a trace tree
TRACE_PUBLISHING = frozenset({"rl", "datagen"})  # kinds that can publish a trace dataset


@dataclass(frozen=True)
class Step:
    name: str  # the Snakemake rule (rules/*.smk) and the step's name in DONE
    function: str  # "rlkeep.<module>:<function>", imported by the process that runs the step (load)
    kinds: frozenset[str]  # the run kinds (rlkeep.kinds) it applies to
    mem_mb: int  # SLURM memory and wall time (minutes), sized for an 8B run with a few hundred
    runtime: int  # thousand trace objects; memory is bounded by rlkeep's streaming, not run size
    threads: int = 1  # a second core for hashing, compression or tensor copies (SLURM cpus-per-task)
    # the file (relative to <job>/) whose status DONE reports; None: a helper rule (staging, DONE itself)
    evidence: str | None = None
    verify: str | None = None  # writes verify/<verify>.json, a sentinel reclamation waits on
    remaining: str = ""  # what an operator does when this step's own run failed
    # rules its continue command forces: its fix is in data an earlier step already copied (the
    # operator corrects the store's log; without the force, logs.tar would be read as it was)
    forcerun: tuple[str, ...] = ()
    # the rules whose outputs this rule takes (rules/*.smk inputs), read by `parents`; an entry
    # "<rule> if <condition>" holds only for the records CONDITIONS names (the rule's input function)
    after: tuple[str, ...] = ()

    def load(self) -> Callable[[StepContext], None]:
        """The step's function, importing its module (and only its module's imports) now."""
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)


PIPELINE: tuple[Step, ...] = (
    Step("capture_chain", "rlkeep.scheduler.steps:capture_chain_step", ALL_KINDS, 1000, 15, evidence="chain.json",
         remaining="make the Iris chain readable (iris on PATH, cluster reachable) and rerun"),
    Step("stop_retries", "rlkeep.scheduler.steps:stop_retries_step", ALL_KINDS, 1000, 15, evidence="retries.json",
         remaining="stop the run's pending retries, then rerun",
         after=("capture_chain",)),
    Step("sync_logs", "rlkeep.sync:sync_logs_step", ALL_KINDS, 4000, 120, evidence="sync/logs.manifest.json",
         remaining="make every attempt's trainer log readable, then rerun",
         after=("capture_chain", "stop_retries")),
    Step("sync_traces", "rlkeep.sync:sync_traces_step", TRACE_KINDS, 4000, 480, threads=2,
         evidence="sync/trace_jobs.manifest.json",
         remaining="fix the trace prefix or the skip policy named in the log, then rerun",
         after=("stop_retries",)),
    Step("list_checkpoints", "rlkeep.checkpoints.step:list_checkpoints_step", RL, 1000, 30,
         evidence="checkpoint/candidates.json",
         remaining="make the store's ckpts/ and exports/ listable, then rerun",
         after=("capture_chain", "stop_retries")),
    Step("metric_surface", "rlkeep.metrics.step:metric_surface_step", RL, 4000, 60, evidence="metrics/metrics.csv",
         remaining="correct the trainer log named in the log where the run keeps it (the store's logs/ or the "
                   "scheduler), then rerun: the command copies the logs again",
         forcerun=("sync_logs",), after=("sync_logs", "list_checkpoints")),
    Step("trial_table", "rlkeep.metrics.step:trial_table_step", RL, 4000, 120, evidence="metrics/trials.csv",
         remaining="correct the trace object named in the log in the store, then rerun: the command copies the "
                   "traces again",
         forcerun=("sync_traces",), after=("sync_traces",)),
    Step("generation_stats", "rlkeep.generation_stats:generation_stats_step", RL, 2000, 60,
         evidence="metrics/generation.md",
         remaining="correct the log named in the log where the run keeps it, then rerun: the command copies the "
                   "logs again",
         forcerun=("sync_logs",), after=("sync_logs",)),
    Step("select_checkpoint", "rlkeep.checkpoints.step:select_checkpoint_step", RL, 1000, 15,
         evidence="checkpoint/selected.json",
         remaining="declare checkpoint.rule in the record (ema_max, latest or step) from the listed candidates, "
                   "then rerun",
         after=("list_checkpoints", "metric_surface")),
    Step("export_model", "rlkeep.export.step:export_step", RL, 16000, 240, threads=2, evidence="export.json",
         remaining="consolidate the selected checkpoint as the log says (an export job for Megatron), then rerun",
         after=("list_checkpoints", "select_checkpoint")),
    Step("stage_model", "rlkeep.hub.steps:stage_model_step", RL, 4000, 120,
         after=("capture_chain", "sync_logs", "metric_surface", "select_checkpoint", "export_model")),
    Step("publish_model", "rlkeep.hub.steps:publish_model_step", RL, 4000, 480, evidence="verify/model_upload.json",
         verify="model_upload",
         remaining="fix the publication problem named in the log (staging is kept), then rerun: the upload resumes",
         after=("stage_model if publish", "capture_chain if no publish")),
    Step("stage_traces", "rlkeep.traces.step:stage_traces_step", TRACE_PUBLISHING, 8000, 240, threads=2,
         after=("sync_traces",)),
    Step("publish_traces", "rlkeep.hub.steps:publish_traces_step", TRACE_PUBLISHING, 4000, 240, evidence="verify/traces.json",
         verify="traces",
         remaining="fix the trace dataset problem named in the log (coverage, Hub), then rerun",
         after=("stage_traces if publish", "capture_chain if no publish")),
    Step("link_model_card", "rlkeep.hub.steps:link_model_card_step", RL, 4000, 240,
         evidence="verify/model.json", verify="model",
         remaining="fix the card problem named in the log, then rerun: the link is one commit that changes "
                   "README.md only",
         after=("publish_model", "stage_model if publish", "publish_traces if publish.traces")),
    Step("register", "rlkeep.registry:register_step", RL, 1000, 15, evidence="register.json",
         remaining="resolve the registry problem named in the log, then rerun",
         after=("publish_traces", "link_model_card")),
    Step("archive", "rlkeep.archive.step:archive_step", ALL_KINDS, 4000, 240, threads=2, evidence="archive/MANIFEST",
         remaining="fix the archive problem named in the log, then rerun",
         after=("capture_chain", "stop_retries", "sync_logs", "sync_traces")),
    Step("verify_archive", "rlkeep.archive.step:verify_archive_step", ALL_KINDS, 2000, 240,
         evidence="verify/archive.json",
         verify="archive", remaining="make archive.dest reachable or fix the mismatch named in the log, then rerun",
         after=("archive",)),
    Step("rehearse_restore", "rlkeep.restore.step:rehearse_restore_step", ALL_KINDS, 2000, 240,
         evidence="verify/restore.json", verify="restore",
         remaining="the restore rehearsal names a changed or missing archive member: rerun, and the command "
                   "builds and uploads the archive again",
         forcerun=("archive",),
         after=("capture_chain", "stop_retries", "sync_logs", "sync_traces", "metric_surface", "trial_table",
                "archive", "verify_archive")),
    Step("reclaim", "rlkeep.reclaim:reclaim_step", ALL_KINDS, 2000, 240, evidence="reclaim.json",
         remaining="rerun with --config reclaim_authorized=<job> once every verification passed",
         after=("sync_logs", "sync_traces", "publish_model", "publish_traces", "link_model_card", "archive",
                "verify_archive", "rehearse_restore")),
    Step("done", "rlkeep.report:done_step", ALL_KINDS, 1000, 15),
    # on demand, not part of DONE: `<job>/restore/DONE`, the archive restored into <job>/restore/tree/
    Step("restore", "rlkeep.restore.step:restore_step", ALL_KINDS, 2000, 240, after=("archive", "verify_archive")),
)

STEPS: tuple[Step, ...] = tuple(step for step in PIPELINE if step.evidence is not None)
STEP_BY_NAME: dict[str, Step] = {step.name: step for step in PIPELINE}

# Rules that run no package step: `campaign` has its own adapter (scripts/campaign_step.py, no
# job wildcard), `all` is the default target. Their SLURM sizes are here so the profile has them.
OTHER_RULE_RESOURCES: dict[str, dict[str, int]] = {"campaign": {"mem_mb": 1000, "runtime": 15}}


# When an edge "<rule> if <condition>" exists: the record's `publish` section (rules/common.smk's
# get_publish_model_inputs, get_publish_traces_inputs, get_link_model_card_inputs).
CONDITIONS: dict[str, Callable[[Mapping[str, Any] | None], bool]] = {
    "publish": lambda publish: publish is not None,
    "no publish": lambda publish: publish is None,
    "publish.traces": lambda publish: bool(publish and publish.get("traces")),
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
    found = []
    for entry in step_for_rule(rule).after:
        name, _, condition = entry.partition(" if ")
        if (not condition or CONDITIONS[condition](publish)) and kind in STEP_BY_NAME[name].kinds:
            found.append(name)
    return tuple(found)


def step_for_rule(rule: str) -> Step:
    """The row of `rule`; an unknown name is a clear error (a rule added without its row)."""
    try:
        return STEP_BY_NAME[rule]
    except KeyError:
        raise RlkeepError(f"rule {rule!r} has no row in rlkeep.pipeline.PIPELINE; expected one of: "
                          f"{', '.join(STEP_BY_NAME)}") from None


def step_for_target(target: str) -> Step:
    """`rlkeep step`'s argument: a rule name, or the function as rlkeep.<module>:<function>."""
    if ":" not in target:
        return step_for_rule(target)
    references = {target}
    module, _, name = target.partition(":")
    try:  # a name a package re-exports (rlkeep.archive:archive_step) finds the row of the module defining it
        function = getattr(importlib.import_module(module), name)
        references.add(f"{function.__module__}:{function.__name__}")
    except (ImportError, AttributeError, ValueError):  # no such module or name: the error below
        pass
    for step in PIPELINE:
        if step.function in references:
            return step
    raise RlkeepError(f"step target {target!r}: no row of rlkeep.pipeline.PIPELINE runs it; expected a rule name "
                      f"({', '.join(STEP_BY_NAME)}) or rlkeep.<module>:<function> of one")


def steps_for_kind(kind: str) -> tuple[str, ...]:
    """The names of STEPS that apply to a run kind, in table order."""
    return tuple(step.name for step in STEPS if kind in step.kinds)


def evidence_of(job: str, kind: str) -> dict[str, str]:
    """Each step a run kind has, and the file DONE reads for it, relative to the data root."""
    return {step.name: f"{job}/{step.evidence}" for step in STEPS if kind in step.kinds}


def slurm_threads() -> dict[str, int]:
    """set-threads of the SLURM profile: the rules that use more than one core."""
    return {step.name: step.threads for step in PIPELINE if step.threads > 1}


def slurm_resources() -> dict[str, dict[str, int]]:
    """set-resources of the SLURM profile: memory (MB) and wall time (minutes) of every rule."""
    sized = {step.name: {"mem_mb": step.mem_mb, "runtime": step.runtime} for step in PIPELINE}
    return {**sized, **OTHER_RULE_RESOURCES}
