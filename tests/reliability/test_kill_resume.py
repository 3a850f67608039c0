"""SIGKILL the whole pipeline (Snakemake and every job it started) at many deterministic points of one
run, recover the documented way (`--unlock`, then the same command), and check that nothing was lost,
nothing half-written passes for complete, and the end result equals a clean run's.

Every kill point is a condition on what the run has visibly done (a temp file of this attempt exists,
a step's log grew but its output is absent, the Hub server holds a request of a given kind, the object
store proxy holds a given request). Requests are *held* (a stalled S3 request at the proxy, a held
request at the Hub server) only to give a kill a window at an exact place: a held request is just a
slow one. All points are armed at once; in each attempt the first one reached kills the run, and the
next attempt goes on from there, so ~20 kills cost about one run plus the restarts.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlkeep.storage import open_store
from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, SOAK, Pipeline, Reference, Scenario, clean_reference, hub_gate, hub_head, hub_history, leftovers, output_problems,
    publication_problems, read_json, seed, stable_done, tar_digests, unlock,
)
from tests.support.faultproxy import FaultProxy
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.test_views import assert_views_are_a_fresh_render

MIN_KILLS = 20
SOAK_TRIALS = 300  # the example's default size


@pytest.fixture(scope="session")
def reference(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return clean_reference(s3_server, tmp_path_factory.mktemp("reference"))


@dataclass
class Attempt:
    """What was already there when an attempt started, so conditions only see this attempt's doing."""

    started: float
    log_sizes: dict[str, int]
    stop_calls: int
    proxy_seen: int

    def grew(self, job_dir: Path, step: str) -> bool:
        path = job_dir / "logs" / f"{step}.log"
        try:
            return path.stat().st_size > self.log_sizes.get(step, 0)
        except FileNotFoundError:
            return False

    def fresh(self, path: Path) -> bool:
        try:
            return path.stat().st_mtime >= self.started - 0.01
        except FileNotFoundError:
            return False


@dataclass
class KillPoint:
    name: str
    reached: Callable[[Attempt], bool]
    fired_at: str = ""
    # A window opened by holding a request: armed again after each kill until its own kill fired, so a
    # window used up while another point killed the run is not lost (the run cannot pass it unkilled).
    rearm: Callable[[], None] | None = None


def stall_once(proxy: FaultProxy, **match: str) -> Callable[[], None]:
    """Stall the next request matching `match` at the proxy; the returned function stalls one again
    once that one was used."""
    plan = proxy.fail_next("stall", 1, **match)

    def rearm() -> None:
        nonlocal plan
        if plan.remaining == 0:
            plan = proxy.fail_next("stall", 1, **match)
    return rearm


@dataclass
class Run:
    scenario: Scenario
    proxy: FaultProxy
    gates: dict[str, object] = field(default_factory=dict)
    stalls: dict[str, Callable[[], None]] = field(default_factory=dict)  # re-arms each held proxy request
    _calls_size: int = -1
    _stops: int = 0

    @property
    def job_dir(self) -> Path:
        return self.scenario.job_dir

    def exists(self, rel: str) -> bool:
        return (self.job_dir / rel).exists()

    def proxy_requests(self, attempt: Attempt, method: str, marker: str, outcome: str | None = None) -> bool:
        return any(m == method and marker in path and (outcome is None or out == outcome)
                   for m, path, out in self.proxy.log[attempt.proxy_seen:])

    def stop_calls(self) -> int:
        """`iris job stop/kill/cancel` calls so far (the call log is re-read only when it grew)."""
        size = self.scenario.iris.calls_path.stat().st_size
        if size != self._calls_size:
            self._calls_size = size
            self._stops = len(self.scenario.iris.stop_calls())
        return self._stops

    def new_attempt(self) -> Attempt:
        logs = self.job_dir / "logs"
        sizes = {p.stem: p.stat().st_size for p in logs.glob("*.log")} if logs.is_dir() else {}
        return Attempt(time.time(), sizes, self.stop_calls(), len(self.proxy.log))


