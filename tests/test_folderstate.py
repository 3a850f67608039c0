"""rlkeep.folderstate: the job fingerprint behind the refresh of STATUS.json and the campaign pages."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlkeep.folderstate import folder_entries, job_fingerprint, refresh_lock


def job(tmp_path: Path) -> tuple[Path, Path]:
    record = tmp_path / "records" / "rl-a.yaml"
    record.parent.mkdir()
    record.write_text("job: rl-a\n")
    job_dir = tmp_path / "rl-a"
    (job_dir / "stage" / "model" / "training_logs").mkdir(parents=True)
    (job_dir / "verify").mkdir()
    (job_dir / "DONE").write_text("{}")
    return record, job_dir


def test_the_listing_goes_three_levels_deep_and_leaves_work_out(tmp_path: Path) -> None:
    _, job_dir = job(tmp_path)
    (job_dir / ".work" / "logs_facts").mkdir(parents=True)
    (job_dir / "stage" / "model" / "training_logs" / "trainer.log").write_text("x")
    names = [entry[0] for entry in folder_entries(job_dir)]
    assert names == ["DONE", "stage", "stage/model", "stage/model/training_logs", "verify"]


def test_every_change_the_pages_can_show_changes_the_fingerprint(tmp_path: Path) -> None:
    record, job_dir = job(tmp_path)
    seen = {job_fingerprint(record, job_dir)}

    def changed() -> bool:
        fingerprint = job_fingerprint(record, job_dir)
        new = fingerprint not in seen
        seen.add(fingerprint)
        return new

    assert not changed()                                                     # stable when nothing changes
    (job_dir / "verify" / "archive.json").write_text('{"status": "completed"}')
    assert changed()                                                         # a new sentinel
    (job_dir / "verify" / "archive.json").write_text('{"status": "completed", "x": 1}')
    assert changed()                                                         # rewritten (size)
    replacement = job_dir / "verify" / ".tmp"
    replacement.write_text('{"status": "completed", "x": 2}')
    os.replace(replacement, job_dir / "verify" / "archive.json")
    assert changed()                                                         # same size, new inode
    (job_dir / "stage" / "model" / "training_logs" / "trainer.log").write_text("x")
    assert changed()                                                         # the deepest thing read
    record.write_text("job: rl-a\n# reviewed\n")
    assert changed()                                                         # the record
    (job_dir / ".work").mkdir()
    (job_dir / ".work" / "memo").write_text("x")
    assert not changed()                                                     # rlkeep's own memos
    assert job_fingerprint(record, job_dir, {"revision": "b"}) != job_fingerprint(record, job_dir, {"revision": "a"})


HOLD_NONBLOCKING = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(3)
"""


def test_the_refresh_lock_keeps_a_second_refresh_out_until_released(tmp_path: Path) -> None:
    lock = tmp_path / "job" / ".work" / "views.lock"

    def other_process_gets_it() -> bool:
        return subprocess.run([sys.executable, "-c", HOLD_NONBLOCKING, str(lock)]).returncode == 0

    with refresh_lock(lock):
        assert not other_process_gets_it()
    assert other_process_gets_it()


def test_a_lock_held_too_long_is_waited_for_only_so_long(tmp_path: Path, capsys) -> None:
    lock = tmp_path / "views.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_FOR_A_WHILE, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with refresh_lock(lock, wait_s=0.3) as held:
            assert held is False
        assert "still held after 0.3 s; refreshing without it" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    with refresh_lock(lock, wait_s=0.3) as held:   # released with its holder's death
        assert held is True


HOLD_FOR_A_WHILE = """
import fcntl, sys, time
with open(sys.argv[1], "a") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(60)
"""
