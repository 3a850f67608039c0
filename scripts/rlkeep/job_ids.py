"""What a record's `scheduler:` asks of the record itself: the shape of its chain's job ids, each
with the words a record error uses, and whether it must name a `cluster:`. Iris job ids
(`/<user>/<job>[/...]`, in the record user's namespace; `scheduler: none` records keep Iris-shaped
ids too) and SLURM job ids (`12345`, or `12345_7` for an array task).

Data rlkeep.records reads without importing a scheduler (rlkeep.scheduler imports the records);
tests/test_records.py keeps its keys equal to rlkeep.scheduler.SCHEDULERS and the schema's enum.
"""
from __future__ import annotations

import re
from collections.abc import Callable

IRIS_JOB_ID = re.compile(r"^(/[A-Za-z0-9][A-Za-z0-9._-]*){2,}$")
SLURM_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


def expected_iris_job_id(job_id: str, user: str, scheduler: str) -> str | None:
    """None when job_id is an Iris job id in user's namespace; else what was expected."""
    user_prefix = f"/{user}/"
    if not IRIS_JOB_ID.fullmatch(job_id):
        return f"expected an Iris job id like {user_prefix}<job> (scheduler is {scheduler})"
    if not job_id.startswith(user_prefix):
        return f"expected an Iris job id in the user's namespace, starting with {user_prefix}"
    return None


def expected_slurm_job_id(job_id: str) -> str | None:
    """None when job_id is a SLURM job id or array task id; else what was expected."""
    if not SLURM_JOB_ID.fullmatch(job_id):
        return "expected a SLURM job id like 12345 or an array task like 12345_7 (scheduler is slurm)"
    return None


# {scheduler: (job_id, user) -> None when job_id has that scheduler's shape, else what was expected}
CHAIN_ID_CHECKS: dict[str, Callable[[str, str], str | None]] = {
    "iris": lambda job_id, user: expected_iris_job_id(job_id, user, "iris"),
    "none": lambda job_id, user: expected_iris_job_id(job_id, user, "none"),
    "slurm": lambda job_id, user: expected_slurm_job_id(job_id),
}
CLUSTER_REQUIRED = frozenset({"iris"})  # a record naming one of these schedulers must name its cluster
