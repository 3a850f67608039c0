"""`<job>/metrics/` generation files from the raw log lines in logs.tar (rule generation_stats):
vLLM utilisation per second (vllm.csv, vllm.png) and batch errors per step (batch_errors.csv), with
their report sections (generation.md). Lines the metric surface does not carry, read in one streaming
pass per file, from every log an attempt left (rlkeep/attempt_logs.py: the trainer's stdout, vLLM's
own log, SkyRL's SKYRL_LOG_FILE and Ray worker outputs); a line that matches neither format is
ignored, so nothing here blocks a run on content (an unreadable tar does, naming it).
"""
from __future__ import annotations

import csv
import io
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkeep import attempt_logs, batch_errors, run_report, vllm_stats
from rlkeep.errors import RlkeepError

FILES = ("vllm.csv", "batch_errors.csv", "generation.md", "vllm.png")
NOT_READ_LISTED = 100  # a store can hold thousands of other log files; generation.md names this many
# Substrings of every line the two parsers read (stat lines, batch lines, step markers).
WANTED = ("throughput", "Prefix cache hit rate", "Batch generation", "Exception breakdown", "Step ", "WANDB_MIRROR")


class GenerationStatsError(RlkeepError):
    pass


@dataclass
class GenerationStats:
    vllm: vllm_stats.VllmStats = field(default_factory=vllm_stats.VllmStats)
    errors: batch_errors.BatchErrors = field(default_factory=batch_errors.BatchErrors)
    missing: list[str] = field(default_factory=list)  # attempts without a trainer log in the tar
    read: list[attempt_logs.LogFile] = field(default_factory=list)  # the files read, in order
    not_read: list[tuple[str, str]] = field(default_factory=list)  # (logs.tar member, why)


def _member_lines(tar: tarfile.TarFile, name: str) -> Iterator[str] | None:
    try:
        handle = tar.extractfile(tar.getmember(name))
    except KeyError:
        return None
    if handle is None:
        return None
    return iter(io.TextIOWrapper(handle, encoding="utf-8", errors="replace", newline=None))


def _scan_member(tar: tarfile.TarFile, log: attempt_logs.LogFile, stats: GenerationStats) -> set[str]:
    """Read one file's stat and batch lines into stats; return the Ray actor pids its lines carry."""
    lines = _member_lines(tar, log.member)
    if lines is None:
        stats.not_read.append((log.member, "not a regular file in logs.tar"))
        return set()
    # Only the few lines either parser looks at are kept, so a large log is never held.
    wanted = [line for line in lines if any(key in line for key in WANTED)]
    stats.read.append(log)
    vllm_stats.scan_lines(wanted, log.attempt, stats.vllm, source=log.member)
    batch_errors.scan_lines(wanted, log.attempt, stats.errors, source=log.member)
    return {match["pid"] for line in wanted for match in vllm_stats.ACTOR.finditer(line)}


def scan_logs_tar(tar_path: Path, attempts: Sequence[str], logs_layout: str = "logs") -> GenerationStats:
    """Every log each attempt left in logs.tar (attempt_logs.plan_logs), in chain order, line by
    line (bounded memory); a Ray worker output whose pid printed into the trainer's stdout is not
    read twice."""
    stats = GenerationStats()
    try:
        with tarfile.open(tar_path, "r:") as tar:
            plan = attempt_logs.plan_logs(tar.getnames(), attempts, logs_layout)
            stats.not_read.extend(plan.not_read)
            with_trainer = {log.attempt for log in plan.read if log.kind == attempt_logs.TRAINER}
            stats.missing.extend(slug for slug in attempts if slug not in with_trainer)
            forwarded: dict[str, set[str]] = {}
            for log in plan.read:
                if log.kind == attempt_logs.RAY_WORKER and str(log.pid) in forwarded.get(log.attempt, set()):
                    stats.not_read.append((log.member, f"{log.kind} of pid {log.pid}, whose lines Ray forwarded "
                                                       "to the trainer stdout (read there)"))
                    continue
                pids = _scan_member(tar, log, stats)
                if log.kind == attempt_logs.TRAINER:
                    forwarded[log.attempt] = pids
    except (tarfile.TarError, OSError) as error:
        raise GenerationStatsError(f"{tar_path}: cannot read the logs tar ({error}); rerun sync_logs") from error
    return stats


def files_markdown(stats: GenerationStats) -> list[str]:
    """generation.md's account of which log files were read and which were not, and why."""
    out = ["## Log files read", "", "| attempt | file | kind |", "|---|---|---|"]
    out += [f"| {log.attempt} | {log.member} | {log.kind} |" for log in stats.read] or ["| - | none | - |"]
    out += [""]
    if stats.not_read:
        out += ["## Log files not read", "", "| file | why |", "|---|---|"]
        out += [f"| {member} | {why} |" for member, why in stats.not_read[:NOT_READ_LISTED]]
        if len(stats.not_read) > NOT_READ_LISTED:
            out.append(f"| ({len(stats.not_read) - NOT_READ_LISTED} more log files) | |")
        out += [""]
    return out


def csv_bytes(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(name) is None else (f"{row[name]:.6g}" if isinstance(row[name], float)
                                                          else row[name]) for name in columns])
    return buffer.getvalue().encode("utf-8")


def sections(stats: GenerationStats) -> list[run_report.Section]:
    columns, table = batch_errors.rows(stats.errors)
    return (run_report.vllm_sections(vllm_stats.per_second(stats.vllm), untimed_lines=stats.vllm.untimed_lines,
                                     repeated_reports=stats.vllm.repeated_reports)
            + run_report.batch_error_sections(columns, table,
                                              unreadable_breakdowns=stats.errors.unreadable_breakdowns))


def render(stats: GenerationStats, *, job: str | None = None) -> dict[str, bytes]:
    """FILES from the scanned logs, in memory."""
    per_second = vllm_stats.per_second(stats.vllm)
    columns, table = batch_errors.rows(stats.errors)
    lines = [f"# Generation: vLLM utilisation and batch errors{f' ({job})' if job else ''}", "",
             "From the raw log lines in logs.tar: each attempt's trainer stdout and the vLLM, SkyRL "
             "infrastructure and Ray worker logs it left, chain order; each row of vllm.csv and "
             "batch_errors.csv names its file.", ""]
    if stats.missing:
        lines += [f"Attempts without a trainer log in logs.tar (not read): {', '.join(stats.missing)}.", ""]
    lines += files_markdown(stats)
    panel = run_report.vllm_panel(per_second)
    png = panel[2] if panel else run_report.placeholder_png("No vLLM stat lines in the logs read")
    return {
        "vllm.csv": csv_bytes(vllm_stats.CSV_COLUMNS, per_second),
        "batch_errors.csv": csv_bytes(columns, table),
        "generation.md": ("\n".join(lines) + "\n" + run_report.render_markdown(sections(stats))).encode("utf-8"),
        "vllm.png": png,
    }


def read_tables(job_dir: Path) -> dict[str, list[dict[str, str]] | None]:
    """metrics/vllm.csv and metrics/batch_errors.csv as rows (None when not made yet), for the campaign."""
    out: dict[str, list[dict[str, str]] | None] = {}
    for name in ("vllm", "batch_errors"):
        path = job_dir / "metrics" / f"{name}.csv"
        if not path.is_file():
            out[name] = None
            continue
        with path.open(newline="", encoding="utf-8") as handle:
            out[name] = list(csv.DictReader(handle))
    return out
