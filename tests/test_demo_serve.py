"""After `rlkeep demo` its store and Hub are stopped, so the README's `rlkeep restore rl-demo` and
`rlkeep audit` had nothing to talk to. The demo's closing lines print the commands that start them
again around each (`rlkeep demo --serve COMMAND`); followed as printed, both work."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

JOB = "rl-demo"


def test_the_demo_prints_commands_that_restore_and_audit_it_with_its_services_started_again(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "HF_"))}
    demo = subprocess.run([sys.executable, "-m", "rlkeep", "demo", "--data-root", "demo-data"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env=env)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    lines = demo.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "start them again around the command" in line)
    restore, audit = (shlex.split(line) for line in lines[start + 1:start + 3])
    assert restore[-5:] == ["rlkeep", "restore", JOB, "--to", f"{JOB}-restored"] and "--serve" in restore
    assert audit[-2:] == ["rlkeep", "audit"] and "--serve" in audit
    data_root = tmp_path / "demo-data"

    # without the services, the store cannot be reached: the reason the commands exist
    alone = subprocess.run([sys.executable, "-m", "rlkeep", "restore", JOB, "--to", "alone"], cwd=data_root,
                           capture_output=True, text=True, timeout=300, env=env)
    assert alone.returncode == 1

    restored = subprocess.run(restore, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert restored.returncode == 0, restored.stderr[-3000:]
    tree = data_root / f"{JOB}-restored"
    assert (tree / "MANIFEST").read_bytes() == (data_root / JOB / "archive" / "MANIFEST").read_bytes()
    assert (tree / "logs").is_dir() and (tree / "trace_jobs").is_dir()

    audited = subprocess.run(audit, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert f"audit [1/1] {JOB}: ok" in audited.stderr
    written = json.loads((data_root / JOB / "verify" / "audit.json").read_text())
    assert written["status"] == "ok" and written["unreached"] == []
    assert any(line.startswith("model demo/rl-demo") for line in written["checked"])
    assert any(line.startswith("archive s3://runs/archives/") for line in written["checked"])
