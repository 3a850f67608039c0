"""The reliability figures for the README table: faults injected (by kind), kills survived, bad inputs
tried, secrets planted, and what was lost or leaked.

    .venv/bin/python tests/reliability/figures.py [--soak] [--from RECORDS.jsonl] [--out bench/reliability.json]

Runs the suite (`pytest tests/reliability`, with RLKEEP_SOAK=1 under --soak) with the tests recording
what they measured (tests/reliability/figures_log.py), adds it up, writes the JSON file and prints it as
the last line. With --from it only adds up records of an earlier run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.reliability.figures_log import ENV  # noqa: E402


def run_suite(records: Path, soak: bool) -> dict[str, Any]:
    env = {**os.environ, ENV: str(records)}
    if soak:
        env["RLKEEP_SOAK"] = "1"
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:cacheprovider"],
                            cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    summary = next((line for line in reversed(result.stdout.splitlines()) if re.search(r"\d+ (passed|failed)", line)), "")
    sys.stderr.write(result.stdout[-3000:])
    counts = {name: int(number) for number, name in re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed|error)", summary)}
    return {"exit_status": result.returncode, "seconds": round(seconds, 1), "tests": counts, "soak": soak}


def add_up(lines: list[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_kind.setdefault(line["kind"], []).append(line)
    store, hub = Counter(), Counter()
    for item in by_kind.get("store_faults", []):
        store.update(item["injected"])
    for item in by_kind.get("hub_faults", []):
        hub.update(item["injected"])
    kills = by_kind.get("kills", [])
    secrets = by_kind.get("secrets", [])
    bad = sorted({item["case"] for item in by_kind.get("bad_input", [])})
    lost = sum(int(item.get("lost", 0)) for items in by_kind.values() for item in items)
    leaked = sum(int(item.get("leaked", 0)) + int(item.get("flagged", 0)) for item in secrets)
    return {
        "bench": "reliability",
        "faults_injected": {"object_store": dict(sorted(store.items())), "hub": dict(sorted(hub.items())),
                            "total": sum(store.values()) + sum(hub.values())},
        "kills_survived": sum(int(item["survived"]) for item in kills),
        "kill_points": sorted({point for item in kills for point in item["points"]}),
        "bad_inputs_tried": len(bad),
        "bad_inputs": bad,
        "secrets_planted": sum(int(item["planted"]) + int(item.get("example_secrets", 0)) for item in secrets),
        "secret_kinds": max((int(item["kinds"]) for item in secrets), default=0),
        "artifact_types": max((int(item["artifact_types"]) for item in secrets), default=0),
        "concurrent_runs": sum(int(item["runs"]) for item in by_kind.get("concurrency", [])),
        "stops_survived": sum(int(item["survived"]) for item in by_kind.get("stops", [])),
        "stop_points": sorted({point for item in by_kind.get("stops", []) for point in item["points"]}),
        "disk_full_refusals": sum(int(item["refusals"]) for item in by_kind.get("disk_full", [])),
        "disk_full_steps": sorted({step for item in by_kind.get("disk_full", []) for step in item["steps"]}),
        "store_behaviour": {item["case"]: sum(int(n) for n in item["injected"].values())
                            for item in by_kind.get("store_behaviour", [])},
        "load_runs": sum(int(item["runs"]) for item in by_kind.get("load", [])),
        "load_runs_done": sum(int(item["done"]) for item in by_kind.get("load", [])),
        "load_faults_injected": sum(int(item["injected"]) for item in by_kind.get("load", [])),
        "load_duplicated": sum(int(item["duplicated"]) for item in by_kind.get("load", [])),
        "clock_skew_files_redated": sum(int(item["files_redated"]) for item in by_kind.get("clock_skew", [])),
        "clock_skew_jobs_redone": sum(int(item["redone"]) for item in by_kind.get("clock_skew", [])),
        "lost": lost,
        "leaked": leaked,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="records of an earlier run (JSON lines)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "reliability.json")
    parser.add_argument("--soak", action="store_true", help="include the slow soak variants (RLKEEP_SOAK=1)")
    args = parser.parse_args(argv)
    suite: dict[str, Any] | None = None
    if args.source is not None:
        records = args.source
    else:
        records = Path(tempfile.mkstemp(prefix="rlkeep-reliability-", suffix=".jsonl")[1])
        suite = run_suite(records, args.soak)
    lines = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    figures = add_up(lines)
    if suite is not None:
        figures["suite"] = suite
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(json.dumps(figures, sort_keys=True))
    return 0 if suite is None or suite["exit_status"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
