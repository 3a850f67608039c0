"""Where the reliability tests put what they measured (faults injected, kills survived, bad inputs
tried, secrets planted, lost and leaked), for tests/reliability/figures.py to add up.

Records go to the JSON-lines file named by RLKEEP_RELIABILITY_FIGURES; without it nothing is written.
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import Any

ENV = "RLKEEP_RELIABILITY_FIGURES"


def record(kind: str, **figures: Any) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"kind": kind, **figures}, sort_keys=True) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write(line)
