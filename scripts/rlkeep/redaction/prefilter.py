"""Prefilters: where in a window a rule's literal prefix (or a known literal value) can start, so
only those rules run, only there. Hyperscan (one SIMD multi-pattern pass), google-re2 (one DFA
pass) or the standard library; the prefilter only narrows, the findings are the same."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence

from rlkeep.redaction.common import MARKER_PATTERN, MARKER_PREFIX
from rlkeep.redaction.joins import TriggerFinder, trigger_patterns
from rlkeep.redaction.rules import MAX_PREFIX_LENGTH
from rlkeep.redaction.spans import MARKER, Probe

try:  # optional: only speeds up the prefilter, never decides a finding
    import re2 as _re2
except ImportError:  # pragma: no cover - depends on the environment
    _re2 = None
try:  # optional as well: the fastest prefilter where its wheel installs (x86-64 and arm64 Linux, macOS)
    import hyperscan as _hyperscan
except ImportError:  # pragma: no cover - depends on the environment
    _hyperscan = None



@dataclass
class Candidates:
    """What to try: each probe with the positions where its prefix starts (None: scan everything),
    and the literal values that occur."""

    probes: dict[Probe, list[int] | None] = field(default_factory=dict)
    literals: list[bytes] = field(default_factory=list)
    marker: bool = False  # a `<redacted:KIND>` marker occurs: the caller masks markers and asks again
    joins: list[int] = field(default_factory=list)  # ends of join triggers: a broken secret may be near


def _join_needles(probes: Sequence[Probe]) -> list[bytes]:
    return [probe.needle for probe in probes if probe.rule.joinable]


def has_marker(hay: bytes | bytearray) -> bool:
    return MARKER_PREFIX in hay and MARKER.search(hay) is not None


class Prefilter(Protocol):
    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> Candidates:
        """A superset of the places where a probe or literal can match in `hay`."""


class _NeedleIndex:
    """Which probes' prefixes (and which literals) start inside a stretch of text."""

    BYTEWISE = 512  # stretches up to this long are checked byte by byte, longer ones per prefix

    def __init__(self, probes: Sequence[Probe], literals: Sequence[bytes]) -> None:
        by_needle: dict[tuple[bytes, bool], list[Probe]] = {}
        for probe in probes:
            by_needle.setdefault((probe.needle, probe.rule.lowercase), []).append(probe)
        self._by_needle = tuple(by_needle.items())
        self._by_first_byte: dict[int, list[tuple[bytes, bool, list[Probe]]]] = {}
        for (needle, lowercase), group in self._by_needle:
            self._by_first_byte.setdefault(needle[:1].lower()[0], []).append((needle, lowercase, group))
        self._literals = tuple(literals)

    def _located(self, hay: bytes, spans: Iterable[tuple[int, int]]) -> Candidates:
        """The prefixes and literals starting inside the stretches where a prefilter pattern matched.

        Every stdlib match starts at an occurrence of its prefix where the prefilter pattern
        matches too, and a leftmost-first scan that resumes after each match reports a match
        starting at or spanning every such occurrence: so these stretches miss nothing."""
        found = Candidates()
        literals: set[bytes] = set()
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            literals.update(literal for literal in self._literals
                            if hay.find(literal, start, end + len(literal) - 1) >= 0)
            raw = hay[start:end + MAX_PREFIX_LENGTH]
            lowered = raw.lower()
            if end - start <= self.BYTEWISE:
                for index in range(end - start):
                    for needle, lowercase, group in self._by_first_byte.get(lowered[index], ()):
                        if (lowered if lowercase else raw).startswith(needle, index):
                            for probe in group:
                                found.probes.setdefault(probe, []).append(start + index)  # type: ignore[union-attr]
                continue
            for (needle, lowercase), group in self._by_needle:  # a long stretch: search per prefix
                view = lowered if lowercase else raw
                index = view.find(needle, 0, end - start + len(needle) - 1)
                while index >= 0:
                    for probe in group:
                        found.probes.setdefault(probe, []).append(start + index)  # type: ignore[union-attr]
                    index = view.find(needle, index + 1, end - start + len(needle) - 1)
        for positions in found.probes.values():
            positions.sort()  # type: ignore[union-attr]
        found.literals = sorted(literals, key=len, reverse=True)
        return found