def kill_points(run: Run) -> list[KillPoint]:
    job_dir = run.job_dir
    gate = run.gates

    def held(name: str) -> Callable[[Attempt], bool]:
        return lambda attempt: bool(gate[name].arrived) and gate[name].armed

    def hub_window(name: str, what: str) -> KillPoint:
        return KillPoint(what, held(name), rearm=lambda: gate[name].rearm())

    def fresh_tmp_model(attempt: Attempt) -> bool:
        return any(attempt.fresh(p) for p in job_dir.glob(".model.tmp-*"))

    def reclaim_journal_open(attempt: Attempt) -> bool:
        """A DeleteObjects request is out (held at the proxy) and the journal says batches remain."""
        journal = job_dir / ".work" / "reclaim" / "journal.json"
        if not run.proxy_requests(attempt, "POST", "delete", "stall") or not journal.is_file():
            return False
        state = read_json(journal)
        return state["batches_done"] < state["batches_total"]

    def retry_stopped(attempt: Attempt) -> bool:
        # After Iris answered the stop (the stand-in's state file is whole again): killing the
        # stand-in mid-write would corrupt a file the real Iris controller does not have.
        if run.stop_calls() <= attempt.stop_calls or run.exists("retries.json"):
            return False
        try:
            jobs = json.loads(run.scenario.iris.state_path.read_text())["jobs"]
        except ValueError:
            return False
        chain = run.scenario.record["chain"]
        return all(jobs[job_id]["state"] not in {"pending", "building"} for job_id in chain)

    return [
        KillPoint("lock held, no step started yet",
                  lambda a: any((run.scenario.data_root / ".snakemake" / "locks").glob("*"))
                  and not (job_dir / "logs").exists()),
        KillPoint("mid capture_chain (Iris queried)", lambda a: a.grew(job_dir, "capture_chain") and not run.exists("chain.json")),
        KillPoint("between capture_chain and stop_retries",
                  lambda a: a.fresh(job_dir / "chain.json") and not a.grew(job_dir, "stop_retries")),
        KillPoint("mid stop_retries (iris job stop done, retries.json not written)", retry_stopped),
        KillPoint("mid sync_logs (.logs.tar.part being written)", lambda a: a.fresh(job_dir / "sync" / ".logs.tar.part")),
        KillPoint("mid sync_traces (.trace_jobs.tar.part being written)",
                  lambda a: a.fresh(job_dir / "sync" / ".trace_jobs.tar.part")),
        KillPoint("mid list_checkpoints", lambda a: a.grew(job_dir, "list_checkpoints")
                  and not run.exists("checkpoint/candidates.json")),
        KillPoint("mid archive", lambda a: a.grew(job_dir, "archive") and not run.exists("archive/MANIFEST")),
        KillPoint("mid verify_archive (archive upload in flight)",
                  lambda a: run.proxy_requests(a, "PUT", "/archives/") and not run.exists("verify/archive.json")),
        KillPoint("mid stage_traces", lambda a: a.grew(job_dir, "stage_traces") and not run.exists("stage/traces")),
        KillPoint("mid metric_surface (some outputs written, not all)",
                  lambda a: a.grew(job_dir, "metric_surface") and not run.exists("metrics/reward.png")),
        KillPoint("between select_checkpoint and export_model",
                  lambda a: a.fresh(job_dir / "checkpoint" / "selected.json") and not a.grew(job_dir, "export_model")),
        KillPoint("mid export download (a weights .part on disk)",
                  lambda a: run.proxy_requests(a, "GET", "model.safetensors", "stall"), rearm=run.stalls.get("weights")),
        KillPoint("mid consolidation (.model.tmp-* being built)", fresh_tmp_model),
        KillPoint("mid stage_model (redaction of the staging tree)",
                  lambda a: a.grew(job_dir, "stage_model") and not run.exists("stage/model.redaction.json")),
        hub_window("dataset commit", "mid trace dataset commit (commit request at the Hub)"),
        hub_window("model lfs", "mid model upload (LFS PUT at the Hub)"),
        hub_window("model commit", "mid model commit (commit request at the Hub)"),
        hub_window("model download", "mid model verification (fresh download from the Hub)"),
        KillPoint("between verification and registration",
                  lambda a: a.fresh(job_dir / "verify" / "model.json") and not a.grew(job_dir, "register")),
        KillPoint("mid reclaim (journal open, DeleteObjects in flight)", reclaim_journal_open, rearm=run.stalls.get("delete")),
        KillPoint("between reclaim and DONE", lambda a: a.fresh(job_dir / "reclaim.json") and not run.exists("DONE")),
    ]


