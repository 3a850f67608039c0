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
    (job_dir / "DONE").write_text(json.dumps({"job": "rl-demo", "kind": "rl", "record_sha256": sha}))
    os.utime(job_dir / "DONE", (2_000, 2_000))
    return job_dir, evidence


def evidence_of(evidence: list[Path]):
    """The evidence of the kind DONE names (rl here), as rlkeep.pipeline.evidence_of gives it."""
    return lambda kind: evidence if kind == "rl" else []


def test_a_completed_job_whose_record_and_evidence_are_unchanged_is_settled(tmp_path: Path) -> None:
    job_dir, evidence = completed_job(tmp_path)
    assert unsettled_reason(job_dir, SHA, evidence_of(evidence)) is None


@pytest.mark.parametrize("change, reason", [
    ("no DONE", "no completion record"),
    ("DONE before rlkeep recorded the record", "the record differs"),
    ("record edited", "the record differs"),
    ("DONE not JSON", "unreadable"),
    ("evidence newer", "archive.json is newer than DONE"),
    ("evidence removed", "chain.json is missing"),
    ("no REPORT.md", "REPORT.md is missing"),
    ("DONE without a kind", "names no run kind"),
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
    elif change == "DONE without a kind":
        (job_dir / "DONE").write_text(json.dumps({"job": "rl-demo", "record_sha256": SHA}))
        os.utime(job_dir / "DONE", (2_000, 2_000))
    found = unsettled_reason(job_dir, sha, evidence_of(evidence))
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


def test_the_evidence_of_a_kind_is_what_done_waits_on() -> None:
    """rlkeep.pipeline.evidence_of is the list rules/common.smk gives DONE and rlkeep.settled checks."""
    from rlkeep.kinds import KINDS
    from rlkeep.pipeline import STEP_BY_NAME, evidence_of

    for name, spec in KINDS.items():
        evidence = evidence_of("rl-demo", name)
        assert list(evidence) == list(spec.steps), name
        assert all(path == f"rl-demo/{STEP_BY_NAME[step].evidence}" for step, path in evidence.items())
    assert "rl-demo/verify/archive.json" in evidence_of("rl-demo", "sft").values()
    assert "rl-demo/verify/model.json" not in evidence_of("rl-demo", "sft").values()
