"""Benchmark: trace dataset export (rlkeep.traces.build_trace_dataset) against a naive baseline.

Input: the sync step's trace tar, generated once per size with tests/support/harbor.py
(trajectories of 20-200 agent turns, Terminus-2-sized messages and observations with terminal
noise, result.json with rollout details, panes, verifier output) and cached under --workdir.

Target: the streaming export (one pass over the tar, 200 trials per shard, bounded row groups).
Baseline: what a straightforward exporter does: extract the whole tar to disk, read every
trial with the same parsing code, keep all rows in memory, write one parquet at the end.

Each measurement runs in its own child process; peak memory is that child's ru_maxrss as
reported by os.wait4 (resource usage of the waited-for child). Full run: 5,000 and 20,000
trials for the target (memory must stay under 1 GB at both), the baseline at 5,000.
`--quick`: ~300 trials (smoke test, < 30 s with a warm cache).

Harbor mode (`--harbor`): rlkeep's export against Harbor 0.26's own `export_traces` (run in its
own interpreter: RLKEEP_HARBOR_PYTHON, else ~/.cache/rlkeep-bench/harbor/bin/python from
`make harbor-env`; the mode is skipped with a message saying so when neither exists). Both read
the same extracted trace tree (Harbor reads folders only) with the same options (episodes
`last`, subagents, instruction and verifier output) and write parquet; they run interleaved,
`--rounds` times, order reversed every other round (tests/benchmarks/peers.interleave). Per run:
wall seconds, the child's own CPU seconds (the machine is shared, so trials per CPU second is the
steadier figure) and its peak RSS (wait4). Issue 21's bar: rlkeep >= 5x Harbor's trials/s and
under 300 MB at 5,000 trials. Figures go to bench/results/traces_vs_harbor_<trials>.json.

Usage: .venv/bin/python tests/benchmarks/bench_traces.py [--quick] [--workdir DIR]
       .venv/bin/python tests/benchmarks/bench_traces.py --harbor [--trials 1000] [--rounds 2]
The last stdout line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from tests.support.harbor import add_trial_to_tar, plan_trials, trial_files  # noqa: E402

SEED = 2026
STEPS = (20, 200)
OUTCOMES = {"success": 0.4, "partial": 0.05, "failure": 0.45, "exception": 0.07, "setup_error": 0.03}
MEMORY_LIMIT_MB = 1024
WORKERS = max(1, min(2, os.cpu_count() or 1))


def _files_for(plan) -> tuple[str, dict[str, bytes]]:
    return plan.name, trial_files(plan.name, seed=SEED, outcome=plan.outcome, n_steps=plan.n_steps,
                                  task=plan.task, rollout_tokens=8)


def generate_tar(path: Path, n_trials: int) -> Path:
    """The sync tar for n_trials trials, reused when a complete one is cached."""
    marker = path.with_suffix(".done")
    spec = json.loads(json.dumps({"n_trials": n_trials, "seed": SEED, "steps": STEPS, "outcomes": OUTCOMES,
                                  "generator": 1}))  # as read back from the marker (tuples become lists)
    if path.is_file() and marker.is_file() and json.loads(marker.read_text()) == spec:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    plans = plan_trials(n_trials, seed=SEED, steps=STEPS, outcomes=OUTCOMES)
    started = time.perf_counter()
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar, \
            ProcessPoolExecutor(WORKERS) as pool:
        for name, files in pool.map(_files_for, plans, chunksize=8):
            add_trial_to_tar(tar, name, files)
    os.replace(partial, path)
    marker.write_text(json.dumps(spec))
    print(f"generated {n_trials} trials ({path.stat().st_size / 2**20:.0f} MiB) in "
          f"{time.perf_counter() - started:.0f} s -> {path}", file=sys.stderr)
    return path


# ------------------------------------------------------------------------------ child side

def _redactor():
    from rlkeep.redaction import redactor_from_environment
    return redactor_from_environment()


def run_target(source: Path, out: Path) -> dict:
    """rlkeep's export of a sync tar or an extracted trace tree, with its own CPU seconds."""
    from rlkeep.traces import build_trace_dataset

    cpu_started = time.process_time()
    manifest = build_trace_dataset(source, out, redactor=_redactor(), min_coverage=0.0)
    return {"rows": manifest["row_count"], "trials": manifest["result_count"], "shards": len(manifest["shards"]),
            "cpu_seconds": time.process_time() - cpu_started}


