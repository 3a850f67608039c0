"""vLLM utilisation from the trainer's stdout: the stat logger's periodic line, per engine, summed
per second across engines.

The line vLLM prints every few seconds, in the forms its versions use (see
docs/reference.md, formats §2 and vLLM's metrics loggers):
- V0 engine: `Avg prompt throughput: X tokens/s, Avg generation throughput: Y tokens/s, Running: R reqs,
  Swapped: S reqs, Pending: P reqs, GPU KV cache usage: K%, CPU KV cache usage: C%.`, with the prefix
  cache on a line of its own: `Prefix cache hit rate: GPU: G%, CPU: C%`;
- V1 engine: `Engine 000: Avg prompt throughput: …, Running: R reqs, Waiting: W reqs, GPU KV cache usage:
  K%, Prefix cache hit rate: H%` (newer releases may add `Preemptions: N` and more hit rates; a data-parallel
  front end can print `N Engines Aggregated: …`; the earliest V1 logged only throughput and requests).
In a SkyRL run each engine is a Ray actor, so the line carries `(AsyncVLLMInferenceEngine pid=…[, ip=…])`
and vLLM's own time field `INFO MM-DD HH:MM:SS`. Pending (V0) counts as waiting.

Aggregation: one sample per engine per second (the engine's last line in that second); per second the
throughputs and request counts are summed over the engines that reported, the KV cache usage and the
prefix cache hit rate are averaged over those that reported them. Ray folds similar lines into one
ending in `[repeated Nx across cluster]`: those N reports are counted but their numbers were never
printed, so they cannot be summed (the summary says how many).
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STAT_LINE = re.compile(r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s")
V0_PREFIX_LINE = re.compile(r"Prefix cache hit rate: GPU: (?P<gpu>[\d.]+)%, CPU: (?P<cpu>[\d.]+)%")
ACTOR = re.compile(r"\((?P<actor>[A-Za-z_][\w.]*) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\)")
VLLM_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR) (?P<time>\d{2}-\d{2} \d{2}:\d{2}:\d{2})\b")
ENGINE = re.compile(r"(?:Engine (?P<index>\d+)|(?P<count>\d+) Engines Aggregated):")
FIELD = re.compile(r"(?P<key>[A-Z][A-Za-z ]*?): (?P<value>n/a|[\d.]+)(?: (?:reqs|tokens/s)|%)?")
REPEATED = re.compile(r"\[repeated (?P<n>\d{1,18})x across cluster\]")

# The fields of the stat line, by the name each vLLM version prints.
FIELDS = {
    "Avg prompt throughput": "prompt_tokens_per_s",
    "Avg generation throughput": "generation_tokens_per_s",
    "Running": "running_reqs",
    "Waiting": "waiting_reqs",
    "Pending": "waiting_reqs",
    "GPU KV cache usage": "kv_cache_usage_pct",
    "Prefix cache hit rate": "prefix_cache_hit_rate_pct",
}
SUMMED = ("prompt_tokens_per_s", "generation_tokens_per_s", "running_reqs", "waiting_reqs")
AVERAGED = ("kv_cache_usage_pct", "prefix_cache_hit_rate_pct")
CSV_COLUMNS = ("attempt", "time", "engines", *SUMMED, *AVERAGED, "source")


@dataclass
class EngineSample:
    """One engine's report in one second (the last line it printed in that second)."""

    attempt: str
    time: str  # vLLM's `MM-DD HH:MM:SS`
    engine: str  # actor pid/ip (else the file) and engine index
    values: dict[str, float] = field(default_factory=dict)
    source: str = ""  # the log file the line came from


@dataclass
class VllmStats:
    samples: list[EngineSample] = field(default_factory=list)
    untimed_lines: int = 0  # stat lines without vLLM's time field: not placed on the time axis
    repeated_reports: int = 0  # reports Ray folded into `[repeated Nx across cluster]` (numbers unknown)


def _engine_id(line: str, source: str = "") -> str:
    actor = ACTOR.search(line)
    engine = ENGINE.search(line)
    # A line without Ray's actor prefix (vLLM's own log) is told apart by the file that holds it.
    who = (f"{actor['actor']} pid={actor['pid']}" + (f" ip={actor['ip']}" if actor["ip"] else "") if actor
           else source or "-")
    if engine is None:
        return f"{who} engine 0"
    return f"{who} engine {int(engine['index'])}" if engine["index"] is not None else f"{who} {engine['count']} engines"


def parse_stat_fields(text: str) -> dict[str, float]:
    """The stat line's numbers by their CSV name; `n/a` (nothing measured) is left out."""
    values: dict[str, float] = {}
    for match in FIELD.finditer(text):
        name = FIELDS.get(match["key"].strip())
        if name is not None and match["value"] != "n/a" and name not in values:
            try:
                values[name] = float(match["value"])
            except ValueError:  # `1.2.3`: a garbled number is left out, like n/a
                continue
    return values


def scan_lines(lines: Iterable[str], attempt: str, stats: VllmStats | None = None, source: str = "") -> VllmStats:
    """Add the stat lines of one of an attempt's log files (source) to stats (a new one when None)."""
    stats = stats if stats is not None else VllmStats()
    by_key: dict[tuple[str, str], EngineSample] = {}
    for raw in lines:
        if "throughput" not in raw and "Prefix cache hit rate: GPU" not in raw:
            continue  # cheap filter: nearly every trainer line is something else
        line = ANSI.sub("", raw)
        stat = STAT_LINE.search(line)
        v0_prefix = V0_PREFIX_LINE.search(line) if stat is None else None
        if stat is None and v0_prefix is None:
            continue
        repeated = REPEATED.search(line)
        if repeated:
            stats.repeated_reports += int(repeated["n"])
        moment = VLLM_TIME.search(line)
        if moment is None:
            stats.untimed_lines += 1
            continue
        key = (moment["time"], _engine_id(line, source))
        sample = by_key.get(key)
        if sample is None:
            sample = by_key[key] = EngineSample(attempt, key[0], key[1], source=source)
            stats.samples.append(sample)
        if stat is not None:
            sample.values.update(parse_stat_fields(line[stat.start():]))
        else:
            sample.values["prefix_cache_hit_rate_pct"] = float(v0_prefix["gpu"])
    return stats


def per_second(stats: VllmStats) -> list[dict[str, Any]]:
    """One row per (attempt, second) in log order: engines reporting, summed throughputs and
    requests, mean KV cache usage and prefix cache hit rate (None where no engine gave one), and the
    files the reports came from (space-separated, in the order read)."""
    groups: dict[tuple[str, str], list[EngineSample]] = {}
    for sample in stats.samples:
        groups.setdefault((sample.attempt, sample.time), []).append(sample)
    rows = []
    for (attempt, moment), samples in groups.items():
        row: dict[str, Any] = {"attempt": attempt, "time": moment, "engines": len(samples),
                               "source": " ".join(dict.fromkeys(s.source for s in samples if s.source))}
        for name in SUMMED:
            present = [s.values[name] for s in samples if name in s.values]
            row[name] = sum(present) if present else None
        for name in AVERAGED:
            present = [s.values[name] for s in samples if name in s.values]
            row[name] = statistics.fmean(present) if present else None
        rows.append(row)
    return rows


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """{column: {mean, max}} over the seconds that have the column."""
    out: dict[str, dict[str, float | None]] = {}
    for name in ("engines", *SUMMED, *AVERAGED):
        series = [float(row[name]) for row in rows if row.get(name) not in (None, "")]
        out[name] = {"mean": statistics.fmean(series) if series else None, "max": max(series) if series else None,
                     "seconds": len(series)}
    return out
