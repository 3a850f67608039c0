"""The campaign's overlay plot as inline SVG, drawn from the runs' digests (rlkeep.campaign.digest):
every run's reward, raw (thin) and smoothed (thick), on one axis, each run's selected step marked
with a diamond. Plain strings, no plotting library at page time: 300 runs draw in milliseconds, and
the index's filter hides the lines of the runs it hides (each run is a `<g data-job>`).
"""
from __future__ import annotations

import math
from typing import Any

from rlkeep.campaign.markup import esc

WIDTH, HEIGHT = 640, 270
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 12, 36


def run_colour(index: int) -> str:
    """Distinct hues around the wheel (golden-angle steps), dark enough for thin lines on white."""
    return f"hsl({(index * 137.508) % 360:.0f},65%,36%)"


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) inside [low, high]."""
    if high <= low:
        return [low]
    raw = (high - low) / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _label(value: float) -> str:
    text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in {"", "-0"} else text


def _extent(digests: list[dict[str, Any]]) -> tuple[float, float, float, float] | None:
    xs, ys = [], []
    for digest in digests:
        for x, y in digest["rewards"]["raw"] + digest["rewards"]["smooth"]:
            xs.append(x)
            ys.append(y)
    if not xs:
        return None
    low, high = min(ys), max(ys)
    pad = (high - low) * 0.05 or 0.5
    return min(0.0, min(xs)), max(xs) or 1.0, low - pad, high + pad


def overlay_svg(digests: list[dict[str, Any]]) -> str:
    """The overlay figure, or a sentence saying no run has logged a reward yet."""
    drawn = [d for d in digests if d["rewards"]["raw"]]
    extent = _extent(drawn)
    if extent is None:
        return "<p>No run has logged a reward yet.</p>"
    x0, x1, y0, y1 = extent
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / ((x1 - x0) or 1) * plot_w

    def py(y: float) -> float:
        return TOP + (1 - (y - y0) / ((y1 - y0) or 1)) * plot_h

    def points(series: list[list[float]]) -> str:
        return " ".join(f"{px(x):.0f},{py(y):.0f}" for x, y in series)

    axes = [f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for x in _ticks(x0, x1):
        axes.append(f'<text x="{px(x):.0f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle">{_label(x)}</text>')
    for y in _ticks(y0, y1):
        axes.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(y):.0f}" y2="{py(y):.0f}" class="grid"/>'
                    f'<text x="{LEFT - 4}" y="{py(y) + 4:.0f}" text-anchor="end">{_label(y)}</text>')
    metrics = sorted({d["rewards"]["metric"] for d in drawn})
    axes.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">global step</text>')
    axes.append(f'<text transform="translate(12 {TOP + plot_h / 2:.0f}) rotate(-90)" text-anchor="middle">'
                f'{esc(" / ".join(metrics))}</text>')
    lines = []
    for index, digest in enumerate(digests):
        rewards = digest["rewards"]
        if not rewards["raw"]:
            continue
        colour = run_colour(index)
        selected = digest.get("selected") or {}
        mark = ""
        if isinstance(selected.get("step"), (int, float)) and rewards["at_selected"] is not None:
            x, y = px(selected["step"]), py(rewards["at_selected"])
            mark = f'<path class="sel" d="M{x:.0f} {y - 5:.0f}l5 5-5 5-5-5z" data-step="{esc(selected["step"])}"/>'
        label = f'{digest["job"]}: reward, raw and smoothed' + (
            f'; selected step {selected["step"]}' if selected.get("step") is not None else "; no step selected")
        lines.append(f'<g class="run" data-job="{esc(digest["job"])}" style="--c:{colour}"><title>{esc(label)}</title>'
                     f'<polyline class="raw" points="{points(rewards["raw"])}"/>'
                     f'<polyline class="ema" points="{points(rewards["smooth"])}"/>{mark}</g>')
    description = (f"Reward per global step of {len(lines)} runs on one axis: thin lines raw, thick lines "
                   "smoothed (EMA), a diamond at each run's selected step. Hover or focus a line for its run; "
                   "the table of selected checkpoints below gives the same facts in text.")
    return (f'<svg id="overlay" class="overlay" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'aria-labelledby="overlay-desc" data-runs="{len(lines)}"><desc id="overlay-desc">{esc(description)}</desc>'
            f'{"".join(axes)}{"".join(lines)}</svg>')