def _trie_pattern(words: Iterable[bytes]) -> bytes:
    """An alternation of literals as a trie (`a(?:pi_key|ws)`), which `re` can try quickly at
    each position (a flat alternation of 70 words tries every branch)."""
    trie: dict = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[None] = {}

    def emit(node: dict) -> bytes:
        branches = [re.escape(bytes([byte])) + emit(child)
                    for byte, child in sorted((k, v) for k, v in node.items() if k is not None)]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        if None in node:  # a word ends here and a longer one continues: prefer the longer
            return (b"(?:" + body + b")?") if len(branches) == 1 else body + b"?"
        return body

    return emit(trie) or b"(?!)"


class StdlibPrefilter(_NeedleIndex):
    """Stdlib only. A window: one substring test per distinct prefix, then the triggered probes
    scan all of it. A short text (one field of a trace row): one trie of all prefixes instead."""

    SHORT = 16 << 10
    FEW = 16  # more prefix hits than this in a short text: scanning it per probe is cheaper

    def __init__(self, probes: Sequence[Probe], literals: Sequence[bytes]) -> None:
        super().__init__(probes, literals)
        self._raw = re.compile(_trie_pattern([needle for (needle, lowercase), _ in self._by_needle if not lowercase]
                                             + list(self._literals)))
        self._lower = re.compile(_trie_pattern(needle for (needle, lowercase), _ in self._by_needle if lowercase))
        self._joins = TriggerFinder(_join_needles(probes), re.compile)

    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> Candidates:
        if has_marker(hay):
            return Candidates(marker=True)
        joins = self._joins.ends(hay)
        if len(hay) <= self.SHORT:
            spans = [m.span() for m in self._raw.finditer(hay)] + [m.span() for m in self._lower.finditer(lowered())]
            if len(spans) <= self.FEW:
                found = self._located(hay, spans)
                found.joins = joins
                return found
        probes: dict[Probe, list[int] | None] = {
            probe: None for (needle, lowercase), group in self._by_needle
            if needle in (lowered() if lowercase else hay) for probe in group}
        return Candidates(probes, [literal for literal in self._literals if literal in hay], joins=joins)


def _re2_bytes_literal(text: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in text)


class Re2Prefilter(_NeedleIndex):
    """google-re2: one DFA pass of the alternation of every prefix (plus its rule's hint, which
    keeps frequent words like `token` from triggering without a value) and every literal gives
    the few stretches worth a look; there, only the probes whose prefix occurs run. Latin-1 mode
    makes each byte one character, as for `re` on bytes: invalid UTF-8 cannot hide a match."""

    def __init__(self, probes: Sequence[Probe], literals: Sequence[bytes]) -> None:
        super().__init__(probes, literals)
        assert _re2 is not None
        options = _re2.Options()
        options.encoding = _re2.Options.Encoding.LATIN1
        options.max_mem = 64 << 20
        alternatives = [(b"(?i:" if probe.rule.lowercase else b"(?:") + _re2_bytes_literal(probe.needle)
                        + probe.rule.hint.encode() + b")" for probe in probes]
        alternatives += [_re2_bytes_literal(literal) for literal in literals]
        self._regex = _re2.compile(b"|".join(alternatives), options)
        # the same patterns as Hyperscan's, one alternation: RE2's DFA runs it as one pass
        self._joins = _re2.compile(b"|".join(trigger_patterns(_join_needles(probes))), options)

    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> Candidates:
        if has_marker(hay):
            return Candidates(marker=True)
        found = self._located(hay, (match.span() for match in self._regex.finditer(hay)))
        found.joins = [match.end() for match in self._joins.finditer(hay)]
        return found