def run_baseline(tar_path: Path, out: Path) -> dict:
    """Extract everything, hold every row, write once (the shape of a simple exporter)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rlkeep.traces import (
        SCHEMA, MalformedTrial, Scrubber, episode_conversations, iter_trials, read_trial,
    )

    scratch = out / "extracted"
    with tarfile.open(tar_path) as tar:
        tar.extractall(scratch, filter="data")
    scrub = Scrubber(_redactor())
    all_rows: list[dict] = []
    trials = 0
    for files in iter_trials(scratch):
        content = files.read()
        trials += content.result is not None
        try:
            trial = read_trial(content, scrub, scrub.repairs)
        except MalformedTrial:
            continue
        for source, contexts, overrides in trial.sources:
            for episode, conversation in episode_conversations(contexts, "last"):
                all_rows.append(dict(trial.columns, **overrides, episode=f"episode-{episode}", trace_source=source,
                                     conversations=[{"role": r, "content": c} for r, c in conversation]))
    table = pa.Table.from_pylist(all_rows, schema=SCHEMA)
    (out / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / "data" / "train-00000-of-00001.parquet", compression="zstd")
    shutil.rmtree(scratch)
    return {"rows": len(all_rows), "trials": trials, "shards": 1}


# ------------------------------------------------------------------------------ Harbor mode

DEFAULT_HARBOR_PYTHON = Path.home() / ".cache" / "rlkeep-bench" / "harbor" / "bin" / "python"
MEMORY_BAR_MB = 300
SPEEDUP_BAR = 5.0
# Harbor's exporter with the options rlkeep's defaults match; the last stdout line is the report.
HARBOR_EXPORT = r"""
import json, sys, time
from harbor.utils.traces_utils import export_traces
cpu_started = time.process_time()
ds = export_traces(sys.argv[1], episodes="last", include_instruction=True, include_verifier_output=True,
                   use_rich_progress=False)
