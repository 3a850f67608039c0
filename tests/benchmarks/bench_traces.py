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

Usage: .venv/bin/python tests/benchmarks/bench_traces.py [--quick] [--workdir DIR]
The last stdout line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
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


def run_target(tar_path: Path, out: Path) -> dict:
    from rlkeep.traces import build_trace_dataset

    manifest = build_trace_dataset(tar_path, out, redactor=_redactor(), min_coverage=0.0)
    return {"rows": manifest["row_count"], "trials": manifest["result_count"], "shards": len(manifest["shards"])}


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


# ------------------------------------------------------------------------------ Harbor, when it can run

HARBOR_MIN_PYTHON = (3, 12)  # Harbor 0.26 (`harbor traces export`) requires Python >= 3.12


def python_for_harbor() -> str | None:
    """An interpreter that can run Harbor: on PATH, or under pyenv's versions folder."""
    import glob

    candidates = [shutil.which(f"python3.{minor}") for minor in range(HARBOR_MIN_PYTHON[1], 20)]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")))
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run([candidate, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                               text=True, check=False)
        if probe.returncode == 0 and tuple(map(int, probe.stdout.split())) >= HARBOR_MIN_PYTHON:
            return candidate
    return None


def harbor_comparison() -> dict:
    """The side-by-side run against Harbor's own exporter is not part of this bench: say why, and
    whether an interpreter that could run it is on the machine."""
    interpreter = python_for_harbor()
    if interpreter is None:
        return {"harbor_compared": False,
                "harbor_skipped": f"Harbor 0.26 needs Python >= {'.'.join(map(str, HARBOR_MIN_PYTHON))} "
                                  "and none is on this machine (PATH or pyenv)"}
    return {"harbor_compared": False, "harbor_python": interpreter,
            "harbor_skipped": "a Python that can run Harbor is present, but this bench does not install Harbor "
                              "(its own environment, never .venv) nor run `harbor traces export`; the comparison is "
                              "the baseline above"}


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
    parser.add_argument("--child", nargs=4, metavar=("KIND", "TAR", "OUT", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, tar_path, out, report = args.child
        runner = run_target if kind == "target" else run_baseline
        Path(report).write_text(json.dumps(runner(Path(tar_path), Path(out))))
        return

    os.environ.setdefault("HF_TOKEN", "")  # the environment redactor reads it; no real token here
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
    figures.update(harbor_comparison())
    print(f"harbor: {figures['harbor_skipped']}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
