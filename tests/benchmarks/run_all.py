"""`make bench`: run every tests/benchmarks/bench_*.py (each measures its target and its
baseline side by side in one run) and write the figures to <out>/results.json and RESULTS.md.

Each benchmark prints one JSON object as its last stdout line. `--quick` passes --quick on.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_one(path: Path, quick: bool) -> dict:
    started = time.monotonic()
    command = [sys.executable, str(path), *(["--quick"] if quick else [])]
    result = subprocess.run(command, capture_output=True, text=True, cwd=HERE.parents[1])
    elapsed = round(time.monotonic() - started, 1)
    lines = [line for line in result.stdout.splitlines() if line.strip().startswith("{")]
    if result.returncode != 0 or not lines:
        return {"bench": path.stem, "error": (result.stderr or result.stdout)[-2000:], "exit": result.returncode,
                "wall_s": elapsed}
    figures = json.loads(lines[-1])
    figures.setdefault("bench", path.stem)
    figures["wall_s"] = elapsed
    return figures


def render(results: list[dict]) -> str:
    lines = ["# Benchmark results", "", f"Machine: {platform.machine()}, Python {platform.python_version()}", ""]
    for figures in results:
        lines.append(f"## {figures['bench']}")
        lines.append("")
        for key, value in figures.items():
            if key != "bench":
                lines.append(f"- {key}: {value}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("only", nargs="*", help="bench names (e.g. bench_sync) to run; default all")
    args = parser.parse_args()
    benches = sorted(HERE.glob("bench_*.py"))
    if args.only:
        benches = [b for b in benches if b.stem in args.only]
    results = []
    for bench in benches:
        print(f"running {bench.stem}{' (quick)' if args.quick else ''} ...", flush=True)
        figures = run_one(bench, args.quick)
        print(json.dumps(figures), flush=True)
        results.append(figures)
    args.out.mkdir(parents=True, exist_ok=True)
    previous = args.out / "results.json"
    if args.only and previous.is_file():  # a partial run keeps the other benches' last figures
        ran = {r["bench"] for r in results}
        kept = [r for r in json.loads(previous.read_text()) if r.get("bench") not in ran]
        results = sorted(kept + results, key=lambda r: str(r.get("bench")))
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "RESULTS.md").write_text(render(results))
    failed = [r["bench"] for r in results if "error" in r or r.get("target_met") is False]
    print(f"wrote {args.out / 'results.json'}; targets missed or errors: {failed or 'none'}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
