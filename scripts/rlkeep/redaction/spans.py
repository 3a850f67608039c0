"""Matching one window of bytes: the probes that run at prefix positions, the spans they yield,
how spans merge, and how replacing them with markers keeps line numbers true."""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy

from rlkeep.redaction.common import CONTEXT, MARKER_PATTERN, MARKER_PREFIX, MAX_MATCH_LENGTH
from rlkeep.redaction.rules import Rule


@dataclass(frozen=True, eq=False)  # hashed by identity: used as a dict key per window
class Probe:
    """One (rule, prefix) pair: a regex that starts with a literal, so `re` can skip ahead fast.

    A lower-case rule's regex is written for ASCII-lower-cased text. Where the prefilter gives
    positions, `folded` (the same regex with re.IGNORECASE) runs on the text as it is instead:
    for a bytes pattern without upper-case letters that is the same match (re folds ASCII only,
    as bytes.lower does), and no window is lower-cased."""

    priority: float
    rule: Rule
    needle: bytes
    regex: re.Pattern[bytes]
    folded: re.Pattern[bytes] | None = None  # lower-case rules: the regex with re.IGNORECASE


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    priority: float
    kind: str


_WORD_BYTES = frozenset((string.ascii_letters + string.digits + "_").encode())
MARKER = re.compile(MARKER_PATTERN)
_LINE_BREAKS = re.compile(rb"[^\r\n]+")


_COUNT_BLOCK = 1 << 16


def count_newlines(data: bytes | bytearray, start: int, end: int) -> int:
    """`data.count(b"\\n", start, end)`, about four times faster through numpy. Long ranges go
    in 64 KiB blocks: a comparison array the size of a window would be fresh pages, and the
    page faults would cost more than the count (blocks this size reuse the same heap memory)."""
    if end - start < _COUNT_BLOCK:
        return data.count(b"\n", start, end)
    array = numpy.frombuffer(data, numpy.uint8, end - start, start)
    return sum(int(numpy.count_nonzero(array[low:low + _COUNT_BLOCK] == 10))
               for low in range(0, end - start, _COUNT_BLOCK))


def left_boundary_ok(text: bytes, start: int, policy: str) -> bool:
    if not policy or start == 0:
        return True
    previous = text[start - 1]
    if policy == "word":
        if previous not in _WORD_BYTES:
            return True
        # `\n`, `\t` (JSON escapes) or `%2F` (percent-encoding) right before a token is a boundary.
        return (start >= 2 and text[start - 2] == 0x5C) or (start >= 3 and text[start - 3] == 0x25)
    return previous in b"?&;" or text.endswith(b"\\u0026", 0, start) or text.endswith(b"%26", 0, start)


def mask_markers(text: bytes | bytearray) -> bytes | bytearray:
    """Earlier markers become `<###...>` (same length) so no rule can match in or through them.
    (`MARKER.sub` does the same but tries the pattern at every `<`; finding the prefix is faster.)"""
    pieces: list[bytes | bytearray] = []
    position = 0
    index = text.find(MARKER_PREFIX)
    while index >= 0:
        match = MARKER.match(text, index)
        if match is None:
            index = text.find(MARKER_PREFIX, index + 1)
            continue
        pieces += (text[position:index], b"<" + b"#" * (match.end() - index - 2) + b">")
        position = match.end()
        index = text.find(MARKER_PREFIX, position)
    if not pieces:
        return text
    pieces.append(text[position:])
    return b"".join(pieces)


def _marker(kind: str, redacted: bytes) -> bytes:
    # The line breaks of the redacted text stay, so every later line keeps its number.
    return b"<redacted:" + kind.encode() + b">" + _LINE_BREAKS.sub(b"", redacted)


def merge_spans(spans: list[Span]) -> list[Span]:
    """Overlapping spans become one, labelled with the most specific kind among them."""
    spans.sort(key=lambda span: (span.start, -span.end))
    merged: list[Span] = []
    for span in spans:
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            best = last if last.priority <= span.priority else span
            merged[-1] = Span(last.start, max(last.end, span.end), best.priority, best.kind)
        else:
            merged.append(span)
    return merged


def replace_spans(text: bytes, spans: Sequence[Span]) -> tuple[bytes, list[tuple[int, int]]]:
    """The text with each span replaced by its marker, and where the markers now are."""
    pieces: list[bytes] = []
    markers: list[tuple[int, int]] = []
    position = 0
    length = 0
    for span in spans:
        kept = text[position:span.start]
        marker = _marker(span.kind, text[span.start:span.end])
        pieces += (kept, marker)
        length += len(kept)
        markers.append((length, length + len(marker)))
        length += len(marker)
        position = span.end
    pieces.append(text[position:])
    return b"".join(pieces), markers


def neighbourhoods(markers: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Where a new match can start once these markers replaced text: from a match's length before
    a marker (its tail may have changed) to just after it (a boundary may have changed)."""
    ranges: list[tuple[int, int]] = []
    for start, end in markers:
        low, high = max(lo, start - MAX_MATCH_LENGTH), min(hi, end + CONTEXT)
        if ranges and low <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], high))
        elif low < high:
            ranges.append((low, high))
    return ranges


def matches(regex: re.Pattern[bytes], subject: bytes, positions: list[int] | None, begin: int, stop: int,
            group: int) -> Iterator[tuple[int, int, int]]:
    """(match start, group start, group end) of every match of `regex` starting in [begin, stop),
    overlapping ones included; with `positions` (where the regex's prefix occurs) the same
    matches, found by trying only there.

    Overlaps matter: in `secret: client_secret = <value>` the match at the first `secret` takes
    `client_secret` as its value and is rejected by the rule's `accept`; the match that starts
    inside it is the real one.
    """
    if positions is None:
        match = regex.search(subject, begin)
        while match is not None and match.start() < stop:
            yield (match.start(), *match.span(group))
            match = regex.search(subject, match.start() + 1)
        return
    for position in positions:
        if position >= stop:
            return
        if position < begin:
            continue
        match = regex.match(subject, position)
        if match is not None:
            yield (position, *match.span(group))
