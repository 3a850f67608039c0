"""rlkeep.settled: when the campaign target may leave a completed job out of planning.

The pipeline-level check (the default target plans only unsettled jobs, and each way of
unsettling one brings it back) is in tests/test_many_jobs.py."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkeep.settled import named_in_config, planning_is_forced, unsettled_reason

RECORD = b"job: rl-demo\n"
SHA = hashlib.sha256(RECORD).hexdigest()


def completed_job(root: Path, *, sha: str | None = SHA) -> tuple[Path, list[Path]]:
    job_dir = root / "rl-demo"
    evidence = [job_dir / "chain.json", job_dir / "verify" / "archive.json"]
    for path in evidence:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"status": "completed"}')
        os.utime(path, (1_000, 1_000))
    (job_dir / "REPORT.md").write_text("# rl-demo\n")
    (job_dir / "DONE").write_text(json.dumps({"job": "rl-demo", "record_sha256": sha}))
    os.utime(job_dir / "DONE", (2_000, 2_000))
    return job_dir, evidence


def test_a_completed_job_whose_record_and_evidence_are_unchanged_is_settled(tmp_path: Path) -> None:
    job_dir, evidence = completed_job(tmp_path)
    assert unsettled_reason(job_dir, SHA, evidence) is None


@pytest.mark.parametrize("change, reason", [
    ("no DONE", "no completion record"),
    ("DONE before rlkeep recorded the record", "the record differs"),
    ("record edited", "the record differs"),
    ("DONE not JSON", "unreadable"),
    ("evidence newer", "archive.json is newer than DONE"),
    ("evidence removed", "chain.json is missing"),
    ("no REPORT.md", "REPORT.md is missing"),
])
def test_each_change_since_done_unsettles_the_job_and_says_why(tmp_path: Path, change: str, reason: str) -> None:
    job_dir, evidence = completed_job(tmp_path, sha=None if "before rlkeep" in change else SHA)
    sha = SHA
    if change == "no DONE":
        (job_dir / "DONE").unlink()
    elif change == "record edited":
        sha = hashlib.sha256(RECORD + b"# reviewed\n").hexdigest()
    elif change == "DONE not JSON":
        (job_dir / "DONE").write_text("{half")
    elif change == "evidence newer":
        os.utime(evidence[1], (3_000, 3_000))
    elif change == "evidence removed":
        evidence[0].unlink()
    elif change == "no REPORT.md":
        (job_dir / "REPORT.md").unlink()
    found = unsettled_reason(job_dir, sha, evidence)
    assert found is not None and reason in found, found


def test_a_job_named_by_any_config_value_is_named() -> None:
    assert named_in_config({"reclaim_authorized": "rl-demo"}, "rl-demo")
    assert named_in_config({"allow_transfer": ["other", "rl-demo"]}, "rl-demo")
    assert not named_in_config({"reclaim_authorized": "rl-demo-2", "records": "records"}, "rl-demo")
    assert not named_in_config({"policy": {"max_transfer_bytes": 1}}, "rl-demo")


def test_any_forcing_setting_means_full_planning() -> None:
    quiet = dict(forceall=False, forcetargets=False, forcerun=frozenset(), until=frozenset(), omit_from=frozenset())
    assert not planning_is_forced(SimpleNamespace(**quiet))
    for key, value in [("forceall", True), ("forcetargets", True), ("forcerun", frozenset({"register"})),
                       ("until", frozenset({"archive"})), ("omit_from", frozenset({"reclaim"}))]:
        assert planning_is_forced(SimpleNamespace(**{**quiet, key: value})), key
