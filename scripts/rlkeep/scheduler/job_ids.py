"""The job-id shapes a record's chain may hold, each with the words a record error uses:
Iris job ids (`/<user>/<job>[/...]`, in the record user's namespace; `scheduler: none` records
keep Iris-shaped ids too) and SLURM job ids (`12345`, or `12345_7` for an array task)."""
from __future__ import annotations

import re

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
