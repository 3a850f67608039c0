"""Run analysis beyond metrics/report.md, from the metric surface (metrics.csv rows) and the trial
table (trials.csv rows): per-category summaries, the timing tree with shares of step time, and
trial-level analysis (phases, turns, exceptions, reward). Pure functions over rows; each section
says when its data is absent. Rendered as Markdown or HTML (the campaign's run page).
"""
from __future__ import annotations

import html
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from rlkeep import readable

# Spans SkyRL times inside one training step (timing/<name>), in the order they run; the first two
# may overlap when generation is asynchronous, which `overlap` reports.
IN_STEP_SPANS = ("generate", "wait_for_generation_buffer", "postprocess", "convert_to_training_input",
                 "policy_train", "sync_weights")
# Spans timed outside the step (saves and evaluation happen between steps).
OUTSIDE_STEP_SPANS = ("save_checkpoints", "save_hf_model", "eval")
PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")


def _number(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def category_summaries(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{prefix: [{metric, mean, std, min, max, count}]} for every numeric metric, grouped by the
    key's prefix before '/' (reward, policy, timing, generate, ...)."""
    values: dict[str, list[float]] = {}
    for row in rows:
        for key, raw in row.items():
            if "/" not in key:
                continue
            number = _number(raw)
            if number is not None:
                values.setdefault(key, []).append(number)
    summaries: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(values):
        series = values[key]
        summaries.setdefault(key.split("/", 1)[0], []).append({
            "metric": key, "mean": statistics.fmean(series), "std": statistics.pstdev(series) if len(series) > 1 else 0.0,
            "min": min(series), "max": max(series), "count": len(series)})
    return summaries


def timing_tree(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Totals over the steps that logged timing/step: each in-step span's seconds and share of step
    time, the unattributed time (step time no span covers) and the overlap (span time beyond the
    step, from spans that run concurrently), and the outside-step spans with their share of step time.
    Per step: unattributed = max(step - sum(spans), 0), overlap = max(sum(spans) - step, 0)."""
    steps = [row for row in rows if (_number(row.get("timing/step")) or 0) > 0]
    if not steps:
        return None
    step_total = sum(_number(row["timing/step"]) for row in steps)
    spans: dict[str, float] = {}
    unattributed = overlap = 0.0
    for row in steps:
        inside = 0.0
        for name in IN_STEP_SPANS:
            value = _number(row.get(f"timing/{name}"))
            if value is not None:
                spans[name] = spans.get(name, 0.0) + value
                inside += value
        step = _number(row["timing/step"])
        unattributed += max(step - inside, 0.0)
        overlap += max(inside - step, 0.0)
    outside = {}
    for name in OUTSIDE_STEP_SPANS:
        series = [v for v in (_number(row.get(f"timing/{name}")) for row in rows) if v is not None]
        if series:
            outside[name] = {"seconds": sum(series), "count": len(series), "share_of_step_time": sum(series) / step_total}
    return {
        "steps": len(steps), "step_seconds": step_total,
        "spans": {name: {"seconds": seconds, "share": seconds / step_total} for name, seconds in spans.items()},
        "unattributed": {"seconds": unattributed, "share": unattributed / step_total},
        "overlap": {"seconds": overlap, "share": overlap / step_total},
        "outside_step": outside,
    }


def trial_analysis(trials: Sequence[Mapping[str, Any]], success_reward: float = 1.0) -> dict[str, Any] | None:
    """From the trial table: phase seconds and their share of the trials' total duration (plus the
    rest no phase covers), turns (n_episodes) distribution and by outcome, exception types, reward
    mean and success rate (reward >= success_reward, among trials with a reward)."""
    if not trials:
        return None
    durations = [d for d in (_number(t.get("trial_duration")) for t in trials) if d is not None]
    total = sum(durations)
    phases = {}
    for phase in PHASES:
        seconds = sum(v for v in (_number(t.get(f"{phase}_duration")) for t in trials) if v is not None)
        phases[phase] = {"seconds": seconds, "share": seconds / total if total else None}
    covered = sum(p["seconds"] for p in phases.values())
    rewards = [r for r in (_number(t.get("reward")) for t in trials) if r is not None]
    turns = [int(v) for v in (_number(t.get("n_episodes")) for t in trials) if v is not None]
    by_outcome: dict[str, list[int]] = {}
    for trial in trials:
        n = _number(trial.get("n_episodes"))
        if n is None:
            continue
        reward = _number(trial.get("reward"))
        outcome = ("exception" if trial.get("exception_type") else "no reward" if reward is None
                   else "success" if reward >= success_reward else "failure")
        by_outcome.setdefault(outcome, []).append(int(n))
    return {
        "trials": len(trials), "duration_seconds": total, "phases": phases,
        "other": {"seconds": max(total - covered, 0.0), "share": max(total - covered, 0.0) / total if total else None},
        "turns": {"distribution": dict(sorted(Counter(turns).items())),
                  "mean": statistics.fmean(turns) if turns else None},
        "turns_by_outcome": {k: statistics.fmean(v) for k, v in sorted(by_outcome.items())},
        "exceptions": dict(Counter(str(t["exception_type"]) for t in trials if t.get("exception_type")).most_common()),
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "success_rate": sum(1 for r in rewards if r >= success_reward) / len(rewards) if rewards else None,
        "with_reward": len(rewards),
    }


# --------------------------------------------------------------------------- rendering

def _with_column(rows: list[list[Any]], index: int) -> list[list[Any]]:
    """Rows with column `index` formatted in one format (rlkeep.readable.column)."""
    for row, text in zip(rows, readable.column([row[index] for row in rows])):
        row[index] = text
    return rows


def _pct(share: float | None) -> str:
    return "" if share is None else f"{100 * share:.1f}%"


SURFACE_PARTS = ("progression", "summaries", "timing")
ALL_PARTS = ("progression", "summaries", "timing", "trials")
# The per-step columns of the training progression, each the first metric a pattern matches.
PROGRESSION = (("reward", r"reward/avg_raw_reward$"), ("pass@k", r"reward/avg_pass_at_\d+$"),
               ("entropy", r"policy/policy_entropy$"), ("grad norm", r"policy/grad_norm$"),
               ("clip fraction", r"policy/.*clip.*(frac|ratio)"), ("policy loss", r"policy/policy_loss$"),
               ("log-ratio mean", r"log_ratio.*mean|mean.*log_ratio"), ("step time", r"timing/step$"))


def progression(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]] | None:
    """(headers, one row per step) of the PROGRESSION metrics the surface has; None without any."""
    import re

    names = sorted({key for row in rows for key in row})
    columns = []
    for label, pattern in PROGRESSION:
        match = next((name for name in names if re.search(pattern, name)), None)
        if match is not None:
            columns.append((label, match))
    if not columns:
        return None
    table = []
    for row in sorted(rows, key=lambda r: _number(r.get("global_step")) or 0):
        step = _number(row.get("global_step"))
        table.append([int(step) if step is not None and step.is_integer() else step,
                      *(_number(row.get(metric)) for _, metric in columns)])
    return ["step", *(f"{label} ({metric})" for label, metric in columns)], readable.columns(table)


def sections(rows: Sequence[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]] | None,
             parts: Sequence[str] = ALL_PARTS) -> list[tuple[str, list[str], list[list[str]] | None, str]]:
    """(title, headers, rows or None, note) per section; rows None means the data is absent (note says why)."""
    out: list[tuple[str, list[str], list[list[str]] | None, str]] = []
    if "progression" in parts:
        progress = progression(rows)
        out.append(("Training progression", progress[0], progress[1], "one row per global step")
                   if progress else ("Training progression", [], None, "no progression metric in the surface"))
    summaries = category_summaries(rows) if "summaries" in parts else None
    if "summaries" not in parts:
        pass
    elif summaries:
        # a row is one metric: its four figures share one format
        table = [[m["metric"], *readable.column([m["mean"], m["std"], m["min"], m["max"]]), readable.number(m["count"])]
                 for prefix in summaries for m in summaries[prefix]]
        out.append(("Per-category summaries", ["metric", "mean", "std", "min", "max", "count"], table,
                    "grouped by key prefix"))
    else:
        out.append(("Per-category summaries", [], None, "no metric rows (metrics/metrics.csv absent or empty)"))
    tree = timing_tree(rows) if "timing" in parts else None
    if "timing" not in parts:
        pass
    elif tree:
        table = [[f"timing/{name}", v["seconds"], _pct(v["share"])] for name, v in tree["spans"].items()]
        table += [["unattributed (step time no span covers)", tree["unattributed"]["seconds"],
                   _pct(tree["unattributed"]["share"])],
                  ["overlap (span time beyond the step)", tree["overlap"]["seconds"], _pct(tree["overlap"]["share"])]]
        table += [[f"timing/{name} (outside the step, {v['count']}x)", v["seconds"], _pct(v["share_of_step_time"])]
                  for name, v in tree["outside_step"].items()]
        table = _with_column(table, 1)
        out.append(("Timing tree", ["span", "seconds", "share of step time"], table,
                    f"{tree['steps']} steps, {tree['step_seconds']:.1f} s of step time"))
    else:
        out.append(("Timing tree", [], None, "no step logged timing/step"))
    analysis = trial_analysis(trials or []) if "trials" in parts else None
    if "trials" not in parts:
        pass
    elif analysis:
        table = [[f"{phase} phase", v["seconds"], _pct(v["share"])] for phase, v in analysis["phases"].items()]
        table.append(["other (no phase)", analysis["other"]["seconds"], _pct(analysis["other"]["share"])])
        table = _with_column(table, 1)
        out.append(("Trial phases", ["phase", "seconds", "share of trial time"], table,
                    f"{analysis['trials']} trials, {analysis['duration_seconds']:.1f} s"))
        facts = [["reward mean", readable.number(analysis["reward_mean"])], ["success rate (reward >= 1)", _pct(analysis["success_rate"])],
                 ["trials with a reward", str(analysis["with_reward"])], ["mean turns", readable.number(analysis["turns"]["mean"])]]
        facts += [[f"turns: {n}", f"{count} trials"] for n, count in analysis["turns"]["distribution"].items()]
        facts += [[f"mean turns, {outcome}", readable.number(mean)] for outcome, mean in analysis["turns_by_outcome"].items()]
        facts += [[f"exception {name}", f"{count} trials"] for name, count in analysis["exceptions"].items()]
        out.append(("Trials", ["fact", "value"], facts, "from trace_jobs/<trial>/result.json"))
    else:
        out.append(("Trials", [], None, "no trial table (metrics/trials.csv absent or empty)"))
    return out


Section = tuple[str, list[str], Optional[list[list[str]]], str]


def vllm_sections(per_second: Sequence[Mapping[str, Any]], *, untimed_lines: int = 0,
                  repeated_reports: int = 0) -> list[Section]:
    """vLLM utilisation: mean and peak per second (summed over engines; cache figures averaged)."""
    from rlkeep.vllm_stats import AVERAGED, SUMMED, summary

    title = "vLLM utilisation"
    if not per_second:
        why = "the logs read carry no vLLM stat line (`Avg prompt throughput: ... tokens/s, ...`)"
        if untimed_lines:
            why += f"; {untimed_lines} stat lines had no vLLM time field and cannot be placed per second"
        return [(title, [], None, why)]
    stats = summary(per_second)
    labels = {"engines": "engines reporting", "prompt_tokens_per_s": "prompt throughput (tokens/s, all engines)",
              "generation_tokens_per_s": "generation throughput (tokens/s, all engines)",
              "running_reqs": "running requests (all engines)", "waiting_reqs": "waiting requests (all engines)",
              "kv_cache_usage_pct": "GPU KV cache usage (%, mean of engines)",
              "prefix_cache_hit_rate_pct": "prefix cache hit rate (%, mean of engines)"}
    # a row is one measure: its mean and max share one format
    table = [[labels[name], *readable.column([stats[name]["mean"], stats[name]["max"]]), readable.number(stats[name]["seconds"])]
             for name in ("engines", *SUMMED, *AVERAGED) if stats[name]["seconds"]]
    absent = [labels[name] for name in (*SUMMED, *AVERAGED) if not stats[name]["seconds"]]
    note = (f"{len(per_second)} seconds with a report, from vLLM's stat lines in the logs read; per second the "
            "engines' last reports are summed (throughput, requests) or averaged (cache)")
    if absent:
        note += "; not logged by this vLLM version: " + ", ".join(absent)
    if repeated_reports:
        note += (f"; {repeated_reports} engine reports were folded by Ray into `[repeated Nx across cluster]` "
                 "without their numbers and are not counted")
    if untimed_lines:
        note += f"; {readable.plural(untimed_lines, 'stat line')} without a time field {'is' if untimed_lines == 1 else 'are'} left out"
    return [(title, ["per second", "mean", "max", "seconds"], table, note)]


def batch_error_sections(columns: Sequence[str], table: Sequence[Mapping[str, Any]], *,
                         unreadable_breakdowns: int = 0) -> list[Section]:
    """Batch errors per step (attempt, batches, instances, failed, masked, each exception type) and totals."""
    from rlkeep.batch_errors import totals

    title = "Batch errors"
    if not table:
        return [(title, [], None, "the logs read carry no `Batch generation complete: S/T successful, "
                 "F failed instances, M masked` line (SkyRL's Harbor generator prints one per batch)")]
    counts = [name for name in columns if name not in ("attempt", "step", "source")]
    files = ["file"] if any(row.get("source") for row in table) else []
    per_step = [[readable.number(row.get("step")) if row.get("step") not in (None, "") else "after the last logged step",
                 str(row.get("attempt")), *(readable.number(row.get(name)) for name in counts),
                 *([str(row.get("source") or "")] if files else [])] for row in table]
    summed = totals(table, columns)
    instances = summed.get("instances") or 0
    facts = [[name, str(value), _pct(value / instances) if instances and name != "batches" else ""]
             for name, value in summed.items()]
    note = ("each step's generation batches (they precede the step's metrics in the log); exception columns "
            "count `Exception breakdown` entries")
    if unreadable_breakdowns:
        note += f"; {unreadable_breakdowns} `Exception breakdown` lines did not parse and are not counted"
    return [(title, ["step", "attempt", *counts, *files], per_step, note),
            ("Batch errors, totals", ["count", "total", "share of instances"], facts,
             f"over {summed.get('batches', 0)} batches in {len(table)} steps")]


def render_markdown(parts: Sequence[Section]) -> str:
    lines: list[str] = []
    for title, headers, table, note in parts:
        lines += [f"## {title}", ""]
        if table is None:
            lines += [f"Not available: {note}.", ""]
            continue
        lines += [f"{note}.", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table]
        lines.append("")
    return "\n".join(lines)


def render_html(parts: Sequence[Section]) -> str:
    esc = html.escape
    out = []
    for title, headers, table, note in parts:
        out.append(f"<h3>{esc(title)}</h3>")
        if table is None:
            out.append(f"<p>Not available: {esc(note)}.</p>")
            continue
        head = "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers)
        body = "".join("<tr><th scope=\"row\">" + esc(row[0]) + "</th>" + "".join(f"<td>{esc(c)}</td>" for c in row[1:])
                       + "</tr>" for row in table)
        out.append(f"<table><caption>{esc(title)}: {esc(note)}</caption><thead><tr>{head}</tr></thead>"
                   f"<tbody>{body}</tbody></table>")
    return "".join(out)


def markdown(rows: Sequence[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]] | None,
             parts: Sequence[str] = ALL_PARTS) -> str:
    return render_markdown(sections(rows, trials, parts))


def html_sections(rows: Sequence[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]] | None) -> str:
    return render_html(sections(rows, trials))


# --------------------------------------------------------------------------- plots

def _series(rows: Sequence[Mapping[str, Any]], metric: str) -> tuple[list[float], list[float]]:
    points = []
    for row in rows:
        step, value = _number(row.get("global_step")), _number(row.get(metric))
        if step is not None and value is not None:
            points.append((step, value))
    points.sort()
    return [p[0] for p in points], [p[1] for p in points]


REWARD_METRICS = ("reward/avg_raw_reward", "reward/mean_positive_reward")  # the first one logged is plotted


def reward_series(rows: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[float], list[float]]:
    """(the reward metric, its steps, its values): what the reward plots draw, raw."""
    for metric in REWARD_METRICS:
        steps, values = _series(rows, metric)
        if steps:
            return metric, steps, values
    return None, [], []


def smoothed(values: Sequence[float]) -> list[float]:
    """The EMA the reward plots draw beside the raw values."""
    return _ema(values)


def _ema(values: Sequence[float], alpha: float = 1 / 3) -> list[float]:
    out: list[float] = []
    for value in values:
        out.append(value if not out else alpha * value + (1 - alpha) * out[-1])
    return out


def render_panel(draw: Callable[[Any], bool], title: str, alt: str, *, height: float = 3.2
                 ) -> tuple[str, str, bytes] | None:
    """(title, alt, PNG) of one matplotlib panel; None when draw(axes) says it had nothing to draw."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, height), dpi=90)
    try:
        if not draw(axes):
            return None
        axes.set_title(title, fontsize=10)
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=7, loc="best")
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
        return title, alt, buffer.getvalue()
    finally:
        pyplot.close(figure)


def vllm_panel(per_second: Sequence[Mapping[str, Any]]) -> tuple[str, str, bytes] | None:
    """Generation and prompt throughput summed over engines per second (left axis) and the running and
    waiting requests (right axis), one point per second with a report, in log order; None without data."""
    def draw(axes) -> bool:
        if not per_second:
            return False
        index = list(range(len(per_second)))
        for name, colour in (("generation_tokens_per_s", "#1f4e8c"), ("prompt_tokens_per_s", "#9db4d0")):
            points = [(i, _number(row.get(name))) for i, row in zip(index, per_second)]
            points = [(i, v) for i, v in points if v is not None]
            if points:
                axes.plot([p[0] for p in points], [p[1] for p in points], color=colour, linewidth=1.2,
                          marker=".", label=f"{name.replace('_', ' ')} (all engines)")
        axes.set_ylabel("tokens/s")
        requests = axes.twinx()
        for name, colour in (("running_reqs", "#1b7f2a"), ("waiting_reqs", "#b91c1c")):
            points = [(i, _number(row.get(name))) for i, row in zip(index, per_second)]
            points = [(i, v) for i, v in points if v is not None]
            if points:
                requests.step([p[0] for p in points], [p[1] for p in points], where="mid", color=colour,
                              linewidth=1, label=name.replace("_", " "))
        requests.set_ylabel("requests")
        if requests.get_legend_handles_labels()[0]:
            requests.legend(fontsize=7, loc="lower right")
        ticks = index[:: max(1, len(index) // 6)]
        axes.set_xticks(ticks, [f"{per_second[i].get('attempt')}\n{per_second[i].get('time')}" for i in ticks],
                        fontsize=6)
        axes.set_xlabel("second with a vLLM report (attempt, MM-DD hh:mm:ss)")
        return True

    return render_panel(draw, "vLLM utilisation per second, summed over engines",
                        "vLLM throughput in tokens per second (generation and prompt, summed over engines) and the "
                        "running and waiting requests, for each second with a stat report, in log order")


def placeholder_png(text: str) -> bytes:
    """A small PNG that states why there is no plot (a declared output must exist)."""
    def draw(axes) -> bool:
        axes.axis("off")
        axes.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10)
        return True

    made = render_panel(draw, "", text, height=1.2)
    assert made is not None
    return made[2]


def panels(rows: Sequence[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]] | None, *,
           candidates: Sequence[int] = (), selected_step: int | None = None) -> list[tuple[str, str, bytes]]:
    """(title, alt text, PNG) for each plot whose data exists: reward raw and smoothed with the
    checkpoints and the selected one; entropy and grad norm; |log ratio| mean/p99/max; failed
    trajectories per step; the trials' turn-count distribution."""
    render = render_panel
    reward_metric = reward_series(rows)[0]

    def reward(axes) -> bool:
        steps, values = _series(rows, reward_metric) if reward_metric else ([], [])
        if not steps:
            return False
        axes.plot(steps, values, color="#9db4d0", marker=".", linewidth=1, label="raw")
        axes.plot(steps, _ema(values), color="#1f4e8c", linewidth=2, label="EMA (alpha 1/3)")
        for index, step in enumerate(candidates):
            axes.axvline(step, color="#555555", linestyle=":", linewidth=1, label="checkpoint" if index == 0 else None)
        if selected_step is not None:
            axes.axvline(selected_step, color="#1b7f2a", linewidth=2, label=f"selected (step {selected_step})")
        axes.set_xlabel("global step")
        axes.set_ylabel(reward_metric)
        return True

    def per_step(axes, metrics: Sequence[tuple[str, str | None]], draw_one) -> bool:
        """Draw each (metric, colour) that has values against the global step; False if none has."""
        drawn = False
        for metric, colour in metrics:
            steps, values = _series(rows, metric)
            if steps:
                draw_one(steps, values, metric, colour)
                drawn = True
        axes.set_xlabel("global step")
        return drawn

    def entropy(axes) -> bool:
        return per_step(axes, (("policy/policy_entropy", "#7b3294"), ("policy/grad_norm", "#c2410c")),
                        lambda s, v, m, c: axes.plot(s, v, color=c, linewidth=1.5, label=m))

    def log_ratio(axes) -> bool:
        names = sorted({k for row in rows for k in row if "log_ratio" in k or "logprob_diff" in k})
        return per_step(axes, [(name, None) for name in names],
                        lambda s, v, m, c: axes.plot(s, [abs(x) for x in v], linewidth=1.2, label=f"|{m}|"))

    def failures(axes) -> bool:
        return per_step(axes, (("generate/num_error_trajectories", "#b91c1c"),
                               ("generate/num_timeout_trajectories", "#d97706")),
                        lambda s, v, m, c: axes.bar(s, v, color=c, alpha=0.7, label=m))

    def turns(axes) -> bool:
        counts = Counter(int(n) for n in (_number(t.get("n_episodes")) for t in trials or []) if n is not None)
        if not counts:
            return False
        axes.bar(list(counts), list(counts.values()), color="#1f4e8c")
        axes.set_xlabel("turns (n_episodes)")
        axes.set_ylabel("trials")
        return True

    made = [
        render(reward, f"{reward_metric or 'reward'}: raw and smoothed",
               "Reward per global step, raw and EMA-smoothed, with the checkpoints as dotted lines and the selected "
               "checkpoint as a solid green line"),
        render(entropy, "policy entropy and grad norm", "Policy entropy and gradient norm per global step"),
        render(log_ratio, "|log ratio| statistics", "Absolute log-ratio mean, p99 and max per global step"),
        render(failures, "failed trajectories per step", "Error and timeout trajectories per global step"),
        render(turns, "turn-count distribution", "How many trials took each number of turns"),
    ]
    return [panel for panel in made if panel is not None]
