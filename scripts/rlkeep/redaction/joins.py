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
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

# A line break as writers leave one inside a token, and what a terminal puts at the next line start.
_PROMPT = rb"(?:>>>|\.\.\.|[$#%>])"
_LINE_START = rb"[ \t]*(?:" + _PROMPT + rb"[ \t]+)?"
_LINE_START_NOT_EMPTY = rb"(?:[ \t]+|[ \t]*" + _PROMPT + rb"[ \t]+)"  # the same but the empty string
# Each branch starts with a literal byte, so `re` skips to the next break fast; the spaces before
# a break are taken with it in _build.
SEPARATOR = re.compile(rb"(?:\\\r\n|\\\n|\\\r|\r\n|\n|\r|\\\\\\r\\n|\\\\\\n|\\\\\\r|\\r\\n|\\n|\\r)" + _LINE_START)
_CONTINUED = re.compile(rb"\\(?:\\\\)?(?:\r\n|\n|\r|\\[nr])")  # a backslash says the line goes on

# Prefilter patterns (valid for re, RE2 and Hyperscan). A prefix whose token runs to a break (a
# raw or escaped line end, or the end of a JSON record's line); and a prefix cut by a break.
_TAIL = rb"[A-Za-z0-9_.+/=-]*"
# Each break form is a pattern of its own (a fixed stretch of two or more bytes is what Hyperscan
# scans fast). A prefix cut by a break at a bare line start is a literal per break; behind an
# indent or a prompt, one pattern per cut place with the break forms as an alternation: spelled
# out per break, the line-start class between two literals made Hyperscan build a thousand small
# automata (most of a process's start-up).
_TAIL_BREAKS = (rb"[ \t]*(?:\\?[\r\n]|(?:\\\\)?\\[nr])", rb'"[^\n]*\n')
_CUT_BREAKS = (b"\n", b"\r\n", b"\r", b"\\\n", b"\\\r\n", b"\\n", b"\\r\\n", b"\\\\\\n")
JOIN_BACK = 1024  # a trigger's prefix lies this far before its end at most (a token, or a JSON record's rest)
JOIN_AHEAD = 2048  # the joined view reaches this far past it (the longest token, wrapped at 20 columns)
PEM_AHEAD = 6 << 10  # or this far where a PEM header is near (the block of an RSA-4096 key, wrapped narrow)
MAX_JOINS = 400  # breaks one match may cross (a PEM body at a narrow width)
_TOKEN_LIKE = (re.compile(rb"[0-9]"), re.compile(rb"[A-Z]"), re.compile(rb"[a-z]"))
_TOKEN_END = frozenset(b" \t\r\n\"'`;,)]}>/?&#@:")  # where a wrapped token's last piece may stop
_RECORD_FIELD = re.compile(rb'"((?:[^"\\\n]|\\.){1,200})"[ \t]*:[ \t]*"((?:[^"\\\n]|\\.)*)"')


def _escape(literal: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in literal)


_CUT_BREAK = b"(?:" + b"|".join(_escape(brk) for brk in _CUT_BREAKS) + b")"


def trigger_patterns(needles: Iterable[bytes]) -> list[bytes]:
    """For each joinable prefix: the prefix, its token and a break; and the prefix cut at each place
    by a break."""
    patterns: list[bytes] = []
    for needle in sorted(set(needles)):
        patterns += [_escape(needle) + _tail(needle) + brk for brk in _TAIL_BREAKS]
        for cut in range(1, len(needle)):
            patterns += [_escape(needle[:cut] + brk + needle[cut:]) for brk in _CUT_BREAKS]
            patterns.append(_escape(needle[:cut]) + _CUT_BREAK + _LINE_START_NOT_EMPTY + _escape(needle[cut:]))
    return patterns


def _tail(needle: bytes) -> bytes:
    return rb"[ A-Z0-9_-]*" if needle.startswith(b"-----") else _TAIL


