"""What each of rlkeep's Snakemake process patches (rlkeep.snakemake_process) gains, on the install
users get: `make setup`'s .venv, SLURM executor plugin included (this interpreter by default).

Variants of one checkout, told apart only by RLKEEP_NO_PATCHES: every patch on, every patch off,
and each patch off alone (its gain is that variant's time minus the all-on time, round by round).
Commands, each timed whole (wall seconds, and the CPU seconds of the command and the children it
waited for, which another developer's load on a shared machine disturbs far less) and interleaved
(order reversed every other round, load recorded):
  - the no-op over a finished demo: `snakemake --profile local rl-demo/DONE` in a data root the demo left;
  - one job over it: the same with `--forcerun done` (the smallest invocation that runs a job: the
    rescheduling timers exist only in those);
  - the demo from a fresh data root: `python -m rlkeep demo --data-root <new folder>`.
A patch stays when it gains at least KEEP_SECONDS or KEEP_FRACTION of some command it serves.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

REPO = peers.REPO
sys.path.insert(0, str(REPO / "scripts"))
from rlkeep.snakemake_process import PATCHES, SWITCH  # noqa: E402

KEEP_SECONDS = 0.3
KEEP_FRACTION = 0.10


def variants() -> dict[str, str]:
    """name -> RLKEEP_NO_PATCHES value."""
    return {"all on": "0", "all off": "1", **{f"without {name}": name for name in PATCHES}}


def run_timed(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Wall and CPU seconds (user + system, the command's and its waited-for children's) of one run."""
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:
            process.kill()
            process.wait()
            raise
        seconds = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(command[:4])} failed: {err.read()[-2000:].decode(errors='replace')}")
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime}


def gains(runs: list[dict[str, Any]], measure: str = "seconds") -> dict[str, dict[str, float]]:
    """Per patch: how much more `measure` its variant took than "all on" in the same round
    (min/median/max), and the median as a fraction of the all-on median; "all off" likewise."""
    by_round: dict[int, dict[str, float]] = {}
    for run in runs:
        if not run.get("warmup"):
            by_round.setdefault(run["round"], {})[run["name"]] = run[measure]
    base = statistics.median(r["all on"] for r in by_round.values())
    out = {}
    for name in variants():
        if name == "all on":
            continue
        deltas = [r[name] - r["all on"] for r in by_round.values()]
        median = statistics.median(deltas)
        out[name] = {"min": round(min(deltas), 3), "median": round(median, 3), "max": round(max(deltas), 3),
                     "fraction_of_command": round(median / base, 3)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the no-op and the one job")
    parser.add_argument("--demo-rounds", type=int, default=None)
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="the interpreter of the commands (default: this one, `make setup`'s .venv)")
    parser.add_argument("--no-demo", action="store_true", help="time the no-op only")
    args = parser.parse_args()
    peers.stop_on_sigterm()
    rounds = args.rounds or (3 if args.quick else 7)
    demo_rounds = args.demo_rounds or (1 if args.quick else 2)
    python = args.python
    work_root = Path(os.environ.get("RLKEEP_BENCH_TMP", tempfile.gettempdir()))
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-patches-", dir=work_root) as tmp:
        names = iter(range(1_000_000))
        finished: list[Path] = []

        def demo(name: str, switch: str) -> peers.Contender:
            def run() -> dict[str, Any]:
                data_root = Path(tmp) / f"demo-{next(names)}"
                timed = run_timed([str(python), "-m", "rlkeep", "demo", "--data-root", str(data_root)],
                                  env={**env, SWITCH: switch}, cwd=REPO)
                done = json.loads((data_root / "rl-demo" / "DONE").read_text())
                # reclamation awaits the authority the demo does not give: not work the demo left
                left = [w for w in done.get("remaining_work") or [] if w.get("status") != "awaiting_authority"]
                if left:
                    raise RuntimeError(f"{name}: the demo left work: {left}")
                finished.append(data_root)
                while len(finished) > 1:
                    shutil.rmtree(finished.pop(0), ignore_errors=True)
                return timed
            return peers.Contender(name, run)

        def snakemake(name: str, switch: str, *extra: str) -> peers.Contender:
            def run() -> dict[str, Any]:
                return run_timed([str(python), "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                                  "--profile", str(REPO / "profiles" / "local"), "rl-demo/DONE", *extra],
                                 env={**env, SWITCH: switch}, cwd=finished[-1])
            return peers.Contender(name, run)

        def summary(timed: dict[str, Any]) -> dict[str, Any]:
            cpu = {name: peers._spread([r["cpu_seconds"] for r in timed["runs"] if r["name"] == name and
                                        not r.get("warmup")]) for name in variants()}
            return {"seconds": timed["seconds"], "cpu_seconds": cpu, "gain_seconds": gains(timed["runs"]),
                    "gain_cpu_seconds": gains(timed["runs"], "cpu_seconds"), "runs": timed["runs"]}

        demo("first", "0").run()  # the finished run the no-op and the one job start from
        results["no_op"] = summary(peers.interleave([snakemake(n, s) for n, s in variants().items()], rounds,
                                                    warmup=1))
        results["one_job"] = summary(peers.interleave(
            [snakemake(n, s, "--forcerun", "done") for n, s in variants().items()], rounds))
        if not args.no_demo:
            results["demo"] = summary(peers.interleave([demo(n, s) for n, s in variants().items()], demo_rounds))
    figures = {
        "python": peers.shown(python), "venv": peers.venv_label(python),
        "keep_rule": f"a patch stays when it gains >= {KEEP_SECONDS} s or >= {KEEP_FRACTION:.0%} of a command",
        "note": "2-core machine shared with other developers' tests and benchmarks: see loadavg_before per run",
        **results,
    }
    path = peers.write_results("bench_patches_quick" if args.quick else "bench_patches", figures)
    print(json.dumps({"bench": "patches", "python": peers.shown(python), "venv": figures["venv"],
                      **{command: {"all_on_seconds": results[command]["seconds"]["all on"]["median"],
                                   "gain_seconds_median": {n: g["median"] for n, g in results[command]["gain_seconds"].items()},
                                   "gain_cpu_seconds_median": {n: g["median"] for n, g in
                                                               results[command]["gain_cpu_seconds"].items()}}
                         for command in results}, "results": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
