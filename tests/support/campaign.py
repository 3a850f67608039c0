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


def render(page: Path, profile: Path, *, screenshot: Path | None = None, size: str = "1600,1000",
           fragment: str = "") -> Rendered:
    """The DOM after scripts ran, and the console messages, from one headless Chromium run
    (`fragment`: the URL's #part, as a link to a filtered index carries it)."""
    binary = chromium_path()
    assert binary, "chromium is not installed (apt-get install chromium chromium-driver; .ci/run does)"
    action = [f"--screenshot={screenshot}" if screenshot else "--dump-dom", f"--window-size={size}"]
    result = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
                             "--v=0", *action, page.resolve().as_uri() + fragment], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(dom=result.stdout, console=console)


def measured(page: Path, profile: Path, expression: str, size: str = "1400,1000") -> dict:
    """A copy of `page` that, once loaded, writes the JSON of `expression` (JavaScript) into the DOM,
    opened in Chromium at `size`: what the browser laid out, read back."""
    probe = page.with_name(f"{page.stem}.probe.html")
    script = (f"<script>addEventListener('load',function(){{var p=document.createElement('pre');p.id='probe';"
              f"p.textContent=JSON.stringify({expression});document.body.appendChild(p);}});</script>")
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    try:
        dom = render(probe, profile, size=size).dom
    finally:
        probe.unlink()
    found = re.search(r'<pre id="probe">([^<]*)</pre>', dom)
    assert found, "the probe script did not run"
    return json.loads(found[1].replace("&quot;", '"').replace("&amp;", "&"))


def measured_at_width(page: Path, profile: Path, expression: str, width: int, height: int = 900) -> dict:
    """`expression` read back from `page` laid out `width` CSS pixels wide: the page in an iframe of that
    width (a headless window is at least 500 px wide), which posts the JSON to the frame around it."""
    probe = page.with_name(f"{page.stem}.probe{width}.html")
    frame = page.with_name(f"{page.stem}.frame{width}.html")
    script = (f"<script>addEventListener('load',function(){{parent.postMessage(JSON.stringify({expression}),'*');}});"
              "</script>")
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    frame.write_text("<!DOCTYPE html><html><body style=\"margin:0\"><pre id=\"probe\"></pre><script>"
                     "addEventListener('message',function(e){document.getElementById('probe').textContent=e.data;});"
                     f"</script><iframe src=\"{probe.name}\" style=\"width:{width}px;height:{height}px;border:0\">"
                     "</iframe></body></html>")
    binary = chromium_path()
    assert binary, "chromium is not installed (apt-get install chromium chromium-driver; .ci/run does)"
    try:
        result = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                                 f"--window-size={max(width, 500) + 40},{height + 200}", "--dump-dom",
                                 frame.resolve().as_uri()], capture_output=True, text=True, timeout=180)
    finally:
        probe.unlink()
        frame.unlink()
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="probe">([^<]+)</pre>', result.stdout)
    assert found, "the probe script did not run"
    return json.loads(found[1].replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


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


# --------------------------------------------------------------------------- a campaign of many runs

KINDS = ("rl", "sft", "datagen", "eval")
USERS = ("ana", "bo", "chen", "dara", "eli", "femi")
# the mix of a campaign: each kind in every state
MIX = ("done", "done", "blocked", "in_progress", "not_started")


def kind_record(job: str, kind: str, user: str) -> dict:
    """A valid record of `kind`: only the sections that kind takes (rlkeep.kinds)."""
    data = record(job, user=user, kind=kind, base_model=f"org/base-{sum(map(ord, job)) % 4 * 8 + 7}b",
                  chain=[f"/{user}/{job}", f"/{user}/{job}-r1"])
    if kind != "rl":
        data.pop("checkpoint")
        data["publish"] = {"traces": f"demo/{job}-traces", "private": True} if kind == "datagen" else None
        if data["publish"] is None:
            data.pop("publish")
    return data


def reward_rows(job: str, seed: int, steps: int) -> str:
    """metrics.csv with a noisy rising reward, different per run."""
    import random

    rng = random.Random(seed)
    top, rate = 0.4 + rng.random() * 0.5, 0.02 + rng.random() * 0.06
    lines = ["global_step,attempt,timing/step,timing/generate,reward/avg_raw_reward"]
    for step in range(1, steps + 1):
        value = top * (1 - 2.718 ** (-rate * step)) + rng.gauss(0, 0.04)
        lines.append(f"{step},{job},100,60,{value:.4f}")
    return "\n".join(lines) + "\n"


def campaign_run(data_root: Path, index: int) -> tuple[str, str, str]:
    """Run number `index` of a campaign: (job, kind, intended state)."""
    kind, user, state = KINDS[index % 4], USERS[index % 6], MIX[index % 5]  # 4 and 5: all 20 pairs in 20 runs
    job = f"run-{index:03d}-{kind}"  # record order mixes the kinds and the states
    write_record(data_root, kind_record(job, kind, user))
    if state == "not_started":
        return job, kind, state
    job_dir = data_root / job
    times = {"started_ms": 1_764_000_000_000 + index * 3_600_000, "finished_ms": 1_764_000_000_000
             + index * 3_600_000 + (5 + index % 40) * 3_600_000} if index % 3 else {}
    _write(job_dir / "chain.json", {"status": "completed", "job": job, "attempts": [
        {"id": f"/{user}/{job}", "slug": job, "state": "failed", "exit_code": 1, **times}]})
    _write(job_dir / "retries.json", {"status": "completed", "stopped": []})
    if state == "blocked":
        reason = (f"the store s3://runs/iris/{job} is not listable: AccessDenied (check the role's "
                  "s3:ListBucket on runs/iris/)\nrlkeep stopped before copying anything")
        _write(job_dir / "logs" / "sync_logs.log", f"step sync_logs for job {job}\nrlkeep: {reason}\n")
        return job, kind, state
    steps = 40 + index % 160
    _write(job_dir / "sync" / "logs.manifest.json", {"status": "completed", "bytes": 1_000_000 * (1 + index % 50),
                                                     "objects_skipped": [], "attempts": []})
    _write(job_dir / "logs" / "sync_logs.log", "ok\n")
    if kind == "rl" or kind == "sft":
        _write(job_dir / "metrics" / "metrics.csv", reward_rows(job, index, steps))
    if kind == "rl":
        chosen = (steps // 20) * 20 - (20 if index % 2 else 0)
        _write(job_dir / "checkpoint" / "selected.json", {
            "status": "completed", "step": chosen, "rule": {"kind": "latest"},
            "rationale": f"latest rule: step {chosen} is the highest complete checkpoint"})
    if state == "done":
        for step in STEPS:
            path = job_dir / step.evidence
            if not path.exists():
                _write(path, {"status": "not_applicable" if step.name == "reclaim" else "completed"}
                       if step.evidence.endswith(".json") else "ok\n")
        if kind == "rl":
            _write(job_dir / "export.json", {"status": "completed", "format": "hf", "files": [
                {"path": "model.safetensors", "size": 3_000_000_000 + index}]})
        _write(job_dir / "DONE", {"job": job, "completed_at": f"2026-11-{1 + index % 28:02d}T12:00:00Z"})
    return job, kind, state


def campaign_root(data_root: Path, runs: int = 300) -> dict[str, tuple[str, str]]:
    """A campaign of `runs` records, every kind in every state: {job: (kind, intended state)}."""
    made = {}
    for index in range(runs):
        job, kind, state = campaign_run(data_root, index)
        made[job] = (kind, state)
    return made
