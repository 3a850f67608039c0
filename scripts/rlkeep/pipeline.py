"""The one step table: every rule that runs a package function, what it runs, for which run kinds,
what proves it, and what it needs from a cluster.

Follow a rule to its code: `rules/<stage>.smk` names the rule; its row here names the function
(a real import: an editor or a type checker goes straight to it); `scripts/run_step.py` hands the
Snakemake job to `rlkeep.steps.run_from_snakemake`, which picks the row by `snakemake.rule`.

Everything else reads this table rather than restating it:
- STEPS (the rows with `evidence`): the steps DONE, STATUS.json, REPORT.md and the campaign page
  report on, in this order (rlkeep.report);
- `kinds`: which steps apply to each run kind (rlkeep.kinds.KindSpec.steps), so a kind's DONE
  inputs and reclamation inputs follow (rules/common.smk);
- `verify`: the verify/<name>.json sentinels reclamation waits on (KindSpec.verify_sentinels);
- `threads`, `mem_mb`, `runtime`: profiles/slurm/profile.yaml's set-threads and set-resources
  (tests/test_pipeline_table.py keeps the two equal; `rlkeep install-profiles` sizes a rule the
  file does not name from this table).

The function is not a Snakemake `params` entry, so renaming or moving it never reruns a finished
step. This module imports every step module: modules below it (kinds, report, steps) read the
table when called, never at import time.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkeep.archive import archive_step, verify_archive_step
from rlkeep.checkpoints import list_checkpoints_step, select_checkpoint_step
from rlkeep.errors import RlkeepError
from rlkeep.export import export_step
from rlkeep.generation_stats import generation_stats_step
from rlkeep.hub import link_model_card_step, publish_model_step, publish_traces_step, stage_model_step
from rlkeep.metrics import metric_surface_step, trial_table_step
from rlkeep.reclaim import reclaim_step
from rlkeep.registry import register_step
from rlkeep.report import done_step
from rlkeep.scheduler import capture_chain_step, stop_retries_step
from rlkeep.sync import sync_logs_step, sync_traces_step
from rlkeep.traces import stage_traces_step

if TYPE_CHECKING:
    from rlkeep.steps import StepContext

ALL_KINDS = frozenset({"rl", "sft", "datagen", "eval"})
RL = frozenset({"rl"})
TRACE_KINDS = frozenset({"rl", "datagen", "eval"})  # kinds with a trace tree
TRACE_PUBLISHING = frozenset({"rl", "datagen"})  # kinds that can publish a trace dataset


@dataclass(frozen=True)
class Step:
    name: str  # the Snakemake rule (rules/*.smk) and the step's name in DONE
    function: Callable[[StepContext], None]
    kinds: frozenset[str]  # the run kinds (rlkeep.kinds) it applies to
    mem_mb: int  # SLURM memory and wall time (minutes), sized for an 8B run with a few hundred
    runtime: int  # thousand trace objects; memory is bounded by rlkeep's streaming, not run size
    threads: int = 1  # a second core for hashing, compression or tensor copies (SLURM cpus-per-task)
    # the file (relative to <job>/) whose status DONE reports; None: a helper rule (staging, DONE itself)
    evidence: str | None = None
    verify: str | None = None  # writes verify/<verify>.json, a sentinel reclamation waits on
    remaining: str = ""  # what an operator does when this step is blocked or pending
    upstream: tuple[str, ...] = ()  # rules of this step only (e.g. staging) whose failure blocks it
    # other steps whose evidence it takes when the record names publish destinations (without them
    # the publication steps only write not_applicable): it is blocked while one of them is
    needs: tuple[str, ...] = ()


PIPELINE: tuple[Step, ...] = (
    Step("capture_chain", capture_chain_step, ALL_KINDS, 1000, 15, evidence="chain.json",
         remaining="make the Iris chain readable (iris on PATH, cluster reachable) and rerun"),
    Step("stop_retries", stop_retries_step, ALL_KINDS, 1000, 15, evidence="retries.json",
         remaining="stop the run's pending retries, then rerun"),
    Step("sync_logs", sync_logs_step, ALL_KINDS, 4000, 120, evidence="sync/logs.manifest.json",
         remaining="make every attempt's trainer log readable, then rerun"),
    Step("sync_traces", sync_traces_step, TRACE_KINDS, 4000, 480, threads=2, evidence="sync/trace_jobs.manifest.json",
         remaining="fix the trace prefix or the skip policy named in the log, then rerun"),
    Step("list_checkpoints", list_checkpoints_step, RL, 1000, 30, evidence="checkpoint/candidates.json",
         remaining="make the store's ckpts/ and exports/ listable, then rerun"),
    Step("metric_surface", metric_surface_step, RL, 4000, 60, evidence="metrics/metrics.csv",
         remaining="fix the trainer log named in the log, then rerun"),
    Step("trial_table", trial_table_step, RL, 4000, 120, evidence="metrics/trials.csv",
         remaining="fix the trace tarball named in the log (rerun sync_traces), then rerun"),
    Step("generation_stats", generation_stats_step, RL, 2000, 60, evidence="metrics/generation.md",
         remaining="fix the trainer log tarball named in the log (rerun sync_logs), then rerun"),
    Step("select_checkpoint", select_checkpoint_step, RL, 1000, 15, evidence="checkpoint/selected.json",
         remaining="declare checkpoint.rule in the record (ema_max, latest or step) from the listed candidates, "
                   "then rerun"),
    Step("export_model", export_step, RL, 16000, 240, threads=2, evidence="export.json",
         remaining="consolidate the selected checkpoint as the log says (an export job for Megatron), then rerun"),
    Step("stage_model", stage_model_step, RL, 4000, 120),
    Step("publish_model", publish_model_step, RL, 4000, 480, evidence="verify/model_upload.json",
         verify="model_upload", upstream=("stage_model",),
         remaining="fix the publication problem named in the log (staging is kept), then rerun: the upload resumes"),
    Step("stage_traces", stage_traces_step, TRACE_PUBLISHING, 8000, 240, threads=2),
    Step("publish_traces", publish_traces_step, TRACE_PUBLISHING, 4000, 240, evidence="verify/traces.json",
         verify="traces", upstream=("stage_traces",), needs=("sync_traces",),
         remaining="fix the trace dataset problem named in the log (coverage, Hub), then rerun"),
    Step("link_model_card", link_model_card_step, RL, 4000, 240, evidence="verify/model.json", verify="model",
         needs=("publish_model", "publish_traces"),
         remaining="the model card links the trace dataset only once verify/traces.json exists: fix what holds "
                   "the traces back (named in the reason), then rerun; the link is one commit that changes "
                   "README.md only"),
    Step("register", register_step, RL, 1000, 15, evidence="register.json",
         remaining="resolve the registry problem named in the log, then rerun"),
    Step("archive", archive_step, ALL_KINDS, 4000, 240, threads=2, evidence="archive/MANIFEST",
         remaining="fix the archive problem named in the log, then rerun"),
    Step("verify_archive", verify_archive_step, ALL_KINDS, 2000, 240, evidence="verify/archive.json",
         verify="archive", remaining="make archive.dest reachable or fix the mismatch named in the log, then rerun"),
    Step("reclaim", reclaim_step, ALL_KINDS, 2000, 240, evidence="reclaim.json",
         remaining="rerun with --config reclaim_authorized=<job> once every verification passed"),
    Step("done", done_step, ALL_KINDS, 1000, 15),
)

STEPS: tuple[Step, ...] = tuple(step for step in PIPELINE if step.evidence is not None)
STEP_BY_NAME: dict[str, Step] = {step.name: step for step in PIPELINE}

# Rules that run no package step: `campaign` has its own adapter (scripts/campaign_step.py, no
# job wildcard), `all` is the default target. Their SLURM sizes are here so the profile has them.
OTHER_RULE_RESOURCES: dict[str, dict[str, int]] = {"campaign": {"mem_mb": 1000, "runtime": 15}}


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
    for step in PIPELINE:
        if f"{step.function.__module__}:{step.function.__name__}" == target:
            return step
    raise RlkeepError(f"step target {target!r}: no row of rlkeep.pipeline.PIPELINE runs it; expected a rule name "
                      f"({', '.join(STEP_BY_NAME)}) or rlkeep.<module>:<function> of one")


def steps_for_kind(kind: str) -> tuple[str, ...]:
    """The names of STEPS that apply to a run kind, in table order."""
    return tuple(step.name for step in STEPS if kind in step.kinds)


def slurm_threads() -> dict[str, int]:
    """set-threads of the SLURM profile: the rules that use more than one core."""
    return {step.name: step.threads for step in PIPELINE if step.threads > 1}


def slurm_resources() -> dict[str, dict[str, int]]:
    """set-resources of the SLURM profile: memory (MB) and wall time (minutes) of every rule."""
    sized = {step.name: {"mem_mb": step.mem_mb, "runtime": step.runtime} for step in PIPELINE}
    return {**sized, **OTHER_RULE_RESOURCES}
