"""The Redactor: finds and redacts every rule and known literal in text, a region of a window,
or a byte stream read window by window in bounded memory."""
from __future__ import annotations


import json
import os
import re
from typing import Callable, Iterable, Mapping
from urllib.parse import quote, quote_plus


from rlkeep.errors import RlkeepError
from rlkeep.redaction.common import (CHUNK_SIZE, CONTEXT, ENVIRONMENT_KIND, MAX_MATCH_LENGTH,
                                     MIN_LITERAL_LENGTH, OVERLAP)
from rlkeep.redaction.forms import TRIGGERS, encoded_spans
from rlkeep.redaction.joins import joined_match, joined_views, past_a_whole_token
from rlkeep.redaction.prefilter import (HyperscanPrefilter, Prefilter, Re2Prefilter, StdlibPrefilter,
                                        available_engines)
from rlkeep.redaction.rewrite import Sink
from rlkeep.redaction.rules import LITERAL_PRIORITY, RULES, Rule
from rlkeep.redaction.spans import (Probe, Span, count_newlines, left_boundary_ok, mask_markers, matches,
                                    merge_spans, neighbourhoods, replace_spans)


MAX_DECODE_DEPTH = 2  # e.g. a base64 blob holding a percent-encoded URL
ENCODED_PRIORITY = float(len(RULES))  # an encoded token's label yields to a plain finding's
_TOKEN = re.compile(rb"[^ \t\r\n\"'<>`,;()\[\]{}|\\]*")


def _probe(priority: float, rule: Rule, needle: bytes) -> Probe:
    pattern = re.escape(needle) + rule.body.encode()
    return Probe(priority, rule, needle, re.compile(pattern), re.compile(pattern, re.IGNORECASE) if rule.lowercase else None)


def _literal_forms(values: Iterable[str]) -> tuple[bytes, ...]:
    """Each value as it may appear: raw, percent-encoded (upper and lower hex) and JSON-escaped."""
    forms: set[bytes] = set()
    for value in values:
        for candidate in {value, value.strip()}:
            if len(candidate) < MIN_LITERAL_LENGTH:
                continue
            spellings = (candidate, quote(candidate, safe=""), quote(candidate, safe="/:"),
                         quote_plus(candidate), json.dumps(candidate)[1:-1],
                         json.dumps(candidate, ensure_ascii=False)[1:-1])
            for spelling in spellings:
                encoded = spelling.encode("utf-8", "surrogatepass")
                forms.add(encoded)
                forms.add(re.sub(rb"%[0-9A-F]{2}", lambda m: m.group().lower(), encoded))
    return tuple(sorted((form for form in forms if len(form) >= MIN_LITERAL_LENGTH), key=len, reverse=True))