def check_invariants(run: Run, source_keys: dict[str, int], where: str) -> None:
    """After a kill: no partial target passes for complete; sources go only after every verification."""
    job_dir = run.job_dir
    assert output_problems(job_dir) == [], where
    remaining = {info.key for info in open_store(run.scenario.record["store"]).list()}
    if remaining != set(source_keys):
        for name in ("model", "traces", "archive"):
            assert (job_dir / "verify" / f"{name}.json").is_file(), f"{where}: source deleted before verify/{name}.json"
    verify = job_dir / "verify" / "model.json"
    if verify.is_file():
        commit = read_json(verify)["commit"]
        assert commit in hub_history(run.scenario.hub, run.scenario.record["publish"]["model"]), where


class StagingWatch:
    """Staging is never deleted before its verify sentinel: from the first upload request of a repo
    (seen at the Hub) until verify/<name>.json exists, stage/<name>/ must be there. (Before any upload,
    Snakemake may rebuild a staging whose rule was killed after writing it: nothing was sent from it.)"""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.uploaded: dict[str, bool] = {"model": False, "traces": False}
        self.markers = {"model": f"/models/{scenario.record['publish']['model']}/",
                        "traces": f"/datasets/{scenario.record['publish']['traces']}/"}

    def check(self) -> None:
        job_dir = self.scenario.job_dir
        if not all(self.uploaded.values()):
            requests = self.scenario.hub.requests()
            for name, marker in self.markers.items():
                self.uploaded[name] = self.uploaded[name] or any(
                    r["kind"] in {"preupload", "lfs_put", "commit"} and marker in r["path"] for r in requests)
        for name, uploaded in self.uploaded.items():
            if uploaded and not (job_dir / "verify" / f"{name}.json").is_file():
                assert (job_dir / "stage" / name).is_dir(), f"stage/{name} deleted before verify/{name}.json"


def kill_and_resume_until_done(scenario: Scenario, s3_endpoint: str, extra_points: tuple[KillPoint, ...] = (),
                               unreached: list[str] | None = None) -> list[str]:
    """Run the same command again and again, killing each attempt at the first kill point it reaches,
    with the documented recovery in between, until an attempt finishes. Returns the kills in order;
    `unreached`, when given, gets the points no attempt reached and the finishing attempt's output."""
    hub = scenario.hub
    data_root = scenario.data_root
    source_keys = scenario.store_keys()
    command = (f"{JOB}/DONE",)
    config = (f"reclaim_authorized={JOB}",)
    kills: list[str] = []
    with FaultProxy(s3_endpoint, stall_seconds=3.0) as proxy, \
            hub_gate(hub, {"commit"}, repo_part="/api/datasets/demo/") as dataset_commit, \
            hub_gate(hub, {"lfs_put"}, repo_part="/_lfs/models/demo/") as model_lfs, \
            hub_gate(hub, {"commit"}, repo_part="/api/models/demo/") as model_commit, \
            hub_gate(hub, {"download"}, repo_part=f"/demo/{JOB}/resolve/") as model_download:
        # Two requests are held at the proxy (stall) to open a window: the weights download, the delete.
        stalls = {"weights": stall_once(proxy, method="GET", path_contains="policy/model.safetensors"),
                  "delete": stall_once(proxy, method="POST", query_contains="delete")}
        run = Run(scenario, proxy, {"dataset commit": dataset_commit, "model lfs": model_lfs,
                                    "model commit": model_commit, "model download": model_download}, stalls)
        env = scenario.env(AWS_ENDPOINT_URL_S3=proxy.endpoint)
        points = kill_points(run) + list(extra_points)
        staging = StagingWatch(scenario)
        for number in range(len(points) + 5):
            attempt = run.new_attempt()
            pipeline = Pipeline(data_root, *command, env=env, config=config, name=f"attempt-{number:02d}")
            fired: KillPoint | None = None
            try:
                while pipeline.running() and fired is None:
                    fired = next((point for point in points if point.reached(attempt)), None)
                    staging.check()
                    time.sleep(0.005)
            except BaseException:
                pipeline.kill()
                raise
            if fired is None:
                status = pipeline.wait()
                assert status == 0, pipeline.output()[-5000:]
                if unreached is not None:
                    unreached += [point.name for point in points] + [pipeline.output()[-3000:]]
                return kills
            pipeline.kill()
            for gate in run.gates.values():
                if gate.arrived:
                    gate.release()  # a held request now finds its client gone
            points.remove(fired)
            for point in points:
                if point.rearm is not None:
                    point.rearm()
            kills.append(fired.name)
            check_invariants(run, source_keys, f"after kill {len(kills)} ({fired.name})")
            unlocked = unlock(data_root, command[0], env)
            assert unlocked.returncode == 0, unlocked.stderr[-3000:]
    pytest.fail(f"the run did not finish after {len(kills)} kills")


