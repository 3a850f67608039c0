"""Many runs in one invocation: one blocked job does not stop the others, transfers of all of
them share the `net_io` cap, and the campaign target leaves settled jobs out of planning. Real
Snakemake subprocesses over generated runs in the real S3 server.

Transfer intervals come from Snakemake's own metadata (`.snakemake/metadata/<base64 output>`):
`starttime` is when the job started (its incomplete marker), `endtime` its output's mtime. Both
lie inside the time the job held its `net_io` token, so two transfers whose intervals overlap
held two tokens at once.
"""
from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlkeep_dev.example import iris_state
from tests.conftest import run_snakemake, seed_example

N_TRIALS = 12  # the smallest example run (rlkeep_dev.example requires >= 12 trials)


@dataclass(frozen=True)
class PlannedJob:
    rule: str
    job: str
    outputs: tuple[str, ...]
    net_io: int


def seed_runs(data_root: Path, bucket: str, iris, jobs: list[str], overrides: dict[str, dict] | None = None) -> dict:
    """Generated runs, one record each, and one Iris stand-in state holding every run's jobs."""
    overrides = overrides or {}
    state: dict = {"jobs": {}}
    records = {}
    for job in jobs:
        run, record = seed_example(data_root, bucket, iris, job=job, n_trials=N_TRIALS,
                                   record_overrides=overrides.get(job))
        state["jobs"].update(iris_state(run)["jobs"])
        records[job] = record
    iris.write_state(state)
    return records


def executed_jobs(log: str) -> list[PlannedJob]:
    """The rule jobs Snakemake started, from its printed job blocks."""
    found = []
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:\s*$)", log, flags=re.MULTILINE):
        header = re.match(r"\s*(?:local)?rule (\w+):\s*$", block, re.MULTILINE)
        if not header:
            continue
        fields = dict(re.findall(r"^\s{4}(\w+): (.*)$", block, re.MULTILINE))
        job = re.search(r"\bjob=([^,\s]+)", fields.get("wildcards", ""))
        net_io = re.search(r"\bnet_io=(\d+)", fields.get("resources", ""))
        if job is None:
            continue
        found.append(PlannedJob(rule=header.group(1), job=job.group(1),
                                outputs=tuple(o.strip() for o in fields.get("output", "").split(",") if o.strip()),
                                net_io=int(net_io.group(1)) if net_io else 0))
    return found


def metadata_interval(data_root: Path, outputs: tuple[str, ...]) -> tuple[float, float]:
    starts, ends = [], []
    for output in outputs:
        entry = data_root / ".snakemake" / "metadata" / base64.urlsafe_b64encode(output.encode()).decode()
        record = json.loads(entry.read_text())
        starts.append(record["starttime"])
        ends.append(record["endtime"])
    return min(starts), max(ends)


def overlapping(intervals: list[tuple[float, float, str]]) -> list[tuple[str, str]]:
    ordered = sorted(intervals)
    return [(a[2], b[2]) for a, b in zip(ordered, ordered[1:]) if b[0] < a[1]]


# ten runs under RLKEEP_SOAK=1; four by default (three on Iris, one of them blocked, one without a scheduler),
# which keep every case the ten have and save the suite minutes on two cores
MANY = 10 if os.environ.get("RLKEEP_SOAK") == "1" else 4