class Redactor:
    """Finds and redacts every rule of RULES plus exact known values (`literals`, e.g. the
    pipeline's own credentials from the environment; values under 8 characters are ignored)."""

    def __init__(self, literals: Iterable[str] = (), *, engine: str = "auto") -> None:
        if engine == "auto":
            engine = available_engines()[-1]
        if engine not in available_engines():
            raise RlkeepError(f"redaction engine {engine!r} is not available (have {', '.join(available_engines())})")
        self.engine = engine
        self._probes = tuple(
            _probe(float(priority), rule, needle.encode())
            for priority, rule in enumerate(RULES) for needle in rule.prefixes
        )
        self._joinable = tuple(probe for probe in self._probes if probe.rule.joinable)
        self._joinable_prefixes = tuple(probe.needle for probe in self._joinable)
        self._literals = _literal_forms(literals)
        self._triggers = frozenset(TRIGGERS) - frozenset(self._literals)
        self._depth = 0  # decoding inside a decoded token goes MAX_DECODE_DEPTH levels deep
        prefilter_class = {"re": StdlibPrefilter, "re2": Re2Prefilter, "hyperscan": HyperscanPrefilter}[engine]
        self._prefilter: Prefilter = prefilter_class(self._probes, self._literals + tuple(sorted(self._triggers)))

    def __repr__(self) -> str:  # never the literal values
        return f"Redactor(engine={self.engine!r}, rules={len(RULES)}, literals={len(self._literals)})"

    # -- public, in-memory ------------------------------------------------------------------

    def redact_text(self, text: str) -> tuple[str, list[tuple[int, str]]]:
        """(text with every finding replaced by `<redacted:kind>`, [(line, kind)])."""
        data = text.encode("utf-8", "surrogatepass")
        redacted, findings = self.redact_bytes(data)
        return redacted.decode("utf-8", "surrogatepass"), findings

    def find_in_text(self, text: str) -> list[tuple[int, str]]:
        return self.redact_text(text)[1]

    def spans(self, data: bytes, end: int | None = None) -> list[tuple[int, int, str]]:
        """(start, end, kind) of what the first round would redact in `data`, for matches that
        start before `end` (not settled: a caller redacting parts of it scans each part again)."""
        return [(span.start, span.end, span.kind)
                for span in self._find_spans(data, 0, len(data) if end is None else end)]

    def redact_bytes(self, data: bytes) -> tuple[bytes, list[tuple[int, str]]]:
        out, _, findings, _ = self._redact_region(data, 0, len(data), 1)
        return (data if out is None else bytes(out)), findings

    # -- windows ---------------------------------------------------------------------------

    def _find_spans(self, text: bytes | bytearray, lo: int, hi: int, start: int = 0, stop: int | None = None,
                    *, marked: bool = False) -> list[Span]:
        """Merged spans to redact whose start lies in [lo, hi). Only text[start:stop] is looked
        at: matches may begin up to CONTEXT before lo and run up to OVERLAP past hi. `marked`:
        the caller knows markers are there, so they are masked before the first prefilter pass."""
        stop = len(text) if stop is None else stop
        hay = text if start == 0 and stop == len(text) else text[start:stop]
        lowered_cache: list[bytes] = []

        def lowered() -> bytes:
            if not lowered_cache:
                lowered_cache.append(hay.lower())
            return lowered_cache[0]

        spans: list[Span] = []
        first, last = lo - start, hi - start  # [lo, hi) in hay coordinates
        scan_from = max(0, first - CONTEXT)
        if marked:
            hay = mask_markers(hay)
        candidates = self._prefilter.candidates(hay, lowered)
        if candidates.marker:
            hay = mask_markers(hay)
            lowered_cache.clear()
            candidates = self._prefilter.candidates(hay, lowered)
        for probe, positions in candidates.probes.items():
            rule = probe.rule
            if probe.folded is not None and positions is not None:
                found = matches(probe.folded, hay, positions, scan_from, last, rule.group)
            else:
                found = matches(probe.regex, lowered() if rule.lowercase else hay, positions, scan_from, last,
                                rule.group)
            for match_start, begin, end in found:
                if begin < first or begin >= last or begin == end:
                    continue
                if rule.left and not left_boundary_ok(hay, match_start, rule.left):
                    continue
                if rule.accept is not None and not rule.accept(hay[begin:end]):
                    continue
                spans.append(Span(start + begin, start + end, probe.priority, rule.kind))
        if candidates.joins:
            joined = self._joined(hay, candidates.joins, first, last, start)
            # A plain match over JSON records (a PEM block, JSON and all) gives way to the pieces
            # in one field's values, so the JSON between them stays; a plain match that covers
            # a joined one in plain text stands (one marker, its line breaks kept).
            spans = [span for span in spans
                     if not any(records and low <= span.start and span.end <= high for low, high, records, _ in joined)]
            spans += [piece for low, high, records, pieces in joined
                      if records or not any(span.start <= low and high <= span.end for span in spans)
                      for piece in pieces]
        hits: list[tuple[int, bytes]] = []
        for literal in candidates.literals:
            trigger = literal in self._triggers
            # a trigger past the region may sit in a token that starts inside it: look to the end
            until = len(hay) if trigger else last + len(literal) - 1
            position = hay.find(literal, scan_from if trigger else first, until)
            while position >= 0:
                if trigger:
                    hits.append((position, literal))
                else:
                    spans.append(Span(start + position, start + position + len(literal), LITERAL_PRIORITY,
                                      ENVIRONMENT_KIND))
                position = hay.find(literal, position + 1, until)
        if hits and self._depth < MAX_DECODE_DEPTH:
            spans += [Span(start + begin, start + end, ENCODED_PRIORITY, kind)
                      for begin, end, kind in encoded_spans(hay, hits, first, last, self._redact_decoded,
                                                                    self._redact_plain)]
        return merge_spans(spans)

    def _redact_plain(self, token: bytes) -> bytes:
        depth, self._depth = self._depth, MAX_DECODE_DEPTH
        try:
            return self.redact_bytes(token)[0]
        finally:
            self._depth = depth

    def _redact_decoded(self, decoded: bytes) -> tuple[bytes, list[tuple[int, str]]]:
        self._depth += 1
        try:
            return self.redact_bytes(decoded)
        finally:
            self._depth -= 1

    def _joined(self, hay: bytes | bytearray, ends: list[int], first: int, last: int, start: int
                ) -> list[tuple[int, int, bool, list[Span]]]:
        """A self-naming credential a writer broke (joins.py): (where the match starts and ends,
        whether it joined JSON records, one span per piece), for matches whose first piece
        starts in [first, last). Where two
        views match at one place (the text, and a JSON field across records), the one that
        takes less wins: the JSON between records is no part of the secret."""
        best: dict[tuple[int, str], tuple[int, list[tuple[int, int]], Probe, bool]] = {}
        heads = [(probe.regex, probe.rule.group, probe.rule.accept) for probe in self._joinable if not probe.rule.closed]
        for view in joined_views(hay, ends, self._joinable_prefixes):
            joins = set(view.joins)
            for probe in self._joinable:
                position = view.text.find(probe.needle)
                while position >= 0:
                    rule = probe.rule
                    if position in joins or left_boundary_ok(view.text, position, rule.left):
                        found = joined_match(probe.regex, view, position, rule.group, rule.accept, self._joinable_prefixes,
                                                   rule.closed)
                        if found is not None and not rule.closed and past_a_whole_token(view, found, heads):
                            found = None
                        if found is not None:
                            pieces = list(view.pieces(*found))
                            taken = sum(high - low for low, high in pieces)
                            key = (pieces[0][0], rule.kind)
                            if first <= pieces[0][0] < last and (key not in best or taken < best[key][0]):
                                best[key] = (taken, pieces, probe, view.records)
                    position = view.text.find(probe.needle, position + 1)
        return [(start + pieces[0][0], start + pieces[-1][1], records,
                 [Span(start + low, start + high, probe.priority, probe.rule.kind) for low, high in pieces])
                for _, pieces, probe, records in best.values()]

    def _redact_region(self, window: bytes | bytearray, lo: int, cut: int, first_line: int
                       ) -> tuple[memoryview | None, int, list[tuple[int, str]], tuple[int, int]]:
        """Redact spans starting in window[lo:cut]; a span crossing `cut` extends the region.

        Returns (redacted region, a view, or None if unchanged; end of the region in `window`; findings;
        (a position in `window` up to which lines are counted, the line there)), so a stream
        counts only the rest. Around each new marker the text is scanned again until clean:
        removing one secret can bring another within reach of a context rule (e.g. a second
        40-hex key near `wandb`)."""
        spans = self._find_spans(window, lo, cut)
        if not spans:
            return None, cut, [], (lo, first_line)
        text: bytes | bytearray = window
        region_end = cut  # end of the region in `text`
        original_end = cut  # the same point in `window`: text[region_end:] == window[original_end:]
        findings: list[tuple[int, str]] = []
        counted = (lo, first_line)
        for _ in range(32):
            line, counted_to = first_line, lo
            for span in spans:
                line += count_newlines(text, counted_to, span.start)
                counted_to = span.start
                findings.append((line, span.kind))
            if text is window:  # round one: positions are the window's
                counted = (counted_to, line)
            reach = max(region_end, spans[-1].end)
            original_end += reach - region_end
            text, markers = replace_spans(text, spans)
            region_end = len(text) - (len(window) - original_end)
            spans = merge_spans([span for low, high in neighbourhoods(markers, lo, region_end)
                                 for span in self._find_spans(text, low, high, max(0, low - CONTEXT),
                                                              min(len(text), high + MAX_MATCH_LENGTH),
                                                              marked=True)])
            if not spans:
                return memoryview(text)[lo:region_end], original_end, findings, counted
        raise RuntimeError("redaction did not settle after 32 rounds")  # pragma: no cover

    def redact_stream(self, read: Callable[[int], bytes], sink: Sink | None,
                      chunk_size: int = CHUNK_SIZE, overlap: int = OVERLAP) -> list[tuple[int, str]]:
        """Scan (and, with a sink, rewrite) a byte stream window by window in bounded memory."""
        findings: list[tuple[int, str]] = []
        context = b""  # final text just before the window: matches may start in it
        carry = b""  # read but not yet committed
        window = bytearray()  # context + carry + new data, refilled in place (see _refill)
        line = 1
        while True:
            data = read(chunk_size)
            at_end = not data
            _refill(window, context + carry, data)
            lo = len(context)
            if at_end:
                cut = len(window)
            else:
                limit = len(window) - overlap
                if limit <= lo:
                    carry = bytes(window[lo:])
                    continue
                newline = window.rfind(b"\n", lo, limit)
                cut = newline + 1 if newline >= 0 else limit
            out, end, found, (counted_to, line) = self._redact_region(window, lo, cut, line)
            findings.extend(found)
            line += count_newlines(window, counted_to, end)
            if sink is not None:
                with memoryview(window) as view:  # released before the window is refilled
                    sink.emit(view[lo:end], out)
            if out is None:
                context = bytes(window[max(0, end - CONTEXT):end])
            elif len(out) >= CONTEXT:
                context = bytes(out[-CONTEXT:])
            else:
                context = (bytes(window[max(0, lo - CONTEXT):lo]) + out)[-CONTEXT:]
            carry = bytes(window[end:])
            if at_end:
                return findings


