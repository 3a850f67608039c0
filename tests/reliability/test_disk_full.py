"""Disk full: the data root on a small tmpfs the test mounts, nearly filled by a ballast file, so the
run's writers (sync, export, staging, archive) hit the wall one after another. Each failure names the
full path and what it needed; nothing partial passes for complete and no temp file stays; after the
test frees space (shrinks the ballast) the same command goes on, and the end equals a clean run's.

Guards: rlkeep.diskspace.require_free, called before sync (listed bytes), the checkpoint download
(bytes still to fetch) and the archive (kept bytes); runner.run_step's ENOSPC message for the writes
whose size is not known up front; tarstream.TarOutput removing its .part when closing the tar itself fails.
"""
from __future__ import annotations

import errno
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlkeep.context import StepContext
from rlkeep.diskspace import free_bytes
from rlkeep.runner import _close_log, run_step
from rlkeep.storage import open_store
from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, SOAK, Reference, clean_reference, leftovers, output_problems, read_json, run_logged, seed, stable_done,
    tar_digests,
)
from tests.support.hub import hub_server  # noqa: F401 - fixture

FS_MB = 48
FIRST_FREE = 1 << 20  # less than either sync tar of the example (about 2 MB each)
STEP_FREE = 5 << 19  # what each round frees (2.5 MB: a few rounds, one writer refused in each)


@pytest.fixture(scope="session")
def reference(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return clean_reference(s3_server, tmp_path_factory.mktemp("reference"))


@pytest.fixture
def small_data_root(tmp_path: Path):
    root = tmp_path / "data"
    root.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m,mode=0755", "tmpfs", str(root)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {FS_MB} MB tmpfs here ({mounted.stderr.strip()}): the disk-full test needs root "
                    "and mount(8)")
    try:
        (root / "records").mkdir()
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _failed_steps(stderr: str, data_root: Path) -> list[tuple[str, str]]:
    """(rule, the step's own last 'rlkeep:' line) of every rule Snakemake reports as failed."""
    failed = []
    # A step that finished can leave the disk too full for Snakemake's own record of it: Snakemake
    # then fails the run naming its metadata folder in the data root (and reports the rule as failed
    # too), and the rerun redoes that job.
    metadata_errors = [line for line in stderr.splitlines() if line.startswith("Error recording metadata for finished job")]
    for rule, log in re.findall(r"Error in rule (\w+):\n(?:.*\n)*?\s+log: (\S+)", stderr):
        log_path = data_root / log
        lines = log_path.read_text(errors="replace").splitlines() if log_path.is_file() else []
        said = next((line for line in reversed(lines) if line.startswith("rlkeep:")), None)
        if said is None and metadata_errors and lines and re.search(rf"INFO step {rule} \(.*\) done in ", lines[-1]):
            continue  # the step itself finished; what failed is Snakemake's record of it, counted below
        if said is None:  # the log was on the full disk: the step said it on Snakemake's stderr
            said = next((line for line in stderr.splitlines()
                         if line.startswith("rlkeep:") and f"[step {rule}; " in line), None)
        # neither: the log's tail, so the assertion shows what happened instead
        failed.append((rule, said if said is not None else "\n".join(lines[-30:])))
    failed.extend(("snakemake metadata", line) for line in metadata_errors)
    return failed


