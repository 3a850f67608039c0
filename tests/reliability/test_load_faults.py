"""Load with faults: several runs in one invocation of the real pipeline, 5% of store requests faulty
(resets, SlowDown, 500, truncated bodies, stalls), the whole pipeline SIGKILLed in the middle, then the
documented recovery (`--unlock`, the same command). Every run reaches DONE; nothing is duplicated on
the Hub (each repo's main holds exactly the staged files, and no commit of its history repeats the tree
before it) or at the archive destination (exactly one archive and MANIFEST per run, no unfinished
multipart upload).

Then the clock: a machine whose clock is hours off leaves files dated in the future or the past.
Every input of every finished run is dated 3 h ahead and every output 3 h back: `snakemake -n`
finds nothing to redo, so no finished upload is redone.

Default: 3 runs. RLKEEP_SOAK=1: 20 runs.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from rlkeep_dev.devserver.hub import RepoRef
from rlkeep_dev.example import iris_state
from rlkeep.storage import s3_client
from tests.conftest import run_snakemake
from tests.reliability import figures_log
from tests.reliability.support import (
    SOAK, Pipeline, Scenario, leftovers, output_problems, publication_problems, read_json, seed, unlock, wait_for,
)
from tests.support.faultproxy import FaultProxy
from tests.support.hub import hub_server  # noqa: F401 - fixture

RUNS = 20 if SOAK else 3  # the default stays a few minutes on 2 shared cores
SKEW = 3 * 3600


def seed_runs(data_root: Path, bucket: str, iris, hub, count: int) -> list[Scenario]:
    """`count` generated runs in one store, one Iris stand-in serving all their attempts."""
    scenarios = [seed(data_root, bucket, iris, hub, job=f"load-{index:02d}") for index in range(count)]
    state = iris.state()
    for scenario in scenarios:
        state["jobs"].update(iris_state(scenario.run)["jobs"])
    iris.write_state(state)
    return scenarios


def done_count(scenarios: list[Scenario]) -> int:
    return sum(1 for s in scenarios if (s.job_dir / "DONE").exists())


def repeated_trees(hub, repo_id: str, repo_type: str) -> list[str]:
    """Commits of main whose tree equals their parent's: an upload redone for nothing."""
    ref = RepoRef(repo_type, repo_id)
    history = [entry["id"] for entry in hub.store.history(ref, hub.store.resolve(ref, "main"))]
    trees = [dict(hub.store.files_at(ref, sha)) for sha in history]
    return [history[i] for i in range(len(history) - 1) if trees[i] == trees[i + 1]]


def archive_destination(bucket: str) -> tuple[list[str], list[str]]:
    """(every key under archives/, keys of multipart uploads still in progress), asked of the real server."""
    client = s3_client()
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="archives/")
            for o in page.get("Contents", [])]
    uploads = [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket, Prefix="archives/").get("Uploads", [])]
    return sorted(keys), uploads


def test_runs_under_store_faults_and_a_kill_all_reach_done_with_nothing_duplicated(
        data_root: Path, bucket: str, iris, hub_server, s3_server) -> None:
    """Guards: the whole resume path (Snakemake's incomplete markers with rerun-incomplete, every
    step's atomic outputs, publication that finds its files already on the Hub and makes no new commit,
    the archive key overwritten in place with its unfinished multipart uploads aborted)."""
    scenarios = seed_runs(data_root, bucket, iris, hub_server, RUNS)
    targets = [f"{s.record['job']}/DONE" for s in scenarios]
    env = scenarios[0].env()
    started = time.monotonic()
    with FaultProxy(s3_server.endpoint, rate=0.05, seed=20, stall_seconds=0.5) as proxy:
        env["AWS_ENDPOINT_URL_S3"] = proxy.endpoint
        first = Pipeline(data_root, *targets, env=env, name="load-first")
        # The kill lands mid-way: some run has published (its model upload is verified), none is DONE.
        midway = lambda: any((s.job_dir / "verify" / "model_upload.json").exists() for s in scenarios)  # noqa: E731
        reached = wait_for(lambda: midway() or not first.running(), timeout=900, interval=0.05)
        still_running = first.running()
        done_at_kill = done_count(scenarios)
        first.kill()
        assert reached and still_running, first.output()[-4000:]
        assert done_at_kill < RUNS
        assert unlock(data_root, targets[0], env).returncode == 0
        rerun = run_snakemake(data_root, *targets, env=env, timeout=1800)
        faults = proxy.faults_injected()
        requests = len(proxy.log)
    seconds = time.monotonic() - started
    assert rerun.returncode == 0, rerun.stderr[-5000:]
    assert faults >= 0.03 * requests, (faults, requests)

    duplicated: list[str] = []
    for scenario in scenarios:
        job_dir = scenario.job_dir
        done = read_json(job_dir / "DONE")
        assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")], (scenario.record["job"], done["remaining_work"])
        assert output_problems(job_dir) == [] and leftovers(job_dir) == [], scenario.record["job"]
        assert publication_problems(scenario) == [], scenario.record["job"]
        publish = scenario.record["publish"]
        duplicated += repeated_trees(hub_server, publish["model"], "model")
        duplicated += repeated_trees(hub_server, publish["traces"], "dataset")
    assert duplicated == []
    keys, uploads = archive_destination(bucket)
    expected = sorted(key for s in scenarios for key in (f"archives/{s.record['job']}/{s.record['job']}_archive.tgz",
                                                         f"archives/{s.record['job']}/MANIFEST"))
    assert keys == expected and uploads == []
    figures_log.record("load", runs=RUNS, requests=requests, injected=faults, kills=1, done=done_count(scenarios),
                       duplicated=len(duplicated), lost=0, seconds=round(seconds, 1))

    # ------------------------------------------------------------------ a clock hours off: nothing to redo
    dated = date_files_across_a_skewed_clock(scenarios)
    dry = run_snakemake(data_root, *targets, extra=("-n",), env=scenarios[0].env())
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = re.findall(r"^rule (\w+):", dry.stdout + dry.stderr, re.M)
    assert planned == [], f"{len(planned)} jobs would run again: {sorted(set(planned))}\n{dry.stdout[-3000:]}"
    figures_log.record("clock_skew", runs=RUNS, files_redated=dated, redone=len(planned), lost=0)


def date_files_across_a_skewed_clock(scenarios: list[Scenario]) -> int:
    """Inputs written on a machine 3 h ahead, outputs on one 3 h behind: every file of each run's folder
    gets mtime +3 h except the evidence steps end with (sentinels, DONE), which get -3 h."""
    now = time.time()
    count = 0
    for scenario in scenarios:
        for path in scenario.job_dir.rglob("*"):
            if path.is_symlink():
                continue
            rel = path.relative_to(scenario.job_dir).as_posix()
            evidence = rel == "DONE" or rel.startswith("verify/") or rel.endswith(("register.json", "STATUS.json"))
            stamp = now - SKEW if evidence else now + SKEW
            os.utime(path, (stamp, stamp))
            count += 1
    return count