def _refill(window: bytearray, prefix: bytes, data: bytes) -> None:
    """Make `window` prefix + data in the memory it already has. A new window-sized bytes object
    per read lands on fresh pages (glibc returns freed megabytes to the kernel), and the page
    faults cost more CPU than the scan; a bytearray resized within its allocation does not."""
    if len(window) < len(prefix):
        window.extend(bytes(len(prefix) - len(window)))
    window[len(prefix):] = data
    window[:len(prefix)] = prefix


ENV_CREDENTIAL_NAMES = frozenset({
    "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN",
})
ENV_CREDENTIAL_SUFFIXES = ("_TOKEN", "_SECRET", "_PASSWORD", "_API_KEY", "_SECRET_KEY")


def credential_variable_names(environ: Mapping[str, str]) -> list[str]:
    """The variables whose values are the pipeline's own credentials."""
    return sorted(name for name in environ
                  if name in ENV_CREDENTIAL_NAMES or name.upper().endswith(ENV_CREDENTIAL_SUFFIXES))


def redactor_from_environment(environ: Mapping[str, str] | None = None) -> Redactor:
    """A Redactor that also redacts the exact values of the credentials in the environment."""
    env = os.environ if environ is None else environ
    return Redactor(env[name] for name in credential_variable_names(env) if len(env[name]) >= MIN_LITERAL_LENGTH)
