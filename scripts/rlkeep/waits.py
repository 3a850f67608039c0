"""Bounds on how long rlkeep waits for a remote side, read from the environment.

Each bound is a number of seconds >= 0 in its own variable (RLKEEP_STORE_SLOWDOWN_WAIT,
RLKEEP_STORE_CONSISTENCY_WAIT, RLKEEP_HUB_RATE_LIMIT_WAIT); unset or empty means the default.
"""
from __future__ import annotations

import os

from rlkeep.errors import RlkeepError


def seconds_from_env(variable: str, default: float) -> float:
    """The bound in `variable`, or `default` when it is unset; anything but seconds >= 0 is refused."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise RlkeepError(f"{variable}={text!r}: expected a number of seconds") from None
    if value < 0 or value != value:
        raise RlkeepError(f"{variable}={text!r}: expected a number of seconds >= 0")
    return value
