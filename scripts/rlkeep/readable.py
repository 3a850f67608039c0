"""Numbers and words as people read them: thousands separators, fixed significant digits and one
format per column (never `2.035e+04` beside `6831`), durations as `5 h 41 min`, counts with the
right singular or plural, and the known name an unknown key was probably meant to be.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

DIGITS = 3  # significant digits of a measured value


def _decimals(magnitude: float, digits: int = DIGITS) -> int:
    """Decimals that show `digits` significant digits of a value of this magnitude (none at or above 10^digits-1)."""
    if magnitude == 0 or not math.isfinite(magnitude):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(magnitude)))


def _fixed(value: float, decimals: int) -> str:
    text = f"{value:,.{decimals}f}"
    return "0" if text.lstrip("-").strip("0.,") == "" else text


def number(value: Any, digits: int = DIGITS) -> str:
    """One value: integers with thousands separators, floats to `digits` significant digits without an
    exponent (a float of a thousand or more is rounded to a whole number); anything else as text."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value != 0 and abs(value) < 10 ** -(digits + 1):
        return f"{value:.{digits - 1}e}"
    return _fixed(value, _decimals(abs(value), digits))


def column(values: Sequence[Any], digits: int = DIGITS) -> list[str]:
    """A column of values in one format: the decimals that give its largest value `digits`
    significant digits, shared by every cell; text and empty cells as they are."""
    floats = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    if not floats:
        return [number(v, digits) for v in values]
    decimals = _decimals(max(floats), digits)
    if max(floats) < 1:  # a column of small values keeps the digits of its smallest non-zero value
        smallest = min((v for v in floats if v), default=0.0)
        decimals = min(max(decimals, _decimals(smallest, digits)), 6)
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            out.append("" if value is None else str(value))
        elif isinstance(value, int):
            out.append(_fixed(float(value), decimals) if decimals else f"{value:,}")
        elif not math.isfinite(value):
            out.append(str(value))
        else:
            out.append(_fixed(value, decimals))
    return out


def columns(rows: Iterable[Sequence[Any]], digits: int = DIGITS) -> list[list[str]]:
    """Rows whose every column is formatted by `column`."""
    rows = [list(row) for row in rows]
    if not rows:
        return []
    width = max(len(row) for row in rows)
    padded = [row + [None] * (width - len(row)) for row in rows]
    formatted = [column([row[i] for row in padded], digits) for i in range(width)]
    return [[formatted[i][r] for i in range(len(rows[r]))] for r in range(len(rows))]


def duration(seconds: float | None) -> str:
    """`5 h 41 min`, `3 min 20 s`, `12 s`, `2 d 5 h`: the two largest units, rounded."""
    if seconds is None:
        return ""
    total = int(round(seconds))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    total_minutes = int(round(seconds / 60))
    hours, minutes = divmod(total_minutes, 60)
    if hours < 48:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(int(round(seconds / 3600)), 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """`1 record`, `2 records`, `1 run has`: the count and the word that agrees with it."""
    word = singular if count == 1 else (plural_form or singular + "s")
    return f"{count:,} {word}"


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions; a swap of neighbours counts one)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]


def did_you_mean(unknown: str, known: Iterable[str], within: int = 2) -> str | None:
    """The known name nearest `unknown` when it is within `within` edits, else None."""
    best = min(((edit_distance(unknown, name), name) for name in known), default=None)
    return best[1] if best is not None and best[0] <= within else None
