"""The Hub misbehaving: the test Hub server fails preupload, LFS PUT, commit and download requests on
demand (at least 6 in a row where the client retries by itself: one try plus its 5 retries), and
someone edits the model card between our upload and our verification.

Publication fails with a message naming the repo and the protocol step, staging stays, every other
step still completes, no verify sentinel appears for a repo whose main does not hold exactly the
staged files, and a rerun once the fault is gone completes.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, RemoteEditAfterCommit, ScopedFaults, hub_file, hub_head, hub_history, hub_intercept, output_problems,
    publication_problems, read_json, run_logged, seed, staged_files,
)
from tests.support.hub import hub_server  # noqa: F401 - fixture

CLIENT_TRIES = 6  # huggingface_hub: one try + 5 retries (http_backoff) for preupload and LFS PUT
NO_STEP_RETRY = {"RLKEEP_STEP_RETRIES": "0"}  # the step's own retry of a 5xx would triple every backoff wait


def blocked_reason(job_dir: Path, step: str) -> str:
    status = read_json(job_dir / "STATUS.json")
    assert step in status["blocked"], status
    return status["steps"][step]["reason"]


def served_faults(hub) -> Counter:
    """5xx answers served, by kind; not the LFS-mode server's 501 on xet-write-token (it has no Xet)."""
    return Counter(r["kind"] for r in hub.requests()
                   if r["status"] >= 500 and not (r["kind"] == "xet_token" and r["status"] == 501))


def test_hub_faults_fail_publication_clearly_keep_staging_and_a_rerun_completes(data_root: Path, bucket: str, iris,
                                                                                hub_server) -> None:
    scenario = seed(data_root, bucket, iris, hub_server)
    job_dir = scenario.job_dir
    model, traces = scenario.record["publish"]["model"], scenario.record["publish"]["traces"]
    injected: Counter = Counter()

    # 1. Model preupload and dataset LFS PUT fail at once, each past the client's own retries.
    faults = ScopedFaults()
    faults.fail_next("preupload", CLIENT_TRIES, f"/api/models/{model}/")
    faults.fail_next("lfs_put", CLIENT_TRIES, f"/_lfs/datasets/{traces}/")
    with hub_intercept(hub_server, faults):
        first = run_logged(scenario, f"{JOB}/DONE", **NO_STEP_RETRY)
    injected.update(faults.injected)
    assert first.returncode != 0
    assert faults.injected == {"preupload": CLIENT_TRIES, "lfs_put": CLIENT_TRIES}
    model_reason = blocked_reason(job_dir, "publish_model")
    assert model in model_reason and "preupload" in model_reason and "HTTP 500" in model_reason, model_reason
    traces_reason = blocked_reason(job_dir, "publish_traces")
    assert traces in traces_reason and "LFS upload" in traces_reason, traces_reason
    status = read_json(job_dir / "STATUS.json")
    for independent in ("sync_logs", "sync_traces", "metric_surface", "export_model", "archive", "verify_archive"):
        assert independent in status["completed"], independent
    assert_nothing_half_published(scenario, model, traces)

    # 2. Commits fail (the client does not retry a commit; the profile's rule retry does, and fails too).
    hub_server.fail_next("commit", CLIENT_TRIES, 500)
    second = run_logged(scenario, f"{JOB}/DONE")
    injected["commit"] += CLIENT_TRIES - hub_server.faults().get("commit", {}).get("count", 0)
    hub_server.clear_faults()
    assert second.returncode != 0
    assert "commit" in blocked_reason(job_dir, "publish_model") and "commit" in blocked_reason(job_dir, "publish_traces")
    assert_nothing_half_published(scenario, model, traces)

    # 3. At once: someone edits the model card right after our commit, and the dataset's fresh
    #    download for verification fails (first try + the client's retry with its own 5 retries).
    #    Without the profile's rule retry: it would re-upload the card and pass.
    edit = RemoteEditAfterCommit(hub_server, model, "README.md", b"# edited by someone else\n")
    faults = ScopedFaults()
    faults.fail_next("download", 1 + CLIENT_TRIES, f"/datasets/{traces}/resolve/")
    with hub_intercept(hub_server, edit), hub_intercept(hub_server, faults):
        third = run_logged(scenario, f"{JOB}/DONE", **NO_STEP_RETRY)
    injected.update(faults.injected)
    assert third.returncode != 0 and edit.edited_commit is not None
    assert faults.injected == {"download": 1 + CLIENT_TRIES}
    reason = blocked_reason(job_dir, "publish_model")
    assert "README.md" in reason and "differs" in reason, reason
    assert hub_history(hub_server, model)[0] == edit.edited_commit
    reason = blocked_reason(job_dir, "publish_traces")
    assert traces in reason and "trace_export_manifest.json" in reason and "download" in reason, reason
    # Both commits landed, but nothing verified them: no sentinel, staging kept.
    assert not (job_dir / "verify" / "model.json").exists() and not (job_dir / "verify" / "traces.json").exists()
    assert_staging_kept(scenario)

    # 4. No fault: the rerun completes and the Hub holds exactly what was staged.
    last = run_logged(scenario, f"{JOB}/DONE")
    assert last.returncode == 0, last.stderr[-4000:]
    assert publication_problems(scenario) == [] and output_problems(job_dir) == []
    verify = read_json(job_dir / "verify" / "model.json")
    head, _ = hub_head(hub_server, model)
    assert verify["verified_commit"] == head and verify["commit"] in hub_history(hub_server, model)
    # the card on main links the verified traces (one README-only commit after the upload)
    assert hub_file(hub_server, model, "README.md") == (job_dir / "stage" / "model_card" / "README.md").read_bytes()
    assert read_json(job_dir / "verify" / "model_upload.json")["verified_commit"] == hub_history(hub_server, model)[1]
    done = read_json(job_dir / "DONE")
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")] and done["steps"]["publish_model"] == "completed"
    assert served_faults(hub_server) == injected
    # Every failure above was reported without the Hub token or the store secret.
    credentials = (hub_server.token, scenario.s3_secret)
    texts = [p.read_text(errors="replace") for p in job_dir.rglob("*") if p.is_file() and p.suffix in {".log", ".json", ".md"}]
    texts += [p.read_text(errors="replace") for p in (data_root / ".snakemake" / "log").glob("*.log")]
    texts += [r.stdout + r.stderr for r in (first, second, third, last)]
    assert not [c for c in credentials for text in texts if c in text]
    figures_log.record("hub_faults", injected=dict(injected), remote_edits=1, lost=0)


def assert_staging_kept(scenario) -> None:
    job_dir = scenario.job_dir
    for name in ("model", "traces"):
        assert staged_files(job_dir / "stage" / name), f"stage/{name} was removed"


def assert_nothing_half_published(scenario, model: str, traces: str) -> None:
    """No verify sentinel, staging kept, and main of each repo holds none of the staged files."""
    job_dir = scenario.job_dir
    assert not (job_dir / "verify" / "model.json").exists()
    assert not (job_dir / "verify" / "traces.json").exists()
    assert not (job_dir / "register.json").exists() and not (job_dir / "DONE").exists()
    assert_staging_kept(scenario)
    for repo, repo_type in ((model, "model"), (traces, "dataset")):
        _, files = hub_head(scenario.hub, repo, repo_type)
        assert set(files) <= {".gitattributes"}, (repo, sorted(files))
