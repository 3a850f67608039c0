"""rlkeep.folderstate.remembered: facts out of sync/logs.tar are read once per version of the tarball, on disk,
so the STATUS.json and campaign refresh after every invocation does not reread every run's logs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlkeep import tracker
from rlkeep.folderstate import remembered
from rlkeep.report import run_source_revision
from tests.test_tracker import URL, record, write_logs_tar


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value
    return compute, calls


def test_a_fact_is_computed_once_per_version_of_the_tarball_and_key(tmp_path: Path) -> None:
    job_dir = tmp_path / "rl-demo"
    write_logs_tar(job_dir, {"rl-demo": b"step 1\n"})
    logs_tar = job_dir / "sync" / "logs.tar"
    compute, calls = counting(["abc1234", {"line": 3}])
    for _ in range(3):
        assert remembered(job_dir, "fact", logs_tar, ["a"], compute) == ["abc1234", {"line": 3}]
    assert len(calls) == 1
    # another key (e.g. the record's attempts changed) is another question
    remembered(job_dir, "fact", logs_tar, ["a", "b"], compute)
    assert len(calls) == 2
    # a sync replaces the tarball: a new file, read again
    write_logs_tar(job_dir, {"rl-demo": b"step 1\n"})
    remembered(job_dir, "fact", logs_tar, ["a", "b"], compute)
    assert len(calls) == 3
    # the same file touched in place: read again
    info = logs_tar.stat()
    os.utime(logs_tar, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000))
    remembered(job_dir, "fact", logs_tar, ["a", "b"], compute)
    assert len(calls) == 4


@pytest.mark.parametrize("damage", ["not json", "a list", "no value"])
def test_an_unreadable_memo_is_read_out_of_the_tarball_again_and_rewritten(tmp_path: Path, damage: str) -> None:
    job_dir = tmp_path / "rl-demo"
    write_logs_tar(job_dir, {"rl-demo": b"step 1\n"})
    logs_tar = job_dir / "sync" / "logs.tar"
    compute, calls = counting("v")
    remembered(job_dir, "fact", logs_tar, None, compute)
    memo = job_dir / ".work" / "logs_facts" / "fact.json"
    saved = json.loads(memo.read_text())
    memo.write_text({"not json": "{half", "a list": "[]",
                     "no value": json.dumps({"identity": saved["identity"]})}[damage])
    assert remembered(job_dir, "fact", logs_tar, None, compute) == "v" and len(calls) == 2
    assert json.loads(memo.read_text()) == saved


def test_a_memo_that_cannot_be_written_still_gives_the_fact(tmp_path: Path) -> None:
    job_dir = tmp_path / "rl-demo"
    write_logs_tar(job_dir, {"rl-demo": b"step 1\n"})
    (job_dir / ".work").write_text("a file where the work folder would be")
    compute, calls = counting("v")
    for _ in range(2):
        assert remembered(job_dir, "fact", job_dir / "sync" / "logs.tar", None, compute) == "v"
    assert len(calls) == 2


def test_the_tracker_url_and_revision_come_from_the_memo_once_known(tmp_path: Path, monkeypatch) -> None:
    job_dir = tmp_path / "rl-demo"
    write_logs_tar(job_dir, {"rl-demo": f"wandb: View run at {URL}\n".encode()})
    first = tracker.tracker_of(record(tmp_path), job_dir)
    revision = run_source_revision(job_dir / "sync" / "logs.tar")
    assert first[0] == URL and first[1]["logs"] == "sync/logs.tar"

    def no_reading(*args, **kwargs):
        raise AssertionError("logs.tar was read again")
    monkeypatch.setattr(tracker, "_attempt_logs", no_reading)
    monkeypatch.setattr("rlkeep.report.completion._source_revision_in", no_reading)
    assert tracker.tracker_of(record(tmp_path), job_dir) == first
    assert run_source_revision(job_dir / "sync" / "logs.tar") == revision
