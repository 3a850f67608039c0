"""Job folders made by hand for the campaign tests, and headless Chromium driven by its command line."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

from rlkeep.pipeline import STEPS

BLOCKED_REASON = "the store s3://runs/iris/rl-stuck is not listable: AccessDenied <script>alert(1)</script>"


def record(job: str, **overrides) -> dict:
    base = {"job": job, "user": "demo", "scheduler": "iris", "cluster": "cw-test",
            "chain": [f"/demo/{job}", f"/demo/{job}-r1"], "store": f"s3://runs/iris/{job}",
            "tracker_url": f"https://wandb.ai/team/project/runs/{job}",
            "checkpoint": {"interval": 20, "rule": {"kind": "latest"}},
            "publish": {"model": f"demo/{job}", "traces": f"demo/{job}-traces", "private": True},
            "base_model": "demo/base", "archive": {"dest": "s3://runs/archives"}}
    base.update(overrides)
    return base


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)


def write_record(data_root: Path, data: dict) -> Path:
    path = data_root / "records" / f"{data['job']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def chain(job: str) -> dict:
    return {"status": "completed", "job": job, "attempts": [
        {"id": f"/demo/{job}", "slug": job, "state": "failed", "exit_code": 1},
        {"id": f"/demo/{job}-r1", "slug": f"{job}-r1", "state": "killed", "exit_code": None}],
        "unrecorded": [{"id": f"/demo/{job}-r9", "state": "running", "blocks_checkpoint_reads": True}]}


def completed_run(data_root: Path, job: str = "rl-done") -> Path:
    """Every step's evidence, as a finished run leaves it (no metric plot)."""
    write_record(data_root, record(job))
    job_dir = data_root / job
    for step in STEPS:
        status = "not_applicable" if step.name == "reclaim" else "completed"
        _write(job_dir / step.evidence, {"status": status} if step.evidence.endswith(".json") else "ok\n")
    _write(job_dir / "chain.json", chain(job))
    _write(job_dir / "retries.json", {"status": "completed", "stopped": [
        {"id": f"/demo/{job}-r1", "state_before": "pending", "state_after": "killed"}]})
    _write(job_dir / "sync" / "logs.manifest.json", {"status": "completed", "bytes": 3000, "objects_skipped": [
        {"key": "ckpts/global_step_20/model.pt", "size": 500, "reason": "excluded_weights"}], "attempts": []})
    _write(job_dir / "sync" / "trace_jobs.manifest.json", {"status": "completed", "bytes": 7000,
                                                           "objects_skipped": []})
    _write(job_dir / "checkpoint" / "candidates.json", {"status": "completed", "candidates": [
        {"step": 20, "complete": True, "sources": ["fsdp"], "reasons": ["fsdp: complete"]},
        {"step": 40, "complete": True, "sources": ["fsdp", "hf_export"], "reasons": ["hf_export: complete"]}]})
    _write(job_dir / "checkpoint" / "selected.json", {"status": "completed", "step": 40, "rule": {"kind": "latest"},
                                                      "rationale": "latest rule: the last complete save"})
    _write(job_dir / "metrics" / "attempts.json", {"attempts_without_metrics": [
        {"attempt": job, "reason": "empty"}]})
    _write(job_dir / "verify" / "model.json", {"status": "completed", "repo_id": f"demo/{job}", "commit": "abc123"})
    _write(job_dir / "verify" / "traces.json", {"status": "completed", "repo_id": f"demo/{job}-traces",
                                                "commit": "def456"})
    _write(job_dir / "verify" / "archive.json", {"status": "completed", "dest": "s3://runs/archives"})
    _write(job_dir / "archive" / "MANIFEST", "run=x kind=rl kept=2files\nkept\t10\ta\nkept\t20\tb\nskipped\t5\tc\tcache\n")
    _write(job_dir / "reclaim.json", {"status": "not_applicable", "deleted_bytes": 0, "deleted_keys": 0,
                                      "reason": "nothing was deleted: not authorized"})
    _write(job_dir / "metrics" / "metrics.csv", "global_step,attempt,timing/step,timing/generate,reward/avg_raw_reward\n"
           f"1,{job},100,60,0.25\n2,{job},200,150,0.5\n")
    _write(job_dir / "DONE", {"job": job})
    _write(job_dir / "REPORT.md", "# report\n")
    return job_dir


def blocked_run(data_root: Path, job: str = "rl-stuck", reason: str = BLOCKED_REASON) -> Path:
    """The chain captured and the retries stopped, then sync_logs failed with a reason."""
    write_record(data_root, record(job))
    job_dir = data_root / job
    _write(job_dir / "chain.json", chain(job))
    _write(job_dir / "retries.json", {"status": "completed", "stopped": []})
    _write(job_dir / "logs" / "sync_logs.log", f"step sync_logs for job {job}\nrlkeep: {reason}\n")
    return job_dir


def not_started(data_root: Path, job: str = "rl-later") -> None:
    write_record(data_root, record(job))


# --------------------------------------------------------------------------- Chromium


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Rendered:
    dom: str
    console: list[str]  # every console message the page produced (errors, warnings, logs)


def render(page: Path, profile: Path, *, screenshot: Path | None = None, size: str = "1600,1000") -> Rendered:
    """The DOM after scripts ran, and the console messages, from one headless Chromium run."""
    binary = chromium_path()
    assert binary, "chromium is not installed (apt-get install chromium chromium-driver; .ci/run does)"
    action = [f"--screenshot={screenshot}", f"--window-size={size}"] if screenshot else ["--dump-dom"]
    result = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                             "--v=0", *action, page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(dom=result.stdout, console=console)


HREF = re.compile(r"""\b(?:href|src)="([^"]*)\"""")


def local_links(html_text: str) -> list[str]:
    """Every href/src that is not a remote URL, a data: URI or a fragment."""
    links = []
    for raw in HREF.findall(html_text):
        value = raw.replace("&amp;", "&")
        if value.startswith(("http://", "https://", "data:", "#", "mailto:")):
            continue
        links.append(value)
    return links


def resolve(page: Path, link: str) -> Path:
    return (page.parent / unquote(urlparse(link).path)).resolve()
