"""The example run's clock: every timestamp derives from one fixed base, never the wall clock."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

BASE = datetime(2026, 3, 30, 17, 0, 0, tzinfo=timezone.utc)  # attempt 1 submitted (1774890000000 ms)


def at(seconds: float) -> datetime:
    """The instant `seconds` after the base (microsecond resolution)."""
    return BASE + timedelta(microseconds=round(seconds * 1_000_000))


def epoch_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def iso_z(moment: datetime) -> str:
    """Harbor's UTC timestamps: `2026-03-30T17:04:11.512345Z`."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_naive(moment: datetime) -> str:
    """Harbor 0.3.0 `exception_info.occurred_at`: no zone."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")


def iso_offset(moment: datetime) -> str:
    """ATIF step timestamps: `2026-03-30T17:04:31.423911+00:00`."""
    return moment.isoformat()


def loguru(moment: datetime) -> str:
    """loguru's default time field: `2026-03-30 17:05:45.123`."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def clock(moment: datetime) -> str:
    """The `[17:05:45]` prefix of Iris log lines."""
    return moment.strftime("%H:%M:%S")


def vllm(moment: datetime) -> str:
    """vLLM's logger time field: `03-30 17:05:40`."""
    return moment.strftime("%m-%d %H:%M:%S")


def python_logging(moment: datetime) -> str:
    """The stdlib logging default: `2026-03-30 17:04:11,512`."""
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"
