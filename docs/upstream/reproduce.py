"""Reproductions of the two Snakemake exit costs rlkeep works around (rlkeep.snakemake_process),
against stock Snakemake: `python reproduce.py` with `snakemake` on PATH's interpreter (this one).

1. timers: after a run that executed a job, the scheduler's rate-limit timer (armed after every
   scheduling round, 1 s with the default --max-jobs-per-timespan 100/1s) is a non-daemon thread, so
   the interpreter waits for it after the workflow finished. Printed: the non-daemon timers pending
   when `onsuccess` runs, and how long the process waited between `onsuccess` and its exit handlers.
   With snakemake-daemon-rescheduling-timer.patch: 0 timers, ~0 s.
2. final collection: the interpreter's last garbage collection walks the whole DAG at exit. Printed:
   the wall time of `snakemake -n` over JOBS jobs, stock and with `gc.freeze()` in an exit handler
   (what snakemake-skip-final-collection.patch does in `main`).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOBS = 3000
SNAKEFILE = r'''
import atexit, gc, os, threading, time

MARK = {}

def pending_timers():
    return sum(1 for t in threading.enumerate() if isinstance(t, threading.Timer) and not t.daemon
               and not t.finished.is_set())

def report():
    if "onsuccess" in MARK:
        print(f"timers pending at onsuccess: {MARK['timers']}; waited {time.monotonic() - MARK['onsuccess']:.2f} s "
              "between onsuccess and the exit handlers", flush=True)

atexit.register(report)
if os.environ.get("FREEZE_AT_EXIT"):
    atexit.register(gc.freeze)

rule all:
    input: expand("out/{i}.txt", i=range(int(config.get("jobs", 1))))

rule one:
    output: "out/{i}.txt"
    shell: "sleep 1.3; echo {wildcards.i} > {output}"

onsuccess:
    MARK["onsuccess"] = time.monotonic()
    MARK["timers"] = pending_timers()
'''


def run(folder: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "snakemake", "-c1", *args], cwd=folder, capture_output=True,
                            text=True, env={**os.environ, **(env or {})}, check=True)
    return time.monotonic() - start, result.stdout + result.stderr


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "Snakefile").write_text(SNAKEFILE)
        for _ in range(3):
            _, output = run(folder, "--forceall")
            print("1.", next(line for line in output.splitlines() if line.startswith("timers pending")))
        stock, frozen = [], []
        for _ in range(5):
            stock.append(run(folder, "-n", "--config", f"jobs={JOBS}")[0])
            frozen.append(run(folder, "-n", "--config", f"jobs={JOBS}", env={"FREEZE_AT_EXIT": "1"})[0])
        print(f"2. snakemake -n over {JOBS} jobs: {statistics.median(stock):.2f} s stock, "
              f"{statistics.median(frozen):.2f} s with gc.freeze() at exit (median of 5)")


if __name__ == "__main__":
    main()
