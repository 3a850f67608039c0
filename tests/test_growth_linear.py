"""Every step that walks trials, objects or paths grows linearly with them.

The steps run as functions on two synthetic Harbor-shaped trace trees of N and 4N trials with
the same share of findings; the user CPU time of each step at 4N must stay within GROWTH_BOUND
times its time at N. CPU time, because a busy machine slows the wall clock; user time, because
the kernel's time creating and removing files swings with other processes' I/O on a shared
machine, while a scan per member in our code shows in user time.
Linear growth gives 4 (less while fixed costs count), growth with the square of the size 16.
A step over the bound is measured once more at both sizes and judged on the lower times, so
one noisy measurement does not fail the test while a super-linear step still does.
"""
from __future__ import annotations

import gc
import io
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlkeep.archive.manifest import MANIFEST_MEMBER, parse_manifest
from rlkeep.archive.step import archive_sync_tars
from rlkeep.context import StepContext
from rlkeep.metrics.report import TRIAL_FILES
from rlkeep.metrics.step import trial_table_step
from rlkeep.metrics.trials import trial_from_result
from rlkeep.reclaim import plan_reclaim, preservation
from rlkeep.records import validate_record_data
from rlkeep.restore.rehearsal import is_result_member, trial_rows_problems, unaccounted_sync_members
from rlkeep.restore.run import restore_archive
from rlkeep.restore.source import location_from_url
from rlkeep.restore.step import compared_member
from rlkeep.restore.targets import ComparingTarget
from rlkeep.jsonio import read_json
from rlkeep.sync.step import sync_traces_step
from rlkeep.traces import build_trace_dataset
from tests.support.growth_tree import trace_objects

N_TRIALS = 2000  # about 8,000 members; large enough that a scan per member dominates at 4N
GROWTH_BOUND = 6.0
JOB = "rl-growth"
SUMMARY = {"run": JOB, "kind": "rl", "cluster": "cw-test", "jobs": [f"/demo/{JOB}"],
           "first_submitted": "2026-01-02T03:04:05Z", "last_finished": "2026-01-05T06:07:08Z", "tracker": None}
RECORD_DATA = {"job": JOB, "user": "demo", "scheduler": "none", "chain": [f"/demo/{JOB}"],
               "store": f"s3://bucket/iris/{JOB}", "checkpoint": {"interval": 20}}
RECORD = validate_record_data(RECORD_DATA, Path(f"records/{JOB}.yaml"))