class TriggerFinder:
    """The same triggers for engines without a multi-pattern scan (re, RE2): each tail pattern
    only where its prefix occurs, and one pass over the line breaks for a prefix cut by one (the
    rest of a prefix after a break, then the piece before the break checked in place)."""

    def __init__(self, needles: Iterable[bytes], compile_: Callable[[bytes], Any]) -> None:
        self._tails = [(needle, compile_(_escape(needle) + _tail(needle) + b"(?:" + b"|".join(_TAIL_BREAKS) + b")"))
                       for needle in sorted(set(needles))]
        self._rights: dict[int, list[tuple[bytes, tuple[bytes, ...]]]] = {}
        pairs: dict[bytes, set[bytes]] = {}
        for needle in set(needles):
            for cut in range(1, len(needle)):
                pairs.setdefault(needle[cut:], set()).add(needle[:cut])
        for right, lefts in pairs.items():
            self._rights.setdefault(right[0], []).append((right, tuple(lefts)))
        first_bytes = b"[" + b"".join(_escape(bytes([byte])) for byte in sorted(self._rights)) + b"]"
        # one pattern per break form, each starting with a literal byte: `re` skips to it fast
        self._cuts = [compile_(brk + _LINE_START + first_bytes) for brk in (rb"\n", rb"\r\n?", rb"\\[nr](?:\\n)?")]

    def ends(self, hay: bytes | bytearray) -> list[int]:
        ends = [match.end() for needle, regex in self._tails if needle in hay for match in regex.finditer(hay)]
        for cuts in self._cuts:
            for match in cuts.finditer(hay):
                at = match.end() - 1
                # where the piece before the break may end: before a `\r`, then a backslash (raw or JSON-escaped)
                before = [match.start()] + ([match.start() - 1] if hay.endswith(b"\r", 0, match.start()) else [])
                before += [end - len(slash) for end in list(before) for slash in (b"\\", b"\\\\")
                           if hay.endswith(slash, 0, end)]
                for right, lefts in self._rights[hay[at]]:
                    if hay.startswith(right, at) and any(hay.endswith(left, 0, end) for left in lefts for end in before):
                        ends.append(at + len(right))
                        break
        return ends


@dataclass
class View:
    """Text put together from stretches of `hay`: `text[n]` came from `hay[origin(n)]`; `joins`
    are the positions in `text` where a break (or a record boundary) was taken out."""

    text: bytes
    starts: list[int]  # where each stretch begins in `text`
    origins: list[int]  # where it began in `hay`
    joins: list[int]
    continued: set[int]  # joins the writer marked with a backslash
    records: bool = False  # one JSON field across records: what lies between the pieces is JSON
    restarts: set[int] = field(default_factory=set)  # joins after which a line begins as the one before did

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


def _build(hay: bytes | bytearray, stretches: Sequence[tuple[int, int]], records: bool = False) -> View:
    """The stretches end to end (a join between two), each with its separators taken out."""
    parts: list[bytes] = []
    starts: list[int] = []
    origins: list[int] = []
    joins: list[int] = []
    continued: set[int] = set()
    restarts: set[int] = set()
    length = 0
    for number, (low, high) in enumerate(stretches):
        if number and length:
            joins.append(length)
        position = low
        for separator in SEPARATOR.finditer(hay, low, high):
            begin = separator.start()
            while begin > position and hay[begin - 1] in b" \t":  # a terminal row's padding
                begin -= 1
            if begin > position:
                parts.append(bytes(hay[position:begin]))
                starts.append(length)
                origins.append(position)
                length += begin - position
            if not joins or joins[-1] != length:
                joins.append(length)
            if hay.find(b"\\", begin, separator.end()) >= 0 and _CONTINUED.search(hay, begin, separator.end()):
                continued.add(length)
            if _restarts(hay, begin, separator.end()):
                restarts.add(length)
            position = separator.end()
        if high > position:
            parts.append(bytes(hay[position:high]))
            starts.append(length)
            origins.append(position)
            length += high - position
    return View(b"".join(parts), starts, origins, joins, continued, records, restarts)


