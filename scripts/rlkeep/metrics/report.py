"""Outputs: the surface's and the trials' CSV, Markdown, JSON and PNG files, written all or nothing."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rlkeep import run_report
from rlkeep.jsonio import atomic_write_bytes
from rlkeep.metrics.common import DEFAULT_EMA_ALPHA, DEFAULT_REWARD_METRIC, MAX_SKIPPED_NAMED
from rlkeep.metrics.lines import coerce_value
from rlkeep.metrics.surface import Surface, metric_columns, ema_series
from rlkeep.metrics.trials import PHASES, TRIAL_COLUMNS


# --------------------------------------------------------------------------- outputs

def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return value if isinstance(value, str) else repr(value)
    return json.dumps(value, sort_keys=True)


def _csv_bytes(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(column)) for column in columns])
    return buffer.getvalue().encode("utf-8")


def metrics_csv(surface: Surface) -> bytes:
    return _csv_bytes(["global_step", "attempt", *surface.metric_names()], surface.rows)


def eval_csv(surface: Surface) -> bytes:
    return _csv_bytes(["global_step", "attempt", *metric_columns(surface.eval_rows)], surface.eval_rows)


def superseded_csv(surface: Surface) -> bytes:
    lead = ["global_step", "attempt", "kind", "superseded_by", "reason", "source", "line"]
    rows = sorted(surface.superseded, key=lambda r: (r["kind"], r["global_step"], r["attempt"], r["line"]))
    return _csv_bytes([*lead, *metric_columns(rows, exclude=lead)], rows)


def trials_csv(trials: Sequence[Mapping[str, Any]]) -> bytes:
    return _csv_bytes(TRIAL_COLUMNS, sorted(trials, key=lambda row: str(row.get("trial"))))


def reward_metric(surface: Surface) -> str | None:
    names = surface.metric_names()
    if DEFAULT_REWARD_METRIC in names:
        return DEFAULT_REWARD_METRIC
    return next((name for name in names if name.startswith("reward/")), None)


def _candidate_steps(candidates: Iterable[Any] | None) -> list[tuple[int, bool]]:
    steps: list[tuple[int, bool]] = []
    for candidate in candidates or ():
        if isinstance(candidate, int):
            steps.append((candidate, True))
        elif isinstance(candidate, Mapping):
            steps.append((int(candidate["step"]), bool(candidate.get("complete", True))))
        else:
            steps.append((int(candidate.step), bool(getattr(candidate, "complete", True))))
    return sorted(set(steps))


def reward_png(surface: Surface, *, candidates: Iterable[Any] | None = None, selected_step: int | None = None,
               behavior_break_step: int | None = None, job: str | None = None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    metric = reward_metric(surface)
    figure, axes = pyplot.subplots(figsize=(10, 4.8), dpi=100)
    try:
        if metric is not None:
            points = [(step, value) for step, value in _plot_points(surface.rows, metric)]
            if points:
                steps = [step for step, _ in points]
                values = [value for _, value in points]
                axes.plot(steps, values, color="#9db4d0", linewidth=1, marker=".", label=metric)
                axes.plot(steps, ema_series(values, DEFAULT_EMA_ALPHA), color="#1f4e8c", linewidth=2,
                          label="EMA (alpha 1/3)")
        else:
            axes.text(0.5, 0.5, "no reward/ metric in the surface", ha="center", va="center",
                      transform=axes.transAxes)
        labelled: set[bool] = set()
        for step, complete in _candidate_steps(candidates):
            label = None if complete in labelled else ("checkpoint" if complete else "incomplete checkpoint")
            labelled.add(complete)
            axes.axvline(step, color="#777777" if complete else "#d9a400", linestyle=":", linewidth=1, label=label)
        if selected_step is not None:
            axes.axvline(selected_step, color="#2a9d3a", linewidth=2, label=f"selected (step {selected_step})")
        if behavior_break_step is not None:
            axes.axvline(behavior_break_step, color="#c0392b", linestyle="--", linewidth=2,
                         label=f"behavior break (step {behavior_break_step})")
        axes.set_xlabel("global step")
        axes.set_ylabel(metric or "reward")
        axes.set_title(f"{job + ': ' if job else ''}{metric or 'reward'} across the chain")
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(loc="best", fontsize=8)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
        return buffer.getvalue()
    finally:
        pyplot.close(figure)


def _plot_points(rows: Sequence[Mapping[str, Any]], metric: str) -> list[tuple[int, float]]:
    points = []
    for row in rows:
        value = coerce_value(row.get(metric))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            points.append((row["global_step"], float(value)))
    return points


_KEY_METRIC_PATTERNS = (
    r"reward/avg_raw_reward", r"reward/avg_pass_at_\d+", r"policy/policy_entropy", r"policy/final_loss|policy/policy_loss",
    r"policy/grad_norm", r"generate/avg_num_tokens", r"generate/avg_num_turns", r"timing/step",
)


def key_metrics(names: Sequence[str]) -> list[str]:
    chosen: list[str] = []
    for pattern in _KEY_METRIC_PATTERNS:
        match = next((name for name in names if re.fullmatch(pattern, name)), None)
        if match and match not in chosen:
            chosen.append(match)
    return chosen


def _fmt(value: Any) -> str:
    value = coerce_value(value)
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) else str(value)
    return str(value)


def _step_ranges(steps: Sequence[int]) -> str:
    if not steps:
        return "none"
    ranges: list[str] = []
    start = previous = steps[0]
    for step in list(steps[1:]) + [None]:  # type: ignore[list-item]
        if step is not None and step == previous + 1:
            previous = step
            continue
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
        if step is not None:
            start = previous = step
    return ", ".join(ranges)


def _attempt_table(surface: Surface) -> list[str]:
    out = ["| # | attempt | log | serialization | steps | rows kept | other blocks ignored |",
           "|---|---|---|---|---|---|---|"]
    files = {info["attempt"]: info for info in surface.files}
    dead = {info.attempt: info for info in surface.without_metrics}
    for index, attempt in enumerate(surface.chain or list(files), start=1):
        if attempt in dead:
            info = dead[attempt]
            out.append(f"| {index} | {attempt} | {info.source} | none ({info.reason}) | none | 0 | - |")
            continue
        info = files[attempt]
        kept = sum(1 for row in surface.rows if row["attempt"] == attempt)
        ignored = ", ".join(f"{k}: {n}" for k, n in info["ignored_blocks"].items()) or "-"
        out.append(f"| {index} | {attempt} | {info['source']} | {info['serialization']} | "
                   f"{_step_ranges(info['steps'])} | {kept} | {ignored} |")
    return out


def without_metrics_markdown(entries: Sequence[Mapping[str, Any]], heading: str = "##") -> list[str]:
    """The section naming the attempts that logged no metrics (also used by REPORT.md)."""
    if not entries:
        return []
    out = [f"{heading} Attempts without metrics", "",
           "Preserved as they are in logs.tar (and listed in logs.manifest.json); they add no rows to the surface.", "",
           "| attempt | reason | state | bytes | lines |", "|---|---|---|---|---|"]
    out += [f"| {e['attempt']} | {e['reason']} | {e.get('state') or 'unknown'} | {e.get('bytes', '')} | "
            f"{e.get('lines', '')} |" for e in entries]
    return out + [""]


def skipped_lines_summary(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """attempts.json `skipped_lines` (also DONE's `skipped_log_lines`): the count, the count per
    attempt and kind, and the first MAX_SKIPPED_NAMED lines by file and line number."""
    by_attempt: dict[str, Counter[str]] = {}
    for entry in entries:
        by_attempt.setdefault(str(entry["attempt"]), Counter())[str(entry["kind"])] += 1
    return {"count": len(entries), "by_attempt": {a: dict(sorted(c.items())) for a, c in by_attempt.items()},
            "named": [dict(entry) for entry in entries[:MAX_SKIPPED_NAMED]]}


def skipped_lines_markdown(summary: Mapping[str, Any] | None, heading: str = "##") -> list[str]:
    """The section naming the unparsable metric lines that were skipped (also used by REPORT.md)."""
    if not summary or not summary.get("count"):
        return []
    out = [f"{heading} Skipped log lines", "",
           f"{summary['count']} metric line(s) could not be parsed (cut by a kill, garbled) and were skipped: "
           "no row is guessed from them; the logs are preserved as they are in logs.tar.", "",
           "| attempt | kind | skipped |", "|---|---|---|"]
    out += [f"| {attempt} | {kind} | {count} |" for attempt, kinds in summary.get("by_attempt", {}).items()
            for kind, count in kinds.items()]
    named = summary.get("named") or []
    out += ["", "| file:line | kind | reason |", "|---|---|---|"]
    out += [f"| {e['source']}:{e['line']} | {e['kind']} | {_cell(e['reason']).replace('|', '/')} |" for e in named]
    if summary["count"] > len(named):
        out.append(f"| ({summary['count'] - len(named)} more) | | |")
    return out + [""]


def trial_markdown(trials: Sequence[Mapping[str, Any]], heading: str = "##") -> list[str]:
    """Trial outcomes and per-phase trial times (from result.json files)."""
    out = [f"{heading} Trial outcomes", ""]
    valid = [t for t in trials if not t.get("error")]
    malformed = Counter(str(t["error"]).split(":", 1)[0] for t in trials if t.get("error"))
    if trials:
        rewarded = [t for t in valid if isinstance(t.get("reward"), (int, float))]
        successes = sum(1 for t in rewarded if t["reward"] > 0)
        out.append(f"- result.json parsed: {len(valid)} of {len(trials)}")
        if malformed:
            out.append("- malformed result.json by reason: " + ", ".join(f"{k}: {n}" for k, n in sorted(malformed.items())))
        out.append(f"- with a verifier reward: {len(rewarded)}; success (reward > 0): {successes} "
                   f"= {100 * successes / max(1, len(valid)):.1f}% of parsed trials")
        if rewarded:
            out.append(f"- mean reward: {sum(t['reward'] for t in rewarded) / len(rewarded):.4f}")
        exceptions = Counter(t.get("exception_type") or "none" for t in valid)
        out += ["", "| exception type | trials |", "|---|---|"]
        out += [f"| {name} | {count} |" for name, count in sorted(exceptions.items(), key=lambda kv: (-kv[1], kv[0]))]
    else:
        out.append("No trial results given.")
    out.append("")
    phases = ["trial_duration", *(f"{phase}_duration" for phase in PHASES)]
    measured = {name: [t[name] for t in valid if isinstance(t.get(name), (int, float))] for name in phases}
    if any(measured.values()):
        out += [f"{heading} Trial times", "", "| trial phase | mean s | trials timed |", "|---|---|---|"]
        for name in phases:
            if measured[name]:
                out.append(f"| {name.removesuffix('_duration')} | {sum(measured[name]) / len(measured[name]):.1f} | {len(measured[name])} |")
        out.append("")
    return out


def report_markdown(surface: Surface, trials: Sequence[Mapping[str, Any]] | None, *, job: str | None = None,
                    candidates: Iterable[Any] | None = None, selected_step: int | None = None,
                    behavior_break_step: int | None = None, rows_in_table: int = 20) -> str:
    """The readable report. trials None: the trial section is a pointer to trials.md (the
    pipeline writes trial rows in their own step, so the surface never waits on the traces)."""
    out: list[str] = [f"# Metric report{': ' + job if job else ''}", ""]
    steps = surface.steps()
    out += ["## Overview", "",
            f"- Attempts (chain order): {len(surface.chain or surface.files)}"
            + (f", {len(surface.without_metrics)} without metrics" if surface.without_metrics else ""),
            f"- Steps in the surface: {len(steps)} ({_step_ranges(steps)})",
            f"- Superseded rows (superseded.csv): {len(surface.superseded)}",
            f"- Eval rows (eval.csv): {len(surface.eval_rows)}",
            f"- Trials (trials.csv): {len(trials)}" if trials is not None else
            "- Trials: trials.csv and trials.md, written from the trace tarball by their own step", ""]
    out += _attempt_table(surface)
    out.append("")
    out += ["A later attempt's rows replace every earlier row at or after its first step "
            "(the earlier branch died; surviving checkpoints descend from the later attempt). "
            "An attempt without metrics replaces nothing.", ""]
    out += without_metrics_markdown([entry.to_json() for entry in surface.without_metrics])
    out += skipped_lines_markdown(skipped_lines_summary(surface.skipped_lines()))

    if candidates is not None or selected_step is not None or behavior_break_step is not None:
        out += ["## Checkpoints", ""]
        marks = _candidate_steps(candidates)
        if marks:
            out.append("- Candidates: " + ", ".join(f"{s}{'' if c else ' (incomplete)'}" for s, c in marks))
        if selected_step is not None:
            out.append(f"- Selected: step {selected_step}")
        if behavior_break_step is not None:
            out.append(f"- Behavior break: step {behavior_break_step}")
        out.append("")

    metrics = key_metrics(surface.metric_names())
    out += ["## Progression", ""]
    if metrics and surface.rows:
        every = max(1, math.ceil(len(surface.rows) / rows_in_table))
        picked = surface.rows[::every]
        if picked[-1] is not surface.rows[-1]:
            picked.append(surface.rows[-1])
        ordinal = {1: "", 2: "2nd ", 3: "3rd "}.get(every, f"{every}th ")
        out += [f"Every {ordinal}step of the surface, and the last.", "",
                "| step | attempt | " + " | ".join(metrics) + " |",
                "|---|---|" + "---|" * len(metrics)]
        for row in picked:
            out.append(f"| {row['global_step']} | {row['attempt']} | " + " | ".join(_fmt(row.get(m)) for m in metrics) + " |")
    else:
        out.append("No key metrics (reward/, policy/, generate/, timing/step) in the surface.")
    out.append("")

    if trials is None:
        out += ["## Trial outcomes", "", "See trials.md and trials.csv (per-trial rows from the trace tarball).", ""]
    else:
        out += trial_markdown(trials)

    out += ["## Timing", ""]
    timing = [name for name in surface.metric_names() if name.startswith("timing/")]
    if timing:
        out += ["| trainer span | mean s/step | steps |", "|---|---|---|"]
        for name in timing:
            values = _plot_points(surface.rows, name)
            if values:
                out.append(f"| {name} | {sum(v for _, v in values) / len(values):.1f} | {len(values)} |")
        out.append("")
    else:
        out += ["No timing metrics in the surface.", ""]
    return "\n".join(out)


def trials_markdown(trials: Sequence[Mapping[str, Any]], *, job: str | None = None, source: str | None = None) -> str:
    """metrics/trials.md: the trial section of the report, written with trials.csv."""
    out = [f"# Trial report{': ' + job if job else ''}", ""]
    if source:
        out += [f"From every <trial>/result.json in {source}; one row per trial in trials.csv.", ""]
    return "\n".join(out + trial_markdown(trials))


def attempts_json(surface: Surface) -> bytes:
    """metrics/attempts.json: what each attempt of the chain gave the surface (the completion
    record reads attempts_without_metrics from here)."""
    files = {info["attempt"]: info for info in surface.files}
    with_metrics = [{"attempt": attempt, "serialization": files[attempt]["serialization"],
                     "steps": _step_ranges(files[attempt]["steps"]),
                     "rows_kept": sum(1 for row in surface.rows if row["attempt"] == attempt)}
                    for attempt in (surface.chain or list(files)) if attempt in files]
    data = {"chain": surface.chain or list(files), "attempts_with_metrics": with_metrics,
            "attempts_without_metrics": [entry.to_json() for entry in surface.without_metrics],
            "skipped_lines": skipped_lines_summary(surface.skipped_lines())}
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


# The metric surface's files (rule metric_surface: logs only) and the trial files (rule
# trial_table: the trace tarball only); the CLI writes both.
SURFACE_FILES: tuple[str, ...] = ("metrics.csv", "superseded.csv", "eval.csv", "attempts.json", "report.md", "reward.png")
TRIAL_FILES: tuple[str, ...] = ("trials.csv", "trials.md")
OUTPUT_FILES: tuple[str, ...] = SURFACE_FILES + TRIAL_FILES


def write_all(rendered: Mapping[str, bytes], out_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Each file to a temp name, then renamed: a failure before this leaves no partial output."""
    target = Path(out_dir)
    written: dict[str, str] = {}
    for name, data in rendered.items():
        atomic_write_bytes(target / name, data)
        written[name] = str(target / name)
    return written


def render_surface(surface: Surface, trials: Sequence[Mapping[str, Any]] | None, *,
                   candidates: Iterable[Any] | None = None, selected_step: int | None = None,
                   behavior_break_step: int | None = None, job: str | None = None) -> dict[str, bytes]:
    candidate_list = list(candidates) if candidates is not None else None
    return {
        "metrics.csv": metrics_csv(surface),
        "superseded.csv": superseded_csv(surface),
        "eval.csv": eval_csv(surface),
        "attempts.json": attempts_json(surface),
        "report.md": (report_markdown(surface, trials, job=job, candidates=candidate_list, selected_step=selected_step,
                                      behavior_break_step=behavior_break_step).rstrip("\n") + "\n\n"
                      + run_report.markdown(surface.rows, None, run_report.SURFACE_PARTS)).encode("utf-8"),
        "reward.png": reward_png(surface, candidates=candidate_list, selected_step=selected_step,
                                 behavior_break_step=behavior_break_step, job=job),
    }


def render_trials(trials: Sequence[Mapping[str, Any]], *, job: str | None = None,
                  source: str | None = None) -> dict[str, bytes]:
    return {"trials.csv": trials_csv(trials),
            "trials.md": (trials_markdown(trials, job=job, source=source).rstrip("\n") + "\n\n"
                          + run_report.markdown([], trials, ("trials",))).encode("utf-8")}


def write_outputs(surface: Surface, trials: Sequence[Mapping[str, Any]] | None, out_dir: str | os.PathLike[str], *,
                  candidates: Iterable[Any] | None = None, selected_step: int | None = None,
                  behavior_break_step: int | None = None, job: str | None = None) -> dict[str, str]:
    """Write SURFACE_FILES, and TRIAL_FILES when trials is given (the report then holds the
    trial section too). Everything is rendered in memory first. Returns {file name: path}."""
    rendered = render_surface(surface, trials, candidates=candidates, selected_step=selected_step,
                              behavior_break_step=behavior_break_step, job=job)
    if trials is not None:
        rendered.update(render_trials(trials, job=job))
    return write_all(rendered, out_dir)