def test_disk_full_at_each_writer_then_the_same_command_completes(small_data_root: Path, bucket: str, iris,
                                                                  hub_server, reference: Reference) -> None:
    data_root = small_data_root
    scenario = seed(data_root, bucket, iris, hub_server)
    ballast = data_root / "ballast"
    with open(ballast, "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, free_bytes(data_root) - FIRST_FREE)
    refusals: list[tuple[str, str]] = []
    for _ in range(40):
        result = run_logged(scenario, f"{JOB}/DONE")
        if result.returncode == 0:
            break
        failed = _failed_steps(result.stderr, data_root)
        assert failed, result.stderr[-4000:]
        for rule, said in failed:
            # which path is full and how much it needed (early refusal) or what was left (mid-write)
            assert str(data_root) in said and ("needs" in said or "no space left" in said.lower()), (
                rule, said, result.stderr[-3000:])
            refusals.append((rule, said))
        assert output_problems(scenario.job_dir) == [], failed
        assert leftovers(scenario.job_dir) == [], failed
        size = ballast.stat().st_size
        os.truncate(ballast, max(0, size - STEP_FREE))  # the operator frees some space
    else:
        pytest.fail(f"the run did not finish after {len(refusals)} refusals")
    ballast.unlink()
    rules = {rule for rule, _ in refusals}
    figures_log.record("disk_full", refusals=len(refusals), steps=sorted(rules))
    assert {"sync_logs", "sync_traces"} <= rules, refusals
    assert any("needs" in said for _, said in refusals), refusals
    assert stable_done(scenario) == reference.done
    assert tar_digests(scenario.job_dir) == reference.tar_sha256
    assert {f["path"]: f["sha256"] for f in read_json(scenario.job_dir / "export.json")["files"]} == reference.export_files
    assert leftovers(scenario.job_dir) == []


class _FullDisk:
    """A sink on a full filesystem: every write fails with ENOSPC."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    def tell(self) -> int:
        return 0

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def truncate(self, size: int | None = None) -> int:
        return 0


def test_a_read_into_a_full_disk_is_not_retried_nor_called_a_store_failure(s3_server, bucket: str) -> None:
    """Found by removing require_free: the store's read retried ENOSPC 4 times and reported
    'read failed' naming the object, not the full local path. Guard: storage.read_into re-raises it."""
    store = open_store(f"s3://{bucket}/disk-full")
    store.put_bytes("weights.bin", b"x" * 4096)
    sink = _FullDisk()
    with pytest.raises(OSError) as raised:
        store.read_into("weights.bin", sink)
    assert raised.value.errno == errno.ENOSPC and sink.writes == 1


class _LogOnAFullDisk(io.StringIO):
    """A step's log on the filesystem that just filled up: nothing can be appended to it."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def fills_the_disk(ctx: StepContext) -> None:
    """A step (run by reference, as the table's rows are) whose model folder fills the disk."""
    model = ctx.outputs["model"]
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    raise OSError(errno.ENOSPC, "No space left on device", str(ctx.outputs["export"]))


def test_a_step_that_fills_the_disk_frees_its_directory_output_and_still_says_why(tmp_path: Path, monkeypatch,
                                                                                  capfd) -> None:
    """Found by CI: export_model filled the disk with its model folder, then failed writing export.json;
    its 'rlkeep:' line could not be appended to the log on the same full disk, so the step failed
    without a reason. Guards: run_step removes directory outputs before saying why, and says it on
    Snakemake's stderr when the log cannot take it."""
    model = tmp_path / "job" / "model"
    export = tmp_path / "job" / "export.json"

    monkeypatch.setattr(sys, "stderr", _LogOnAFullDisk())
    ctx = StepContext(job="job", record=None, data_root=tmp_path, inputs={},
                      outputs={"model": model, "export": export})
    assert run_step("export_model", fills_the_disk, ctx) == 1
    assert not model.exists() and not export.exists()
    said = capfd.readouterr().err
    assert said.startswith("rlkeep: export_model") and f"no space left on the filesystem of {export}" in said, said
    assert said.rstrip().endswith("[step export_model; its log could not take this line]"), said


class _UnflushableLog(io.StringIO):
    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_step_that_finished_keeps_its_status_when_its_log_cannot_be_flushed(monkeypatch, capfd) -> None:
    """Found by CI: export_model finished with the disk full to the last block; flushing its log at exit
    failed and the interpreter turned status 0 into a failure with no reason. Guard: _close_log keeps
    the status, gives the standard streams back and says what happened on Snakemake's stderr."""
    log = _UnflushableLog()
    monkeypatch.setattr(sys, "stdout", log)
    monkeypatch.setattr(sys, "stderr", log)
    _close_log(log, "export_model", 0)
    assert sys.stderr is sys.__stderr__ and sys.stdout is sys.__stdout__
    said = capfd.readouterr().err
    assert "rlkeep: step export_model done; its log could not take its last lines" in said, said


def test_a_finished_step_whose_record_snakemake_could_not_write_counts_as_that_failure(tmp_path: Path) -> None:
    """Seen in CI: export_model finished, Snakemake could not record its metadata on the full disk,
    space came free (another step's failure removed its outputs) and Snakemake's cleanup of the job
    then reported the rule as failed too. That is one refusal, Snakemake's, naming the data root."""
    log = tmp_path / "rl-demo" / "logs" / "export_model.log"
    log.parent.mkdir(parents=True)
    log.write_text("2026-12-02T12:33:52 INFO step export_model (rlkeep.export.step:export_model_step) for job rl-demo\n"
                   "2026-12-02T12:33:53 INFO step export_model (rlkeep.export.step:export_model_step) done in 1.3s\n")
    metadata = (f"Error recording metadata for finished job ([Errno 28] No space left on device). "
                f"Please ensure write permissions for the directory {tmp_path}/.snakemake")
    stderr = (f"WorkflowError:\n{metadata}\nError in rule export_model:\n    jobid: 7\n"
              f"    log: rl-demo/logs/export_model.log (check log file(s) for error details)\n")
    assert _failed_steps(stderr, tmp_path) == [("snakemake metadata", metadata)]
    # without Snakemake's metadata error, a finished step reported as failed stays unexplained
    unexplained = _failed_steps(stderr.replace(metadata, "something else"), tmp_path)
    assert [rule for rule, _ in unexplained] == ["export_model"] and "rlkeep:" not in unexplained[0][1]