def _restarts(hay: bytes | bytearray, start: int, end: int) -> bool:
    """The line after this break begins with the same 8 bytes as the line before it (a log's
    timestamp, a record's first field): a new entry, not the rest of a wrapped one."""
    newline = hay.rfind(b"\n", start, end)
    if newline < 0:
        return False
    before = hay.rfind(b"\n", 0, start) + 1
    head = hay[before:before + 8]
    return len(head) == 8 and hay.startswith(head, newline + 1)


def _records(hay: bytes | bytearray, low: int, high: int, needles: Sequence[bytes]) -> list[View]:
    """For JSON-lines text: one view per field name, its string values in consecutive records end
    to end, where they hold one of `needles` once put together."""
    views: list[View] = []
    line_start = max(hay.rfind(b"\n", 0, low) + 1, low - JOIN_BACK)  # a long record: its end is enough
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
                    views += _holding(hay, runs[name], needles)
                if last_line.get(name, -2) != number - 1:
                    runs[name] = []
                if last_line.get(name) != number:
                    runs[name].append(field.span(2))
                last_line[name] = number
        number += 1
        line_start = line_end + 1
    for run in runs.values():
        if len(run) > 1:
            views += _holding(hay, run, needles)
    return views


def _holding(hay: bytes | bytearray, run: list[tuple[int, int]], needles: Sequence[bytes]) -> list[View]:
    joined = b"".join(hay[low:high] for low, high in run)
    return [_build(hay, run, records=True)] if any(needle in joined for needle in needles) else []


def joined_views(hay: bytes | bytearray, ends: Iterable[int], needles: Sequence[bytes]) -> list[View]:
    """The joined views around trigger ends: the text with its breaks taken out, and, in JSON
    lines, each field across consecutive records that holds one of `needles`."""
    regions: list[list[int]] = []
    for end in sorted(ends):
        low = max(0, end - JOIN_BACK)
        ahead = PEM_AHEAD if hay.find(b"-----BEGIN", low, end + 16) >= 0 else JOIN_AHEAD
        high = min(len(hay), end + ahead)
        if regions and low <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], high)
        else:
            regions.append([low, high])
    views: list[View] = []
    for low, high in regions:
        low = hay.rfind(b"\n", max(0, low - 256), low) + 1 or low  # from a line start, where one is near
        views.append(_build(hay, [(low, high)]))
        if b'":' in hay[low:high] or b'": ' in hay[low:high]:
            views += _records(hay, low, high, needles)
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
                 accept: Callable[[bytes], bool] | None, prefixes: tuple[bytes, ...], closed: bool = False
                 ) -> tuple[int, int] | None:
    """(start, end) in the view's text of the match at `position` (its group), carried across
    joins as far as it stays a token and no other credential (one of `prefixes`) starts at one;
    None when no match crosses a join."""
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
            if any(text.startswith(prefixes, j) or j in view.restarts for j in crossed) or not (
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


def past_a_whole_token(view: View, found: tuple[int, int],
                       rules: Sequence[tuple[re.Pattern[bytes], int, Callable[[bytes], bool] | None]]) -> bool:
    """The match `found` reaches past a break only to take the next line's word: up to a break it
    crosses, it is already a whole credential by one of `rules` (regex, group, accept), and what it
    gains past that break neither reads as a token's rest nor was continued by a backslash. Two
    rules can disagree on a token's length (`sk-` keys), so the longer one must not take a word
    after it."""
    start, end = found
    crossed = view.joins[bisect.bisect_right(view.joins, start):bisect.bisect_left(view.joins, end)]
    for join in reversed(crossed):
        if join in view.continued or token_like(view.text, join, end, view.joins):
            continue
        for regex, group, accept in rules:
            match = regex.match(view.text, start, join)
            if match is not None and match.span(group) == (start, join) and (
                    accept is None or accept(view.text[start:join])):
                return True
    return False