def test_one_blocked_job_among_many_does_not_stop_the_others(data_root: Path, bucket: str, iris) -> None:
    jobs = [f"mj-{index:02d}" for index in range(MANY)]
    blocked = "mj-02"
    overrides = {job: {"scheduler": "none"} for job in jobs[MANY // 2 + 1:]}  # logs read from the store
    overrides[blocked] = {"checkpoint": {"interval": 20}}  # no checkpoint.rule: selection stops
    records = seed_runs(data_root, bucket, iris, jobs, overrides)
    assert "rule" not in records[blocked]["checkpoint"]

    # the default target (every record in records/), one transfer at a time across all runs
    result = run_snakemake(data_root, extra=("--resources", "net_io=1"))
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-3000:]

    for job in jobs:
        if job == blocked:
            continue
        done = json.loads((data_root / job / "DONE").read_text())
        assert done["job"] == job and [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")], job
        assert set(done["steps"].values()) <= {"completed", "not_applicable"}, (job, done["steps"])

    assert not (data_root / blocked / "DONE").exists()
    status = json.loads((data_root / blocked / "STATUS.json").read_text())
    assert status["blocked"] == ["select_checkpoint"]
    assert "checkpoint.rule" in status["steps"]["select_checkpoint"]["reason"]
    for independent in ("sync_logs", "sync_traces", "metric_surface", "archive", "verify_archive"):
        assert independent in status["completed"], independent
    assert not status["done"]

    # Transfers never overlapped: each held the one net_io token (intervals from Snakemake's metadata
    # of the transfers that finished; the blocked run's export never started).
    def finished(planned: PlannedJob) -> bool:
        return all((data_root / output).exists() for output in planned.outputs)

    transfers = [planned for planned in executed_jobs(log) if planned.net_io and finished(planned)]
    assert {planned.job for planned in transfers} == set(jobs)
    assert {"sync_logs", "sync_traces", "list_checkpoints", "export_model"} <= {planned.rule for planned in transfers}
    assert len(transfers) >= (MANY - 1) * 6, [(p.rule, p.job) for p in transfers]
    intervals = [(*metadata_interval(data_root, planned.outputs), f"{planned.rule}[{planned.job}]")
                 for planned in transfers]
    assert overlapping(intervals) == []
    # the cap serializes transfers, not everything: some non-transfer job ran beside a transfer
    others = [(*metadata_interval(data_root, p.outputs), p.rule) for p in executed_jobs(log)
              if not p.net_io and p.outputs and finished(p)]
    assert any(overlapping([transfer, other]) for transfer in intervals for other in others)

    # exactly the pending retry of each Iris-scheduled run was stopped, nothing of the others
    stopped = sorted(argv[3] for argv in iris.stop_calls())
    assert stopped == sorted(f"/demo/{job}-r1" for job in jobs if records[job]["scheduler"] == "iris")

    # The campaign target asks only for what is unsettled (rlkeep.settled): here, the blocked run.
    requested: list[set[str]] = []

    def planned_by_job(*extra: str, config: tuple[str, ...] = ()) -> dict[str, set[str]]:
        dry = run_snakemake(data_root, extra=("-n", *extra), config=config)
        log = dry.stdout + dry.stderr
        assert dry.returncode == 0, log[-3000:]
        target = re.search(r"^rule all:\n\s+input: (.*)$", log, re.MULTILINE)
        requested.append(set(target.group(1).split(", ")) if target else set())
        planned: dict[str, set[str]] = {}
        for job in executed_jobs(log):
            planned.setdefault(job.job, set()).add(job.rule)
        return planned

    assert set(planned_by_job()) == {blocked}
    assert requested[-1] == {f"{blocked}/DONE"}  # settled DONEs are not even asked for
    # every way a settled job stops being settled brings it back, each with what it has to redo
    authorized, rerun, edited = [job for job in jobs if job != blocked][:3]
    # the archive verified again since DONE: its sentinel rewritten (a missing one Snakemake ignores
    # while DONE exists, as it ignores any removed intermediate; rlkeep.settled counts it anyway)
    sentinel = data_root / rerun / "verify" / "archive.json"
    sentinel.write_text(json.dumps(json.loads(sentinel.read_text()), indent=1))
    later = (data_root / rerun / "DONE").stat().st_mtime + 60
    os.utime(sentinel, (later, later))
    record_file = data_root / "records" / f"{edited}.yaml"
    record_file.write_text(record_file.read_text() + "# reviewed\n")
    planned = planned_by_job(config=(f"reclaim_authorized={authorized}",))
    assert set(planned) == {blocked, authorized, rerun, edited}, planned
    assert {"reclaim", "done"} <= planned[authorized] and "register" not in planned[authorized]
    assert planned[edited] == {"done"}
    assert "done" in planned[rerun] and not {"archive", "verify_archive"} & planned[rerun], planned[rerun]
    # forcing anything (here one rule) is Snakemake's judgement over every job, settled or not
    forced = planned_by_job("--forcerun", "register")
    assert "register" in forced[authorized], forced
    assert requested[-1] == {f"{job}/DONE" for job in jobs}
