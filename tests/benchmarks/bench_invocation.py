"""The fixed cost of an invocation (issue 33), this checkout beside the one the issue was filed on.

Two commands a user runs, each timed whole, interleaved (one warm-up round, then --rounds):
  - the demo from a fresh data root: `python -m rlkeep demo --data-root <new folder>` (its store,
    Hub and Iris stand-in started, the run seeded, `snakemake ... rl-demo/DONE`, the services
    stopped); target: at least 1.5x faster than the baseline;
  - the no-op over that finished run: `snakemake --profile local rl-demo/DONE` in the data root the
    checkout's own demo left; targets: <= 1.5 s, Snakemake's own peak memory < 150 MB (VmHWM read at
    its exit by tests/support/memory.py's wrapper).

The baseline (default 49ad775, the last commit before issue 33's first) is exported with `git
archive` to the benchmark cache, outside the tracked tree; both checkouts run on one interpreter
(their dependencies are the same). By default that is this one, the install `make setup` builds,
SLURM executor plugin included (it adds pandas to every Snakemake start); `--without-slurm-plugin`
runs on a venv beside the peers' that sees every package of this one but the plugin, and
`--python PATH` picks another.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

REPO = peers.REPO
sys.path.insert(0, str(REPO))
from tests.support.memory import exit_facts, exit_facts_script  # noqa: E402

BASELINE = "49ad775"


def checkout(commit: str) -> Path:
    """`git archive` of `commit` in the benchmark cache (made once; a commit never changes)."""
    full = subprocess.run(["git", "-C", str(REPO), "rev-parse", commit], capture_output=True, text=True,
                          check=True).stdout.strip()
    target = peers.bench_env().parent / "checkouts" / full[:12]
    if not (target / "Snakefile").is_file():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", full], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one round, no warm-up")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--python", type=Path, default=None,
                        help="default: this one, the install `make setup` builds (SLURM plugin included)")
    parser.add_argument("--without-slurm-plugin", action="store_true",
                        help="run on a venv of this one's packages but the SLURM executor plugin")
    args = parser.parse_args()
    peers.stop_on_sigterm()
    rounds = args.rounds or (1 if args.quick else 3)
    warmup = 0 if args.quick else 1
    python = args.python or (peers.python_without_slurm_plugin() if args.without_slurm_plugin else Path(sys.executable))
    checkouts = {"this checkout": REPO, f"baseline {args.baseline}": checkout(args.baseline)}
    work_root = Path(os.environ.get("RLKEEP_BENCH_TMP", tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix="bench-invocation-", dir=work_root) as tmp:
        names = iter(range(1_000_000))
        finished: dict[str, Path] = {}

        def env_of(repo: Path) -> dict[str, str]:
            return {**os.environ, "PYTHONPATH": str(repo / "scripts")}

        def demo(name: str, repo: Path):
            def run() -> dict[str, Any]:
                data_root = Path(tmp) / f"demo-{next(names)}"  # never a folder just deleted
                timed = peers.run_timed([str(python), "-m", "rlkeep", "demo", "--data-root", str(data_root)],
                                        env=env_of(repo), cwd=repo)
                done = json.loads((data_root / "rl-demo" / "DONE").read_text())
                # reclamation awaits the authority the demo does not give: not work the demo left
                left = [w for w in done.get("remaining_work") or [] if w.get("status") != "awaiting_authority"]
                if left:
                    raise RuntimeError(f"{name}: the demo left work: {left}")
                previous = finished.get(name)
                finished[name] = data_root
                if previous is not None:
                    shutil.rmtree(previous, ignore_errors=True)
                return {"seconds": timed.seconds}
            return peers.Contender(name, run)

        def no_op(name: str, repo: Path):
            def run() -> dict[str, Any]:
                facts_file = Path(tmp) / f"facts-{next(names)}.json"
                timed = peers.run_timed(
                    [str(python), "-c", exit_facts_script("snakemake"), str(facts_file), "--snakefile",
                     str(repo / "Snakefile"), "--profile", str(repo / "profiles" / "local"), "rl-demo/DONE"],
                    env=env_of(repo), cwd=finished[name])
                facts = exit_facts(facts_file)
                return {"seconds": timed.seconds, "snakemake_own_peak_mb": round(facts["peak_kb"] / 1024, 1),
                        "pandas_loaded": "pandas" in facts["top_level_modules"]}
            return peers.Contender(name, run)

        demos = peers.interleave([demo(name, repo) for name, repo in checkouts.items()], rounds, warmup=warmup)
        no_ops = peers.interleave([no_op(name, repo) for name, repo in checkouts.items()], max(rounds, 5),
                                  warmup=1)
    peaks = {name: [run["snakemake_own_peak_mb"] for run in no_ops["runs"] if run["name"] == name]
             for name in checkouts}
    figures = {
        "python": peers.shown(python), "venv": peers.venv_label(python), "baseline": args.baseline,
        "demo": {"ratio_vs": demos["ratios"], "seconds": demos["seconds"], "runs": demos["runs"]},
        "no_op": {"ratio_vs": no_ops["ratios"], "seconds": no_ops["seconds"],
                  "snakemake_own_peak_mb": {name: max(values) for name, values in peaks.items()},
                  "runs": no_ops["runs"]},
        "targets": {"demo_speedup_at_least": 1.5, "no_op_seconds_at_most": 1.5, "snakemake_own_peak_mb_below": 150},
    }
    path = peers.write_results("bench_invocation_quick" if args.quick else "bench_invocation", figures)
    this = "this checkout"
    print(json.dumps({"demo_speedup_median": round(1 / demos["ratios"][f"baseline {args.baseline}"]["median"], 2),
                      "demo_seconds": demos["seconds"], "no_op_seconds": no_ops["seconds"][this],
                      "no_op_peak_mb": figures["no_op"]["snakemake_own_peak_mb"], "results": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
