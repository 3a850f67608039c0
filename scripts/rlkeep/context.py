"""What a step function is handed: the StepContext (job, validated record, named inputs and
outputs, settings, the invocation's config), built from Snakemake's `snakemake` object; the one
authorization answer the Snakefile and the steps share; and the shape of every sentinel.

Every step function is `<rule>_step(ctx: StepContext)` (rlkeep.pipeline says where it lives);
rlkeep.runner calls it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkeep.records import JobRecord, load_record, record_path


@dataclass
class StepContext:
    job: str
    record: JobRecord
    data_root: Path
    inputs: dict[str, Path]
    outputs: dict[str, Path]
    settings: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def job_dir(self) -> Path:
        return self.data_root / self.job

    def work_dir(self, name: str) -> Path:
        """A private scratch folder of this step, kept across reruns (resume), under <job>/.work/."""
        path = self.job_dir / ".work" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def authorized(self, key: str) -> bool:
        """Authority granted on the command line for this job (see is_authorized)."""
        return is_authorized(self.config, key, self.job)


def is_authorized(config: Mapping[str, Any], key: str, job: str) -> bool:
    """Authority granted on the command line for `job`: `--config key=<job>` names exactly this job;
    a list (`--config 'key=[<job>, <other>]'`) grants it to each job it names. The Snakefile
    (rules/common.smk) and the steps (StepContext.authorized) both ask this function."""
    value = config.get(key)
    if isinstance(value, (list, tuple)):
        return job in [str(item) for item in value]
    return value is not None and str(value) == job


def context_from_snakemake(smk: Any) -> StepContext:
    config = dict(smk.config)
    data_root = Path.cwd()
    job = smk.wildcards["job"]
    records_dir = data_root / str(config.get("records", "records"))
    record = load_record(record_path(records_dir, job))

    def named(io: Any) -> dict[str, Path]:
        return {name: Path(value) for name, value in io.items() if isinstance(value, str)}

    return StepContext(
        job=job,
        record=record,
        data_root=data_root,
        inputs=named(smk.input),
        outputs=named(smk.output),
        settings=dict(smk.params.get("settings") or {}),
        config=config,
    )


def sentinel(status: str, **evidence: Any) -> dict[str, Any]:
    """Every sentinel is JSON with a status and its evidence (docs/contract.md §4)."""
    if status not in {"completed", "not_applicable"}:
        raise ValueError(status)
    return {"status": status, **evidence}


def not_applicable(reason: str, **evidence: Any) -> dict[str, Any]:
    return sentinel("not_applicable", reason=reason, **evidence)