def _write_tar(path: Path, objects: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for key in sorted(objects):
            info = tarfile.TarInfo(key)
            info.size = len(objects[key])
            tar.addfile(info, io.BytesIO(objects[key]))
    return path


class Run:
    """One synthetic run's folder and the steps that walk it, in pipeline order."""

    def __init__(self, root: Path, n_trials: int) -> None:
        self.root, self.n_trials = root, n_trials
        self.store = root / "store"  # the record's store root: the trace tree under layout.traces
        self.record = validate_record_data({**RECORD_DATA, "store": self.store.as_uri()}, Path(f"records/{JOB}.yaml"))
        for key, data in trace_objects(n_trials).items():
            path = self.store / self.record.layout["traces"] / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        self.sync = root / "sync"
        self.sync.mkdir()
        self.logs_tar = _write_tar(self.sync / "logs.tar", {"attempts/rl-growth/trainer.log": b"step 1 reward 0.1\n"})
        self.traces_tar = self.sync / "trace_jobs.tar"
        self.archive = root / "archive" / JOB
        self.synced: list[dict[str, Any]] = []

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [("sync", self.sync_traces), ("archive", self.build_archive), ("trial_table", self.trial_table),
                ("restore_rehearsal", self.rehearse_restore), ("trace_dataset", self.trace_dataset),
                ("reclaim_plan", self.reclaim_plan)]

    def sync_traces(self) -> None:
        """The step as the pipeline runs it: listing, run-space check, tar, manifest."""
        manifest = self.sync / "trace_jobs.manifest.json"
        sync_traces_step(StepContext(job=JOB, record=self.record, data_root=self.root, inputs={},
                                     outputs={"tar": self.traces_tar, "manifest": manifest},
                                     settings={"workers": 4, "max_inflight_mb": 32}))
        synced = read_json(manifest)
        assert synced["objects_synced"] == synced["objects_listed"] and synced["trials_completed"] == self.n_trials
        self.synced = synced["objects"]

    def build_archive(self) -> None:
        shutil.rmtree(self.archive, ignore_errors=True)
        self.archive.mkdir(parents=True)
        work = self.root / ".work" / "archive"
        work.mkdir(parents=True, exist_ok=True)
        evidence = archive_sync_tars(self.archive / f"{JOB}_archive.tgz", self.archive / MANIFEST_MEMBER,
                                     trees=[("logs", self.logs_tar), ("trace_jobs", self.traces_tar)],
                                     extra_files=[], summary=SUMMARY, large_threshold=1 << 20, work=work)
        assert evidence["kept_files"] == len(self.synced) + 1

    def trial_table(self) -> None:
        outputs = {name: self.root / "metrics" / name for name in TRIAL_FILES}
        trial_table_step(StepContext(job=JOB, record=RECORD, data_root=self.root, inputs={"traces": self.traces_tar},
                                     outputs={"trials": outputs["trials.csv"], **outputs}, settings={}))

    def rehearse_restore(self) -> None:
        tree = self.root / "restored"
        shutil.rmtree(tree, ignore_errors=True)
        rows: list[dict[str, Any]] = []
        target = ComparingTarget(tree, compared_member, reads=lambda member: is_result_member(member, "trace_jobs"),
                                 read=lambda member, data: rows.append(trial_from_result(member.split("/")[1], data)))
        restored = restore_archive(location_from_url(self.archive.parent.as_uri(), JOB), target)
        _, entries = parse_manifest((self.archive / MANIFEST_MEMBER).read_text(), "MANIFEST")
        problems = restored.problems + unaccounted_sync_members(
            [("logs", self.logs_tar), ("trace_jobs", self.traces_tar)], {e.member: e for e in entries})
        problems += trial_rows_problems(rows, self.root / "metrics" / "trials.csv")
        assert not problems and len(rows) == self.n_trials, problems[:3]

    def trace_dataset(self) -> None:
        manifest = build_trace_dataset(self.traces_tar, self.root / "dataset")
        assert manifest["trials_exported"] == self.n_trials

    def reclaim_plan(self) -> None:
        traces = {"status": "completed", "source": RECORD.url_of("trace_jobs"), "objects_listed": len(self.synced),
                  "objects_synced": len(self.synced), "objects": self.synced, "objects_skipped": []}
        plan = plan_reclaim(RECORD, {"traces": traces})
        _, entries = parse_manifest((self.archive / MANIFEST_MEMBER).read_text(), "MANIFEST")
        classes = preservation(plan["objects"], record=RECORD, manifests={"traces": traces},
                               archive_entries={e.member: e.reason for e in entries},
                               sentinels={"archive": {"status": "completed"}, "restore": {"status": "completed"}})
        assert [c["keys"] for c in classes] == [len(self.synced)]


def cpu_seconds(run: Run) -> dict[str, float]:
    """Each step's user CPU seconds, the steps run in pipeline order."""
    seconds = {}
    for name, step in run.steps():
        gc.collect()
        started = os.times().user
        step()
        seconds[name] = os.times().user - started
    return seconds


def test_every_tree_walking_step_grows_linearly(tmp_path: Path) -> None:
    cpu_seconds(Run(tmp_path / "warm", 20))  # imports and first-call caches are not the steps' growth
    small, large = Run(tmp_path / "n", N_TRIALS), Run(tmp_path / "4n", 4 * N_TRIALS)
    at_n, at_4n = cpu_seconds(small), cpu_seconds(large)
    ratios = {name: at_4n[name] / max(at_n[name], 1e-3) for name in at_n}
    if any(ratio > GROWTH_BOUND for ratio in ratios.values()):
        again_n, again_4n = cpu_seconds(small), cpu_seconds(large)
        ratios = {name: min(at_4n[name], again_4n[name]) / max(min(at_n[name], again_n[name]), 1e-3) for name in at_n}
    table = ", ".join(f"{name} {at_n[name]:.2f} s -> {at_4n[name]:.2f} s ({ratios[name]:.1f}x)" for name in at_n)
    over = [name for name, ratio in ratios.items() if ratio > GROWTH_BOUND]
    assert not over, (f"CPU time at {4 * N_TRIALS} trials over {N_TRIALS} trials exceeds {GROWTH_BOUND}x for "
                      f"{', '.join(over)} (super-linear): {table}")
    print(table)