def assert_ends_like_a_clean_run(scenario: Scenario, reference: Reference) -> None:
    job_dir = scenario.job_dir
    # The same end as a clean run: the completion record, the sync tars, the exported weights.
    assert stable_done(scenario) == reference.done_reclaimed
    assert tar_digests(job_dir) == reference.tar_sha256
    assert {f["path"]: f["sha256"] for f in read_json(job_dir / "export.json")["files"]} == reference.export_files
    # Nothing partial passes for complete; no temp file or folder is left behind.
    assert output_problems(job_dir) == []
    assert leftovers(job_dir) == []
    # The Hub holds exactly one copy of each staged path at main, and what was verified is main.
    assert publication_problems(scenario) == []
    for name, repo_type in (("model", "model"), ("traces", "dataset")):
        head, _ = hub_head(scenario.hub, scenario.record["publish"][name], repo_type)
        assert read_json(job_dir / "verify" / f"{name}.json")["verified_commit"] == head
    # Reclamation deleted exactly the synced source objects, once, and says so.
    assert scenario.store_keys() == {}
    reclaim = read_json(job_dir / "reclaim.json")
    assert reclaim["deleted_keys"] == len(reference.store_keys)
    assert reclaim["deleted_bytes"] == sum(reference.store_keys.values())
    assert json.loads((job_dir / "DONE").read_text())["remaining_work"] == []
    # STATUS.json and the pages as a fresh render gives them, whatever the kills left
    assert_views_are_a_fresh_render(scenario.data_root, endpoint=scenario.env().get("HF_ENDPOINT"))


def test_twenty_kills_and_resumes_end_like_a_clean_run(data_root: Path, bucket: str, iris, hub_server, s3_server,
                                                        reference: Reference) -> None:
    scenario = seed(data_root, bucket, iris, hub_server)
    assert scenario.store_keys() == reference.store_keys
    unreached: list[str] = []
    kills = kill_and_resume_until_done(scenario, s3_server.endpoint, unreached=unreached)
    figures_log.record("kills", survived=len(kills), points=kills)
    assert len(kills) >= MIN_KILLS, (f"only {len(kills)} kill points reached: {kills}; not reached, and the "
                                     f"finishing attempt's output: {unreached}")
    assert_ends_like_a_clean_run(scenario, reference)


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="soak variant: set RLKEEP_SOAK=1")
def test_soak_kills_at_points_and_at_seeded_times_on_the_full_size_example(data_root: Path, bucket: str, iris,
                                                                           hub_server, s3_server,
                                                                           tmp_path_factory) -> None:
    reference = clean_reference(s3_server, tmp_path_factory.mktemp("reference-full"), n_trials=SOAK_TRIALS)
    scenario = seed(data_root, bucket, iris, hub_server, n_trials=SOAK_TRIALS)
    rng = random.Random(7)
    timed = tuple(KillPoint(f"{delay:.1f} s into attempt (seeded)", lambda a, d=delay: time.time() - a.started > d)
                  for delay in sorted(rng.uniform(2.0, 12.0) for _ in range(12)))
    kills = kill_and_resume_until_done(scenario, s3_server.endpoint, timed)
    figures_log.record("kills", survived=len(kills), points=kills)
    assert len(kills) >= MIN_KILLS + len(timed) // 2
    assert_ends_like_a_clean_run(scenario, reference)


KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
from rlkeep import jsonio

def die(fd):  # SIGKILL after the temp file is written, before the rename
    os.kill(os.getpid(), signal.SIGKILL)

jsonio.os.fsync = die
jsonio.write_json(Path(sys.argv[1]), {"status": "completed"})
"""


def test_a_sentinel_write_killed_mid_way_leaves_no_temp_file_after_the_next_write(tmp_path: Path) -> None:
    """Found by the soak kill test (checkpoint/.candidates.json.XXXXXXXX.part left behind); fixed in
    rlkeep.jsonio: the next write of the same target removes what a killed writer left."""
    import subprocess
    import sys

    from rlkeep.jsonio import write_json

    target = tmp_path / "candidates.json"
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(target)])
    assert killed.returncode == -9 and not target.exists()
    write_json(target, {"status": "completed"})  # the resumed step writes it again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["candidates.json"]
