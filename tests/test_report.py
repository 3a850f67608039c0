"""The completion record of a blocked run (STATUS.json) and of a finished one (DONE), from job folders."""
from __future__ import annotations

import json
from pathlib import Path

from rlkeep.records import load_record
from rlkeep.pipeline import STEP_BY_NAME
from rlkeep.campaign.writer import write_views
from rlkeep.report import build_status, continue_command, invocation_from_argv, render_report

RECORD = """job: rl-swe
user: u
scheduler: none
chain:
  - /u/rl-swe
  - /u/rl-swe-r1
store: file:///tmp/nowhere
checkpoint:
  interval: 20
"""


def job_folder(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    records = tmp_path / "records"
    records.mkdir()
    (records / "rl-swe.yaml").write_text(RECORD + extra)
    job = tmp_path / "rl-swe"
    for name, data in {
        "chain.json": {"status": "completed", "attempts": [{"id": "/u/rl-swe", "slug": "rl-swe", "state": "failed"},
                                                           {"id": "/u/rl-swe-r1", "slug": "rl-swe-r1", "state": "failed"}]},
        "retries.json": {"status": "completed", "stopped": []},
        "sync/logs.manifest.json": {"status": "completed", "attempts": [
            {"attempt": "rl-swe", "member": "attempts/rl-swe/trainer.log", "bytes": 900, "lines": 9, "state": "failed"},
            {"attempt": "rl-swe-r1", "member": "attempts/rl-swe-r1/trainer.log", "bytes": 0, "lines": 0,
             "state": "failed"}]},
        "checkpoint/candidates.json": {"status": "completed", "candidates": [
            {"step": 20, "complete": True}, {"step": 40, "complete": False}, {"step": 60, "complete": True}]},
    }.items():
        (job / name).parent.mkdir(parents=True, exist_ok=True)
        (job / name).write_text(json.dumps(data))
    (job / "logs").mkdir()
    (job / "logs/sync_traces.log").write_text("2026-01-01T00:00:00 INFO step rlkeep.sync:sync_traces for job rl-swe\n"
                                              "rlkeep: s3://b/rl-swe/trace_jobs: no trace objects under this prefix\n")
    return job, records / "rl-swe.yaml"


def test_a_blocked_run_gets_the_completion_record_and_the_commands_that_continue_it(tmp_path: Path) -> None:
    job, record_file = job_folder(tmp_path)
    invocation = "snakemake --profile profiles/local"
    status = build_status(job, record=load_record(record_file), invocation=invocation)
    assert status["blocked"] == ["sync_traces"] and not status["done"]
    assert status["checkpoint"] is None and status["candidates"] == [20, 60]  # the incomplete save is not one
    assert status["terminal_state"] == "failed" and status["chain"] == ["/u/rl-swe", "/u/rl-swe-r1"]
    # before the surface is built only the empty log is known to hold no metrics
    assert status["attempts_without_metrics"] == [
        {"attempt": "rl-swe-r1", "reason": "empty", "state": "failed", "bytes": 0, "lines": 0}]
    assert status["artifacts"] == {"weights": "absent", "tokenizer_configuration": "absent",
                                   "training_logs": "not_applicable", "training_traces_link": "not_applicable"}
    assert status["artifact_reasons"]["weights"] == "metric_surface pending: has not run yet"
    assert status["destinations"] == "not_applicable"
    work = {item["step"]: item for item in status["remaining_work"]}
    assert work["sync_traces"]["command"] == f"{invocation} rl-swe/sync/trace_jobs.manifest.json"
    assert "no trace objects under this prefix" in work["sync_traces"]["reason"]
    # a step that never ran: its advice is the failed ancestor's (issue 27), never its own remedy
    trials = work["trial_table"]
    assert trials["status"] == "pending" and trials["blocked_by"] == "sync_traces"
    assert trials["reason"].startswith("waits for sync_traces (sync/trace_jobs.manifest.json); sync_traces is blocked: ")
    assert trials["remaining"].startswith("sync_traces is blocked (s3://b/rl-swe/trace_jobs: no trace objects")
    assert trials["command"] == work["sync_traces"]["command"]
    assert work["metric_surface"]["reason"] == "has not run yet"  # its inputs are there; nothing failed
    assert work["reclaim"]["blocked_by"] == "sync_traces" and work["reclaim"]["command"] == trials["command"]
    assert continue_command("rl-swe", STEP_BY_NAME["reclaim"], invocation) == \
        f"{invocation} rl-swe/reclaim.json --config reclaim_authorized=rl-swe"
    assert status["continue"] == f"{invocation} rl-swe/DONE"
    report = render_report(status | {"steps": {name: info["status"] for name, info in status["steps"].items()}})
    assert "Not selected yet; complete saves: 20, 60" in report
    assert "| rl-swe-r1 | empty | failed | 0 | 0 |" in report
    assert f"Continue with: `{invocation} rl-swe/sync/trace_jobs.manifest.json`" in report


def test_the_surface_names_attempts_without_metrics_and_a_partial_publication_keeps_its_reasons(tmp_path: Path) -> None:
    job, record_file = job_folder(tmp_path, "publish:\n  model: o/m\n  traces: o/t\nbase_model: o/base\n")
    (job / "metrics").mkdir()
    (job / "metrics/attempts.json").write_text(json.dumps({"attempts_without_metrics": [
        {"attempt": "rl-swe-r1", "reason": "no_metric_blocks", "state": "failed", "bytes": 120, "lines": 3}]}))
    (job / "verify").mkdir()
    # the model is on the Hub and verified; its card's trace link waits on the traces (no verify/model.json)
    (job / "verify/model_upload.json").write_text(json.dumps({"status": "completed", "commit": "abc123"}))
    status = build_status(job, record=load_record(record_file), invocation="snakemake --profile iris")
    assert [a["reason"] for a in status["attempts_without_metrics"]] == ["no_metric_blocks"]
    assert status["artifacts"]["training_traces_link"] == "absent" and status["artifacts"]["weights"] == "present"
    assert status["artifact_reasons"] == {"training_traces_link": "sync_traces blocked: s3://b/rl-swe/trace_jobs: "
                                                                  "no trace objects under this prefix"}
    assert status["destinations"]["model_commit"] == "abc123" and status["destinations"]["traces"] == "o/t"


def identity(path: Path) -> tuple[int, int] | None:
    """(inode, mtime_ns): an atomic rewrite makes a new file."""
    return (path.stat().st_ino, path.stat().st_mtime_ns) if path.exists() else None


def test_status_is_written_for_every_job_with_a_folder(tmp_path: Path) -> None:
    job, _ = job_folder(tmp_path)
    write_views(tmp_path, Path("records"), invocation="snakemake --profile x")
    written = identity(job / "STATUS.json")
    assert json.loads((job / "STATUS.json").read_text())["continue"] == "snakemake --profile x rl-swe/DONE"
    write_views(tmp_path, Path("records"), invocation="snakemake --profile x")
    assert identity(job / "STATUS.json") == written  # unchanged: not rewritten


def test_the_invocation_is_read_from_the_command_line(tmp_path: Path, monkeypatch) -> None:
    from rlkeep.profiles import install_profiles

    assert invocation_from_argv(["snakemake", "--profile", "iris", "j/DONE"]) == "snakemake --profile iris"
    assert invocation_from_argv(["x", "--snakefile", "/a b/Snakefile", "--profile=p", "j/DONE"]) == (
        "snakemake --snakefile '/a b/Snakefile' --profile p")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert invocation_from_argv(["snakemake", "j/DONE"]) == "snakemake --profile iris"  # none installed yet
    install_profiles(["iris"])
    assert invocation_from_argv(["snakemake", "j/DONE"]) == "snakemake --profile iris"  # this checkout's
    other = tmp_path / "snakemake" / "iris" / "profile.yaml"
    other.write_text("snakefile: /elsewhere/Snakefile\n")  # another checkout owns `iris`
    own = invocation_from_argv(["snakemake", "j/DONE"])
    assert own.startswith("snakemake --profile iris-") and (tmp_path / "snakemake" / own.split()[-1]).is_dir()


def test_status_of_a_job_folder_that_did_not_change_is_not_rebuilt(tmp_path: Path, monkeypatch) -> None:
    import rlkeep.campaign.views as views

    job, _ = job_folder(tmp_path)
    status_file = job / "STATUS.json"
    built = []
    real_build_status = views.build_status
    monkeypatch.setattr(views, "build_status", lambda *a, **k: built.append(a[0].name) or real_build_status(*a, **k))

    def refresh(invocation: str = "snakemake --profile x") -> bool:
        """Whether STATUS.json was rewritten."""
        built.clear()
        before = identity(status_file)
        write_views(tmp_path, Path("records"), invocation=invocation)
        return identity(status_file) != before

    assert refresh() and built == ["rl-swe"]
    assert not refresh() and built == []               # nothing changed: not even read again
    (job / "verify").mkdir(exist_ok=True)
    (job / "verify" / "archive.json").write_text(json.dumps({"status": "completed"}))
    assert refresh() and built == ["rl-swe"]
    assert json.loads(status_file.read_text())["steps"]["verify_archive"]["status"] == "completed"
    assert not refresh() and built == []
    # another invocation names other continue commands; a removed STATUS.json or memo is made again
    assert refresh("snakemake --profile y")
    status_file.unlink()
    assert refresh("snakemake --profile y")
    (job / ".work" / "views.json").write_text("garbled")
    assert not refresh("snakemake --profile y")  # read again, found equal: not rewritten
    assert built == ["rl-swe"]


def test_destinations_carry_the_url_the_verification_recorded(tmp_path: Path) -> None:
    """DONE/STATUS.json and REPORT.md link the published repos at the Hub they went to (issue 54)."""
    job, record_file = job_folder(tmp_path, "publish:\n  model: o/m\n  traces: o/t\nbase_model: o/base\n")
    (job / "verify").mkdir()
    (job / "verify/model_upload.json").write_text(json.dumps(
        {"status": "completed", "commit": "abc123", "repo_id": "o/m", "url": "http://127.0.0.1:9/o/m"}))
    status = build_status(job, record=load_record(record_file), invocation="snakemake --profile iris")
    assert status["destinations"]["model_url"] == "http://127.0.0.1:9/o/m"
    assert status["destinations"]["traces_url"] is None  # not verified: no URL claimed
    report = render_report(status | {"steps": {name: info["status"] for name, info in status["steps"].items()}})
    assert "- model_url: http://127.0.0.1:9/o/m" in report


def test_reclamation_awaiting_authority_is_remaining_work_with_the_command_that_grants_it(tmp_path: Path) -> None:
    """DONE says the sources are still there while reclamation awaits authority (issue 54)."""
    from rlkeep.reclaim import reclaim_decision
    from rlkeep.report import build_completion_record
    from rlkeep.profiles import default_invocation

    job, record_file = job_folder(tmp_path)
    record = load_record(record_file)
    _, reason = reclaim_decision(authorized=False, verify_sentinels={}, required=())
    (job / "reclaim.json").write_text(json.dumps({"status": "not_applicable", "deleted_keys": 0, "deleted_bytes": 0,
                                                  "reason": f"nothing was deleted: {reason}"}))
    done = build_completion_record(job, record)
    work = {item["step"]: item for item in done["remaining_work"]}
    assert done["steps"]["reclaim"] == "not_applicable"
    assert work["reclaim"]["status"] == "awaiting_authority"
    assert "file:///tmp/nowhere" in work["reclaim"]["remaining"]
    command = f"{default_invocation()} rl-swe/DONE --config reclaim_authorized=rl-swe"
    assert work["reclaim"]["command"] == command
    report = render_report(done)
    assert "- reclaim (awaiting_authority): " in report and f"Grant it with: `{command}`" in report

    # once reclaimed (or when nothing is held back for want of authority) it is no longer remaining
    (job / "reclaim.json").write_text(json.dumps({"status": "completed", "deleted_keys": 3, "deleted_bytes": 30}))
    assert "reclaim" not in {item["step"] for item in build_completion_record(job, record)["remaining_work"]}
