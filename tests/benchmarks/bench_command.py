"""The whole command a user runs, `snakemake --profile local <job>/sync/trace_jobs.tar` from a fresh
data root, beside s5cmd + tar + sha256sum (issue 33): bench_sync.py --command at 10,000 objects
(--quick: 2,000), so `make bench` measures the command and not only its step."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    quick = "--quick" in sys.argv[1:]
    rest = [arg for arg in sys.argv[1:] if arg != "--quick"]
    sys.argv = [str(Path(__file__).with_name("bench_sync.py")), "--command", "--objects",
                "2000" if quick else "10000", *rest]
    runpy.run_path(sys.argv[0], run_name="__main__")