class HyperscanPrefilter(_NeedleIndex):
    """Hyperscan: the same alternation as the RE2 prefilter (each prefix plus its rule's hint, and
    every literal), compiled as one multi-pattern database and scanned with SIMD at several times
    RE2's speed. Each pattern reports the leftmost start of every match end, so the reported
    stretches cover every place a prefix and its hint match, as RE2's leftmost-first scan does.
    Without the UTF-8 flag Hyperscan reads bytes, so invalid UTF-8 cannot hide a match."""

    def __init__(self, probes: Sequence[Probe], literals: Sequence[bytes]) -> None:
        super().__init__(probes, literals)
        assert _hyperscan is not None
        expressions = [(b"(?i)" if probe.rule.lowercase else b"") + _re2_bytes_literal(probe.needle)
                       + probe.rule.hint.encode() for probe in probes]
        expressions += [_re2_bytes_literal(literal) for literal in literals]
        self._probe_list, self._literal_list = tuple(probes), tuple(literals)  # by pattern id
        self._marker_id = len(expressions)  # the same pass tells whether markers need masking
        expressions.append(MARKER_PATTERN)
        flags = [_hyperscan.HS_FLAG_SOM_LEFTMOST | _hyperscan.HS_FLAG_DOTALL] * len(expressions)
        # join triggers (ids after the marker's), in the same pass: without start of match (the
        # end is enough), each with a fixed stretch of bytes, they cost a fifth of the scan
        triggers = trigger_patterns(_join_needles(probes))
        expressions += triggers
        flags += [_hyperscan.HS_FLAG_DOTALL] * len(triggers)
        self._database = _hyperscan.Database()
        self._database.compile(expressions=expressions, ids=list(range(len(expressions))),
                               elements=len(expressions), flags=flags)

    def candidates(self, hay: bytes, lowered: Callable[[], bytes]) -> Candidates:
        """Each match names its pattern, so only that probe's prefix is looked for in it: at the
        match start (the prefix starts every pattern) and wherever else it recurs in the match
        (a later occurrence may share the match's end, and one end is reported once). Another
        probe's prefix inside the stretch needs no look: where that probe matches, its own
        prefix + hint pattern matches too and is reported."""
        hits: list[tuple[int, int, int]] = []
        marker_id = self._marker_id

        def on_match(pattern: int, start: int, end: int, _flags: int, _context: object) -> bool:
            if pattern == marker_id:
                return True  # stop: the caller masks the markers and scans again
            hits.append((pattern, start, end))
            return False

        joins: list[int] = []
        if hay:
            try:
                self._database.scan(hay, match_event_handler=on_match)
            except _hyperscan.ScanTerminated:
                return Candidates(marker=True)
        positions: dict[Probe, set[int]] = {}
        literals: set[bytes] = set()
        probe_count = len(self._probe_list)
        for pattern, start, end in hits:
            if pattern > marker_id:  # a self-naming prefix running into a line break, or cut by one
                joins.append(end)
                continue
            if pattern >= probe_count:
                literals.add(self._literal_list[pattern - probe_count])
                continue
            probe = self._probe_list[pattern]
            found = positions.setdefault(probe, set())
            found.add(start)
            stretch = hay[start:end]
            if probe.rule.lowercase:
                stretch = stretch.lower()
            index = stretch.find(probe.needle, 1)
            while index >= 0:
                found.add(start + index)
                index = stretch.find(probe.needle, index + 1)
        return Candidates({probe: sorted(found) for probe, found in positions.items()},
                          sorted(literals, key=len, reverse=True), joins=joins)


def available_engines() -> tuple[str, ...]:
    """"re" always; "re2" when google-re2 (module `re2`, with Latin-1 mode) is importable;
    "hyperscan" when the hyperscan bindings are. The last one is the fastest."""
    has_re2 = _re2 is not None and hasattr(getattr(_re2, "Options", None), "Encoding")
    return ("re",) + (("re2",) if has_re2 else ()) + (("hyperscan",) if _hyperscan is not None else ())
