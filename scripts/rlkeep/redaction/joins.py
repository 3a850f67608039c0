"""A secret as a writer breaks it: a terminal's hard wrap at its width (spaces padding the row),
a shell's backslash-newline (with the `> ` prompt a terminal shows after it), CRLF, a wrap kept
as `\\n` inside a JSON string, and consecutive records of a JSONL stream each holding a piece.

The fast pass never joins anything. Its prefilter also reports where a self-naming credential's
prefix runs up to a line break, or a prefix is itself cut by one (`TRIGGERS`); only there a
second pass builds a joined view of the text around (`joined_views`: breaks, continuation
backslashes, indentation and prompts at line starts taken out; or one JSON field's values of
consecutive records put end to end), with a map back to the original bytes, and runs the
joinable rules on it. A match that crosses a join becomes one span per piece, so what lies
between the pieces (the line break, the prompt, the JSON between two records) stays and a
container's syntax survives.

Where a token ends at a line break is ambiguous: `xoxb-...\\nbye` may be one token wrapped or a
token and the next line's word. A match is carried across a break only when what it gains there
looks like a token (a digit, or upper and lower case) or the writer said it continues (a
backslash); a word-like tail of a few letters after a complete token stays, and what is left
cannot rebuild the secret (its head is gone).
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Callable, Container, Iterable, Iterator, Sequence

# A line break as writers leave one inside a token, and what a terminal puts at the next line start.
_BREAK = rb"(?:\\?(?:\r\n|\n|\r)|(?:\\\\)?(?:\\r\\n|\\n|\\r))"
_LINE_START = rb"[ \t]*(?:(?:>>>|\.\.\.|[$#%>])[ \t]+)?"
SEPARATOR = re.compile(rb"[ \t]*" + _BREAK + _LINE_START)
_CONTINUED = re.compile(rb"\\(?:\\\\)?(?:\r\n|\n|\r|\\[nr])")  # a backslash says the line goes on

# Prefilter patterns (valid for re, RE2 and Hyperscan). A prefix whose token runs to a break (a
# raw or escaped line end, or the end of a JSON record's line); and a prefix cut by a break.
_TAIL = rb"[A-Za-z0-9_.+/=-]*"
# Each break form is a pattern of its own: Hyperscan missed matches of one alternation of both.
_TAIL_BREAKS = (rb"[ \t]*(?:\\?[\r\n]|(?:\\\\)?\\[nr])", rb'"[^\n]*\n')
_CUTS = (rb"[ \t]*(?:\\?(?:\r\n|\n|\r)|(?:\\\\)?(?:\\r\\n|\\n|\\r))" + _LINE_START, rb'"[^\n]*\n[^\n]*"')
JOIN_BACK = 2048  # a trigger's prefix lies this far before its end at most (a token, or a JSON record's rest)
JOIN_AHEAD = 12 << 10  # the joined view reaches this far past it (a PEM block with its header cut)
MAX_JOINS = 400  # breaks one match may cross (a PEM body at a narrow width)
_TOKEN_LIKE = (re.compile(rb"[0-9]"), re.compile(rb"[A-Z]"), re.compile(rb"[a-z]"))
_TOKEN_END = frozenset(b" \t\r\n\"'`;,)]}>/?&#@:")  # where a wrapped token's last piece may stop
_RECORD_FIELD = re.compile(rb'"((?:[^"\\\n]|\\.){1,200})"[ \t]*:[ \t]*"((?:[^"\\\n]|\\.)*)"')


def _escape(literal: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in literal)


def trigger_patterns(needles: Iterable[bytes]) -> list[bytes]:
    """For each joinable prefix: the prefix, its token and a break; and the prefix cut at each place."""
    patterns: list[bytes] = []
    for needle in sorted(set(needles)):
        tail = rb"[ A-Z0-9_-]*" if needle.startswith(b"-----") else _TAIL
        patterns += [_escape(needle) + tail + brk for brk in _TAIL_BREAKS]
        patterns += [_escape(needle[:cut]) + form + _escape(needle[cut:]) for cut in range(1, len(needle)) for form in _CUTS]
    return patterns


@dataclass
class View:
    """Text put together from stretches of `hay`: `text[n]` came from `hay[origin(n)]`; `joins`
    are the positions in `text` where a break (or a record boundary) was taken out."""

    text: bytes
    starts: list[int]  # where each stretch begins in `text`
    origins: list[int]  # where it began in `hay`
    joins: list[int]
    continued: set[int]  # joins the writer marked with a backslash

    def pieces(self, begin: int, end: int) -> Iterator[tuple[int, int]]:
        """text[begin:end] as runs of contiguous bytes of `hay`."""
        index = bisect.bisect_right(self.starts, begin) - 1
        while begin < end:
            stop = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.text)
            piece_end = min(end, stop)
            if piece_end > begin:
                origin = self.origins[index] + begin - self.starts[index]
                yield origin, origin + piece_end - begin
            begin = piece_end
            index += 1


def _build(hay: bytes | bytearray, stretches: Sequence[tuple[int, int]]) -> View:
    """The stretches end to end (a join between two), each with its separators taken out."""
    parts: list[bytes] = []
    starts: list[int] = []
    origins: list[int] = []
    joins: list[int] = []
    continued: set[int] = set()
    length = 0
    for number, (low, high) in enumerate(stretches):
        if number and length:
            joins.append(length)
        position = low
        for separator in SEPARATOR.finditer(hay, low, high):
            if separator.start() > position:
                parts.append(bytes(hay[position:separator.start()]))
                starts.append(length)
                origins.append(position)
                length += separator.start() - position
            if not joins or joins[-1] != length:
                joins.append(length)
            if _CONTINUED.search(hay, separator.start(), separator.end()):
                continued.add(length)
            position = separator.end()
        if high > position:
            parts.append(bytes(hay[position:high]))
            starts.append(length)
            origins.append(position)
            length += high - position
    return View(b"".join(parts), starts, origins, joins, continued)


def _records(hay: bytes | bytearray, low: int, high: int) -> list[View]:
    """For JSON-lines text: one view per field name, its string values in consecutive records end to end."""
    views: list[View] = []
    line_start = hay.rfind(b"\n", 0, low) + 1
    runs: dict[bytes, list[tuple[int, int]]] = {}
    last_line: dict[bytes, int] = {}
    number = 0
    while line_start < high:
        line_end = hay.find(b"\n", line_start, high)
        line_end = high if line_end < 0 else line_end
        if hay[line_start:line_start + 1] == b"{":
            for field in _RECORD_FIELD.finditer(hay, line_start, line_end):
                name = field.group(1)
                if last_line.get(name, -2) != number - 1 and len(runs.get(name, ())) > 1:
                    views.append(_build(hay, runs[name]))
                if last_line.get(name, -2) != number - 1:
                    runs[name] = []
                if last_line.get(name) != number:
                    runs[name].append(field.span(2))
                last_line[name] = number
        number += 1
        line_start = line_end + 1
    views += [_build(hay, run) for run in runs.values() if len(run) > 1]
    return views


def joined_views(hay: bytes | bytearray, ends: Iterable[int]) -> list[View]:
    """The joined views around trigger ends: the text with its breaks taken out, and, in JSON
    lines, each field across consecutive records."""
    regions: list[list[int]] = []
    for end in sorted(ends):
        low, high = max(0, end - JOIN_BACK), min(len(hay), end + JOIN_AHEAD)
        if regions and low <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], high)
        else:
            regions.append([low, high])
    views: list[View] = []
    for low, high in regions:
        low = hay.rfind(b"\n", max(0, low - 256), low) + 1 or low  # from a line start, where one is near
        views.append(_build(hay, [(low, high)]))
        if b'":' in hay[low:high] or b'": ' in hay[low:high]:
            views += _records(hay, low, high)
    return views


def token_like(text: bytes, begin: int, end: int, joins: Sequence[int]) -> bool:
    """text[begin:end], gained past a break, reads as a token's rest: a digit or both cases in
    it, and it stops where tokens stop (a space, a quote, a break, the end), not inside a word
    or a date (`2025-06-12`)."""
    gained = text[begin:end]
    digit, upper, lower = (pattern.search(gained) is not None for pattern in _TOKEN_LIKE)
    stops = end == len(text) or text[end] in _TOKEN_END or end in joins
    return (digit or (upper and lower)) and stops


def joined_match(regex: re.Pattern[bytes], view: View, position: int, group: int,
                 accept: Callable[[bytes], bool] | None, fresh: Container[int], closed: bool = False
                 ) -> tuple[int, int] | None:
    """(start, end) in the view's text of the match at `position` (its group), carried across
    joins as far as it stays a token and no other credential starts at one (`fresh`: the joins
    where a prefix begins); None when no match crosses a join."""
    text = view.text
    joins = set(view.joins)
    first_join = bisect.bisect_right(view.joins, position)
    limits = view.joins[first_join:first_join + MAX_JOINS]
    best: tuple[int, int] | None = None
    best_end = position
    whole = regex.match(text, position) if closed else None
    for limit in [] if whole is not None else [*limits, len(text)]:
        match = regex.match(text, position, limit)
        if match is None or match.end() <= best_end:
            continue
        span = match.span(group)
        if span[0] == span[1] or (accept is not None and not accept(text[span[0]:span[1]])):
            continue
        if best is not None:
            crossed = view.joins[bisect.bisect_right(view.joins, best_end - 1):bisect.bisect_left(view.joins, match.end())]
            if any(j in fresh for j in crossed) or not (
                    any(j in view.continued for j in crossed) or token_like(text, best_end, match.end(), joins)):
                break
        best, best_end = span, match.end()
    if whole is not None:
        best, best_end = whole.span(group), whole.end()
    if best is None:
        return None
    inside = bisect.bisect_right(view.joins, position)
    if inside >= len(view.joins) or view.joins[inside] >= best_end:
        return None  # no break inside the match: the plain pass finds it
    return best