ds.to_parquet(sys.argv[2] + "/train.parquet")
print(json.dumps({"rows": len(ds), "cpu_seconds": time.process_time() - cpu_started}))
"""


def harbor_python() -> Path | None:
    named = os.environ.get("RLKEEP_HARBOR_PYTHON")
    candidate = Path(named) if named else DEFAULT_HARBOR_PYTHON
    return candidate if candidate.exists() else None


def extracted_tree(tar_path: Path) -> Path:
    """The trace tree of the tar (every file, as a trial folder holds them), extracted once."""
    from rlkeep.traces import safe_extract

    tree = tar_path.with_suffix(".tree")
    marker = tar_path.with_suffix(".tree-done")
    if marker.is_file() and marker.read_text() == tar_path.with_suffix(".done").read_text():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    safe_extract(tar_path, tree)
    marker.write_text(tar_path.with_suffix(".done").read_text())
    return tree


def _timed_run(command: list[str], out: Path, trials: int, env: dict[str, str] | None = None) -> dict:
    from tests.benchmarks.peers import run_timed

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    timed = run_timed(command, env=env)
    report = json.loads(timed.stdout.strip().splitlines()[-1])
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": timed.seconds, "cpu_seconds": report["cpu_seconds"], "rows": report["rows"],
            "peak_rss_mb": round(timed.maxrss_mb, 1), "trials_per_s": round(trials / timed.seconds, 1),
            "trials_per_cpu_s": round(trials / report["cpu_seconds"], 1)}


def harbor_mode(trials: int, rounds: int, workdir: Path) -> dict:
    """rlkeep and Harbor interleaved on the same tree; the figures for bench/results."""
    from tests.benchmarks.peers import Contender, interleave

    python = harbor_python()
    if python is None:
        return {"harbor_compared": False, "harbor_skipped": f"no Harbor environment: {DEFAULT_HARBOR_PYTHON} does not "
                "exist and RLKEEP_HARBOR_PYTHON is not set; run `make harbor-env` (Harbor 0.26 from a Python >= 3.12)"}
    tree = extracted_tree(generate_tar(workdir / f"trace_jobs-{trials}.tar", trials))
    hf_home = workdir / "hf-home"
    harbor_env = dict(os.environ, HF_HOME=str(hf_home), HF_DATASETS_OFFLINE="1", PYTHONPATH="")
    rlkeep = Contender("rlkeep", lambda: _timed_run(
        [sys.executable, __file__, "--child", "target-json", str(tree), str(workdir / "out-rlkeep"), "-"],
        workdir / "out-rlkeep", trials))
    harbor = Contender("harbor", lambda: _timed_run(
        [str(python), "-c", HARBOR_EXPORT, str(tree), str(workdir / "out-harbor")], workdir / "out-harbor", trials,
        harbor_env))
    compared = interleave([rlkeep, harbor], rounds)
    return {"harbor_compared": True, "harbor": harbor_version(python), **harbor_figures(compared, trials)}


def harbor_version(python: Path) -> str:
    """Harbor and its Python by version (never the environment's path, which is this machine's)."""
    probe = "import sys, importlib.metadata as m; print(m.version('harbor'), sys.version.split()[0])"
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    harbor, _, interpreter = result.stdout.strip().partition(" ")
    return f"harbor {harbor} on Python {interpreter}" if result.returncode == 0 else "harbor (version unreadable)"


def harbor_figures(compared: dict, trials: int) -> dict:
    runs = compared["runs"]

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs if run["name"] == name)

    rows = {run["name"]: run["rows"] for run in runs}
    speedup = round(median("rlkeep", "trials_per_s") / median("harbor", "trials_per_s"), 2)
    cpu_speedup = round(median("rlkeep", "trials_per_cpu_s") / median("harbor", "trials_per_cpu_s"), 2)
    rlkeep_rss = max(run["peak_rss_mb"] for run in runs if run["name"] == "rlkeep")
    return {
        "trials": trials, "input": "the same extracted trace tree for both (Harbor reads folders only)",
        "options": "episodes=last, subagents, instruction and verifier output; parquet written",
        "rounds": compared["rounds"], "subject": "rlkeep", "seconds": compared["seconds"],
        "ratio_vs": compared["ratios"], "runs": runs,
        "rows": rows, "rows_equal": rows.get("rlkeep") == rows.get("harbor"),
        "rlkeep_trials_per_s": median("rlkeep", "trials_per_s"), "harbor_trials_per_s": median("harbor", "trials_per_s"),
        "rlkeep_trials_per_cpu_s": median("rlkeep", "trials_per_cpu_s"),
        "harbor_trials_per_cpu_s": median("harbor", "trials_per_cpu_s"),
        "speedup_wall": speedup, "speedup_cpu": cpu_speedup,
        "rlkeep_peak_rss_mb": rlkeep_rss, "harbor_peak_rss_mb": max(run["peak_rss_mb"] for run in runs
                                                                     if run["name"] == "harbor"),
        "bar": f"rlkeep >= {SPEEDUP_BAR}x Harbor's trials/s and < {MEMORY_BAR_MB} MB at 5,000 trials",
        "speed_bar_met": min(speedup, cpu_speedup) >= SPEEDUP_BAR, "memory_bar_met": rlkeep_rss < MEMORY_BAR_MB,
        "bar_measured_at_5000": trials >= 5000,
    }


# ------------------------------------------------------------------------------ parent side

def measure(kind: str, tar_path: Path, workdir: Path) -> dict:
    out = workdir / f"out-{kind}-{tar_path.stem}"
    shutil.rmtree(out, ignore_errors=True)
    report = workdir / f"report-{kind}-{tar_path.stem}.json"
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, __file__, "--child", kind, str(tar_path), str(out), str(report)])
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{kind} on {tar_path} failed with exit status {process.returncode}")
    result = json.loads(report.read_text())
    shutil.rmtree(out, ignore_errors=True)
    return {**result, "seconds": round(elapsed, 2), "trials_per_s": round(result["trials"] / elapsed, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "rlkeep-bench-traces")
    parser.add_argument("--harbor", action="store_true", help="compare with Harbor's exporter (see the docstring)")
    parser.add_argument("--trials", type=int, default=1000, help="Harbor mode: trials in the tree (default 1000)")
    parser.add_argument("--rounds", type=int, default=2, help="Harbor mode: interleaved rounds (default 2)")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "TAR", "OUT", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, source, out, report = args.child
        if kind == "target-json":  # Harbor mode: the report is the last stdout line
            print(json.dumps(run_target(Path(source), Path(out))))
            return
        runner = run_target if kind == "target" else run_baseline
        Path(report).write_text(json.dumps(runner(Path(source), Path(out))))
        return

    os.environ.setdefault("HF_TOKEN", "")  # the environment redactor reads it; no real token here
    if args.harbor:
        figures = harbor_mode(args.trials, args.rounds, args.workdir)
        if figures["harbor_compared"]:
            from tests.benchmarks.peers import write_results

            path = write_results(f"traces_vs_harbor_{args.trials}", figures)
            print(f"recorded {path}", file=sys.stderr)
        else:
            print(f"harbor: {figures['harbor_skipped']}", file=sys.stderr)
        print(json.dumps({key: value for key, value in figures.items() if key != "runs"}))
        return

    sizes = [300] if args.quick else [5000, 20000]
    baseline_size = sizes[0]
    figures: dict = {"bench": "traces", "peak_memory_method": "os.wait4 ru_maxrss of the measuring child"}
    results = {}
    for size in sizes:
        tar_path = generate_tar(args.workdir / f"trace_jobs-{size}.tar", size)
        results[size] = measure("target", tar_path, args.workdir)
        print(f"target   {size:>6} trials: {results[size]}", file=sys.stderr)
    tar_path = args.workdir / f"trace_jobs-{baseline_size}.tar"
    baseline = measure("baseline", tar_path, args.workdir)
    print(f"baseline {baseline_size:>6} trials: {baseline}", file=sys.stderr)

    for size, result in results.items():
        figures[f"trials_{size}_per_s"] = result["trials_per_s"]
        figures[f"peak_rss_mb_{size}"] = result["peak_rss_mb"]
        figures[f"tar_mb_{size}"] = round((args.workdir / f"trace_jobs-{size}.tar").stat().st_size / 2**20)
    figures["trials_per_s"] = results[baseline_size]["trials_per_s"]
    figures["peak_rss_mb"] = max(result["peak_rss_mb"] for result in results.values())
    figures["baseline_trials_per_s"] = baseline["trials_per_s"]
    figures["baseline_peak_rss_mb"] = baseline["peak_rss_mb"]
    figures["baseline_trials"] = baseline_size
    figures["rows_match_baseline"] = baseline["rows"] == results[baseline_size]["rows"]
    figures["target_met"] = bool(figures["rows_match_baseline"]
                                 and all(r["peak_rss_mb"] < MEMORY_LIMIT_MB for r in results.values()))
    figures["harbor"] = "not in this mode: run with --harbor"
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
