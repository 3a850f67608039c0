"""What rlkeep does for each kind of run: the archive runbook's per-run-type component maps, as data.

A record's `kind` (rl | sft | datagen | eval; default rl) selects one KindSpec from KINDS. The
rules read it through the `get_*` helpers in rules/common.smk, the steps through `spec_for`:
where the trace tree sits under the store and how deep its trials are, which archive tree it
becomes, which record sections make sense, and what the archive keeps and skips (documentation
for people; the skip rule itself is rlkeep.archive.archive_rule, the same for every kind). Which
steps a kind has is the step table's `kinds` column (rlkeep.pipeline.steps_for_kind): this module
is data the records read, and imports no step table.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlkeep.errors import RecordError

# Record sections that only some kinds have: a record of another kind that names one is refused
# (an SFT record with checkpoint.rule would otherwise look as if rlkeep selected something).
KIND_SECTIONS = ("checkpoint", "publish", "register")


@dataclass(frozen=True)
class KindSpec:
    name: str
    description: str
    trace_tree: str | None  # default layout.traces under the store; None: the kind has no trace tree
    trial_depth: int  # path components from the trace tree to a trial dir (<trial>/result.json: 1)
    record_sections: frozenset[str]  # which of KIND_SECTIONS a record of this kind may have
    publish_fields: frozenset[str]  # publish.* destinations this kind can have
    trainer_log_required: bool  # a missing per-attempt trainer stdout fails sync_logs (else it is noted)
    keeps: tuple[str, ...]  # what the archive keeps (runbook crud-archive-run, per run type)
    skips: tuple[str, ...]  # what it skips, and why

    @property
    def archive_tree(self) -> str | None:
        """The archive's folder for the trace tree (the runbook's name, whatever layout.traces says)."""
        return self.trace_tree

    @property
    def expected_archive_trees(self) -> tuple[str, ...]:
        return ("logs/",) + ((f"{self.trace_tree}/",) if self.trace_tree else ())

    def trial_of(self, key: str) -> tuple[str, str] | None:
        """(trial, path inside it) for a key relative to the trace tree, or None above trial depth."""
        parts = key.split("/")
        if len(parts) <= self.trial_depth:
            return None
        return "/".join(parts[: self.trial_depth]), "/".join(parts[self.trial_depth:])


_COMMON_SKIPS = (
    "model weights and checkpoints (*.safetensors, *.pt, *.bin, global_step_*/): they live on the Hub or the store",
    "core and memory dumps (core, core.<pid>, *.hprof)",
    "caches (__pycache__, .venv, pip/uv/conda caches)",
)

RL = KindSpec(
    name="rl",
    description="agentic RL (SkyRL + Harbor, Iris): the full cleanup runbook",
    trace_tree="trace_jobs",
    trial_depth=1,
    record_sections=frozenset({"checkpoint", "publish", "register"}),
    publish_fields=frozenset({"model", "traces"}),
    trainer_log_required=True,
    keeps=("trace_jobs/<trial>/ (every file)", "every attempt's trainer stdout", "ray logs, vllm.log",
           "configs, launch command, metric CSVs", "wandb/"),
    skips=_COMMON_SKIPS + ("*.pane / agent/recording.cast larger than archive.large_terminal_bytes",),
)

SFT = KindSpec(
    name="sft",
    description="supervised fine-tuning (LLaMA-Factory / axolotl, SLURM): logs, configs, wandb",
    trace_tree=None,
    trial_depth=1,
    record_sections=frozenset(),
    publish_fields=frozenset(),
    trainer_log_required=False,
    keeps=("logs/*.out per-step SLURM logs (and *.err)", "trainer_log.jsonl", "the rendered config YAML", "wandb/"),
    skips=_COMMON_SKIPS,
)

DATAGEN = KindSpec(
    name="datagen",
    description="Harbor trace generation: the one-level trace tree and the harbor run log",
    trace_tree="trace_jobs",
    trial_depth=1,
    record_sections=frozenset({"publish"}),
    publish_fields=frozenset({"traces"}),
    trainer_log_required=False,
    keeps=("trace_jobs/<trial>/ (every file)", "the harbor run log", "configs"),
    skips=_COMMON_SKIPS + ("*.pane / agent/recording.cast larger than archive.large_terminal_bytes",),
)

EVAL = KindSpec(
    name="eval",
    description="agentic Harbor evaluation: eval_jobs/<name>/<trial>/ plus vllm.log and job.log",
    trace_tree="eval_jobs",
    trial_depth=2,
    record_sections=frozenset(),
    publish_fields=frozenset(),
    trainer_log_required=False,
    keeps=("eval_jobs/<name>/<trial>/{result.json, config.json, agent/trajectory.json, verifier/, manifest.json, "
           "lock.json, trial.log}", "top-level vllm.log and job.log"),
    skips=_COMMON_SKIPS + ("recording.cast / *.pane larger than archive.large_terminal_bytes (small ones are kept)",),
)

KINDS: dict[str, KindSpec] = {spec.name: spec for spec in (RL, SFT, DATAGEN, EVAL)}
DEFAULT_KIND = "rl"


def spec_for(kind: str | None) -> KindSpec:
    """The component map of `kind` (None: the default, rl)."""
    name = DEFAULT_KIND if kind is None else kind
    try:
        return KINDS[name]
    except KeyError:
        raise RecordError(f"unknown run kind {name!r}; expected one of: {', '.join(KINDS)}") from None
