"""One log: the scanner that finds metric blocks of every serialization in bounded memory."""
from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from rlkeep.metrics.common import CHUNK_BYTES, MAX_BLOCK_CHARS, MAX_BLOCK_LINES, MetricsError, NoMetricsError, ROW_META, SERIALIZATIONS, STEP_KEYS, SkippedLine
from rlkeep.metrics.lines import ANSI, LINE_PREFIX, NOT_CONTINUATION, NUMERIC_STRING, RAY_REPEATED, STEP_HEADER, STEP_INLINE, WANDB, clean_line, parse_python_dict


# --------------------------------------------------------------------------- one log

@dataclass
class ParsedLog:
    """What one trainer log holds. rows/eval_rows: {"global_step", "line", **metrics}."""

    source: str
    serialization: str
    rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]] = field(default_factory=list)
    ignored_blocks: dict[str, int] = field(default_factory=dict)
    other_kinds: dict[str, int] = field(default_factory=dict)
    skipped: list[SkippedLine] = field(default_factory=list)  # unparsable lines of the chosen serialization

    @property
    def steps(self) -> list[int]:
        return sorted({row["global_step"] for row in self.rows})


_INCOMPLETE = object()  # a block runs past the end of the buffer: read more, then retry


class _Scanner:
    """Finds metric blocks in a log fed as bytes, in chunks of any size.

    Every serialization puts a ``{`` on the line where its metrics start (``metrics={``, the
    first line of a printed dict, a JSON line), and ``{`` is rare in trainer noise, so the
    scan is one ``bytes.find(b"{")`` (memchr speed) per candidate line; only those lines are
    decoded, cleaned and classified (noise is never decoded). A console dict's ``Step N:`` header is found by looking back
    at the previous line of the same process. Rows of every serialization are kept until the
    end, where the file's serialization is chosen (see the module docstring).
    """

    LOOKBACK_LINES = 8
    CONTEXT_CHARS = 64 << 10

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SERIALIZATIONS}
        self.eval_rows: list[dict[str, Any]] = []
        self.present: set[str] = set()
        self.problems: dict[str, list[tuple[int, str]]] = {name: [] for name in SERIALIZATIONS}
        self.other_kinds: Counter[str] = Counter()
        self.first_line = 1   # line number of the first unscanned byte
        self.context = b""    # a few already-scanned lines before it, for header look-back
        self.carry = b""      # unscanned bytes held back (a partial line, or a block still open)
        self.limit = 0        # end of the scannable part of the current buffer (after a newline)
        self.saw_text = False

    # -- feeding
    def feed(self, data: bytes, final: bool = False) -> None:
        if not self.saw_text and data.strip():
            self.saw_text = True
        start = len(self.context)
        buffer = self.context + self.carry + data
        self.limit = len(buffer) if final else buffer.rfind(b"\n", start) + 1
        if self.limit <= start:  # not one complete line yet
            self.carry = buffer[start:]
            return
        consumed, self.first_line = self._scan(buffer, start, final)
        self.carry = buffer[consumed:]
        self.context = _tail_lines(buffer, consumed, self.LOOKBACK_LINES, self.CONTEXT_CHARS)

    def finish(self) -> ParsedLog:
        if self.carry:
            self.feed(b"", final=True)
        if not self.saw_text:
            raise NoMetricsError(f"{self.source}: trainer log is empty", "empty")
        # The first serialization with a row; a stray cut line of an earlier one (a mirror line in a
        # console log) must not hide the rows of the one the file really uses.
        chosen = next((name for name in SERIALIZATIONS if self.rows[name]), None) or next(
            (name for name in SERIALIZATIONS if name in self.present), None)
        if chosen is None:
            raise NoMetricsError(
                f"{self.source}: no metric blocks found (looked for WANDB_MIRROR lines, "
                "'Step N:' console dicts, {'async/...} dicts and JSON lines with a step key)", "no_metric_blocks")
        # A line that cannot be parsed (cut by a kill, garbled) is skipped and counted, never
        # guessed: any prefix of a log is a log.
        skipped = sorted((SkippedLine(line, name, message) for name in SERIALIZATIONS
                          if name == chosen or not self.rows[name] for line, message in self.problems[name]),
                         key=lambda entry: entry.line)
        rows = self.rows[chosen]
        if not rows and skipped and not self.eval_rows and not self.other_kinds:
            raise NoMetricsError(
                f"{self.source}: no parsable metric line ({len(skipped)} skipped, the first at line "
                f"{skipped[0].line}: {skipped[0].reason})", "no_parsable_metric_line", tuple(skipped))
        if not rows:
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.other_kinds.items())) or "none"
            raise MetricsError(
                f"{self.source}: {chosen} metric lines found but none is a training row "
                f"(eval rows: {len(self.eval_rows)}, other kinds: {kinds}, skipped lines: {len(skipped)})")
        ignored = {name: len(self.rows[name]) for name in SERIALIZATIONS
                   if name != chosen and self.rows[name]}
        return ParsedLog(
            source=self.source,
            serialization=chosen,
            rows=rows,
            eval_rows=self.eval_rows if chosen == "wandb-json" else [],
            ignored_blocks=ignored,
            other_kinds=dict(sorted(self.other_kinds.items())),
            skipped=skipped,
        )

    # -- scanning
    def _scan(self, buf: str, start: int, final: bool) -> tuple[int, int]:
        """Process every block that starts in buf[start:]; return where the unprocessed tail
        starts (a block still open at the end of a non-final buffer) and its line number."""
        size = self.limit
        position = start
        counted_pos, counted_line = start, self.first_line
        while True:
            brace = buf.find(b"{", position, size)
            if brace < 0:
                return size, counted_line + buf.count(b"\n", counted_pos, size)
            line_start = buf.rfind(b"\n", 0, brace) + 1
            line_end = buf.find(b"\n", brace, size)
            if line_end < 0:
                line_end = size
            counted_line += buf.count(b"\n", counted_pos, line_start)
            counted_pos = line_start
            outcome = self._classify(buf, line_start, brace, line_end, counted_line, final)
            if outcome is _INCOMPLETE:
                return line_start, counted_line
            position = max(line_end, outcome or 0) + 1

    def _classify(self, buf: str, start: int, brace: int, end: int, line: int, final: bool) -> Any:
        """Hand the line holding a '{' to the parser of its serialization; returns the end
        offset of what was consumed, None when the line holds no metrics, or _INCOMPLETE."""
        raw = buf[start:end].decode("utf-8", "replace")
        if buf.find(b"WANDB_MIRROR", start, brace) >= 0:
            return self._wandb_line(end, line, raw)
        origin, text = clean_line(raw)
        if text.startswith("{"):
            header = self._header_before(buf, start, origin)
            if header is not None:
                step, lines_back = header
                return self._console_block(buf, text, start, end, origin, step, line - lines_back, final)
            if text.startswith("{'async/"):
                return self._python_dict_block(buf, text, start, end, origin, line, final)
            if text.startswith('{"'):
                return self._json_line(text, end, line)
            return None
        inline = STEP_INLINE.search(text)
        if inline:
            return self._console_block(buf, text[inline.end() - 1:], start, end, origin, int(inline.group(1)), line, final)
        opening = text.find("{'async/")
        if opening >= 0:
            return self._python_dict_block(buf, text[opening:], start, end, origin, line, final)
        return None

    def _header_before(self, buf: str, line_start: int, origin: str) -> tuple[int, int] | None:
        """(step, lines back) when the previous line printed by origin is a bare 'Step N:'."""
        end = line_start - 1
        for lines_back in range(1, self.LOOKBACK_LINES + 1):
            if end < 0:
                return None
            start = buf.rfind(b"\n", 0, end) + 1
            line_origin, text = clean_line(buf[start:end].decode("utf-8", "replace"))
            if line_origin == origin:
                header = STEP_HEADER.search(text)
                return (int(header.group(1)), lines_back) if header else None
            end = start - 1
        return None

    def _problem(self, serialization: str, line: int, message: str) -> None:
        self.present.add(serialization)
        self.problems[serialization].append((line, message))

    def _make_row(self, serialization: str, metrics: dict[str, Any], default_step: int | None,
                  line: int) -> dict[str, Any] | None:
        values = metrics  # freshly parsed for this row: coerced in place
        numeric = NUMERIC_STRING.fullmatch
        for key, value in metrics.items():
            if value.__class__ is str:
                try:
                    number = float(value)
                except ValueError:
                    continue
                if numeric(value):  # float() also takes '1_000' and padded text
                    values[key] = number
        step: Any = default_step
        for key in STEP_KEYS:
            if key in values:
                step = values[key]
                break
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            self._problem(serialization, line, f"step {step!r} is not a non-negative integer")
            return None
        if values.get("global_step", step) != step:
            self._problem(serialization, line, f"global_step {values['global_step']!r} disagrees with step {step}")
            return None
        values.pop("global_step", None)
        clashes = [key for key in ROW_META if key in values]
        if clashes:
            self._problem(serialization, line, f"metric name {clashes[0]!r} is reserved by rlkeep")
            return None
        return {"global_step": step, "line": line, **values}

    def _wandb_line(self, end: int, line: int, raw: str) -> int | None:
        # Only the part from WANDB_MIRROR on matters; ANSI codes can only trail the JSON
        # (json.dumps escapes ESC), so cut after the last '}' instead of cleaning the line.
        tail = raw[raw.find("WANDB_MIRROR"):]
        closing = tail.rfind("}")
        match = WANDB.match(tail[:closing + 1] if closing >= 0 else ANSI.sub("", tail))
        if not match:
            return None
        self.present.add("wandb-json")
        try:
            step = int(match.group("step"))
            metrics = json.loads(match.group("json"))
        except (ValueError, RecursionError) as error:
            self._problem("wandb-json", line, f"WANDB_MIRROR metrics are not valid JSON ({error})")
            return end
        if not isinstance(metrics, dict):
            self._problem("wandb-json", line, "WANDB_MIRROR metrics are not a JSON object")
            return end
        row = self._make_row("wandb-json", metrics, step, line)
        if row is not None:
            kind = match.group("kind")
            if kind == "train":
                self.rows["wandb-json"].append(row)
            elif kind == "eval":
                self.eval_rows.append(row)
            else:
                self.other_kinds[kind] += 1
        return end

    def _json_line(self, text: str, end: int, line: int) -> int | None:
        if "across cluster]" in text:
            text = RAY_REPEATED.sub("", text)
        text = text.strip()
        if not text.endswith("}"):
            return None
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as error:
            if any(f'"{key}"' in text for key in STEP_KEYS):
                self._problem("json-lines", line, f"JSON metric line is not valid JSON ({error})")
                return end
            return None
        if not isinstance(value, dict) or not any(key in value for key in STEP_KEYS):
            return None
        self.present.add("json-lines")
        row = self._make_row("json-lines", value, None, line)
        if row is not None:
            self.rows["json-lines"].append(row)
        return end

    def _console_block(self, buf: str, first_text: str, start: int, end: int, origin: str, step: int,
                       header_line: int, final: bool) -> Any:
        self.present.add("skyrl-console")
        block = self._collect_dict(buf, first_text, end, origin, start, final)
        if block is _INCOMPLETE:
            return _INCOMPLETE
        if isinstance(block, str):
            self._problem("skyrl-console", header_line, f"metric dict of 'Step {step}:' {block}")
            return end
        metrics, block_end = block
        row = self._make_row("skyrl-console", metrics, step, header_line)
        if row is not None:
            self.rows["skyrl-console"].append(row)
        return block_end

    def _python_dict_block(self, buf: str, first_text: str, start: int, end: int, origin: str, line: int,
                           final: bool) -> Any:
        block = self._collect_dict(buf, first_text, end, origin, start, final)
        if block is _INCOMPLETE:
            return _INCOMPLETE
        if isinstance(block, str):
            self._problem("python-dict", line, f"{{'async/...}} dict {block}")
            return end
        metrics, block_end = block
        if "trainer/global_step" not in metrics:
            return block_end  # some other dict that happens to start with async/
        self.present.add("python-dict")
        row = self._make_row("python-dict", metrics, None, line)
        if row is not None:
            self.rows["python-dict"].append(row)
        return block_end

    def _collect_dict(self, buf: str, first_text: str, first_end: int, origin: str,
                      block_start: int, final: bool) -> Any:
        """Join the lines of one printed dict. Returns (dict, end offset), _INCOMPLETE, or a
        string saying why the dict is malformed.

        Lines are taken in runs up to the next line holding a '}' (normally the last line of
        the dict), cleaned in bulk; lines of other processes are skipped. A line of the same
        process that is not an indented continuation means the dict was cut off.
        """
        parts = [first_text]
        position = first_end + 1
        size = self.limit
        while True:
            if parts[-1].rstrip().endswith("}"):
                try:
                    return parse_python_dict("\n".join(parts)), position - 1
                except (ValueError, SyntaxError, RecursionError, TypeError, MemoryError):
                    pass  # a nested dict closed on this line; the outer one continues
            if position >= size:
                if final or size - block_start > MAX_BLOCK_CHARS:
                    return "is truncated: the log ends before its closing brace"
                return _INCOMPLETE
            close = buf.find(b"}", position, size)
            run_end = size if close < 0 else buf.find(b"\n", close, size)
            if run_end < 0:
                run_end = size
            run = buf[position:run_end].decode("utf-8", "replace")
            if "\x1b" in run:
                run = ANSI.sub("", run)
            texts = _bulk_continuations(run, origin)
            if texts is None:  # another process's lines interleaved, or a cut-off dict: line by line
                texts = []
                for index, raw in enumerate(run.split("\n")):
                    match = LINE_PREFIX.match(raw)
                    if (match.group(1) or "") + (match.group(2) or "") != origin:
                        continue
                    text = raw[match.end():].rstrip("\r")
                    if not text[:1].isspace():
                        line_hint = buf.count(b"\n", block_start, position) + index + 1
                        return (f"is truncated or not a Python literal: line {line_hint} of the block "
                                f"starts a new message ({text[:60]!r})")
                    texts.append(text)
            parts.extend(texts)
            if len(parts) > MAX_BLOCK_LINES:
                return f"is not closed within {MAX_BLOCK_LINES} lines"
            position = run_end + 1
            if close < 0 and not final and size - block_start <= MAX_BLOCK_CHARS:
                return _INCOMPLETE
            if not parts[-1].rstrip().endswith("}") and position >= size:
                if final or size - block_start > MAX_BLOCK_CHARS:
                    return "is truncated: the log ends before its closing brace"
                return _INCOMPLETE


@functools.lru_cache(maxsize=64)
def _origin_prefix(origin: str) -> tuple[str, re.Pattern[str]]:
    """For an origin: a literal every line of it holds, and a regex removing its prefixes."""
    iris, _, ray = origin.partition("(")
    ray = "(" + ray if ray else ""
    literal = (f"{iris} | " if iris else "") + ray
    pattern = (r"\[\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\]" if iris else "") + re.escape(literal)
    return literal, re.compile("^" + pattern, re.M)


def _bulk_continuations(run: str, origin: str) -> list[str] | None:
    """The messages of a run of dict lines when every line is an indented continuation
    printed by origin (the common case, handled without a per-line loop); else None."""
    lines = run.count("\n") + 1
    if origin:
        literal, prefix = _origin_prefix(origin)
        if run.count(literal) != lines:
            return None
        stripped = prefix.sub("", run)
        if stripped.count("\n") + 1 != lines:
            return None
    else:
        if "pid=" in run or "] task=" in run or "(raylet)" in run:
            return None
        stripped = run
    if NOT_CONTINUATION.search(stripped):
        return None
    return stripped.replace("\r\n", "\n").split("\n")


def _tail_lines(buf: bytes, end: int, lines: int, max_chars: int) -> bytes:
    """The last `lines` complete lines of buf[:end] (end is just after a newline or 0)."""
    start = end
    floor = max(0, end - max_chars)
    for _ in range(lines):
        if start <= floor:
            break
        previous = buf.rfind(b"\n", floor, start - 1)
        start = previous + 1 if previous >= 0 else floor
    if start == floor and floor > 0:
        # cut inside a line: drop the partial line so look-back never sees half of one
        first_newline = buf.find(b"\n", floor, end)
        start = first_newline + 1 if first_newline >= 0 else end
    return buf[start:end]


def parse_log(text: str, source: str) -> ParsedLog:
    """Parse one trainer log held in memory. Raises MetricsError naming source and line."""
    scanner = _Scanner(source)
    scanner.feed(text.encode("utf-8", "surrogatepass"), final=True)
    return scanner.finish()


def parse_log_stream(chunks: Iterable[bytes], source: str) -> ParsedLog:
    """Parse a trainer log arriving as byte chunks split anywhere (e.g. an object-store
    stream). Memory is bounded by the chunk size and the longest metric block."""
    scanner = _Scanner(source)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner.finish()


def _file_chunks(handle: Any, chunk_bytes: int) -> Iterator[bytes]:
    while chunk := handle.read(chunk_bytes):
        yield chunk
        if not chunk.endswith(b"\n"):
            yield handle.readline()  # finish the line here: the scanner then has no partial line to join


def parse_log_file(path: str | os.PathLike[str], source: str | None = None,
                   chunk_bytes: int = CHUNK_BYTES) -> ParsedLog:
    """Parse a trainer log from disk in chunks (memory bounded by the chunk size, not the file)."""
    name = source or str(path)
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise MetricsError(f"{name}: cannot read trainer log ({error.strerror})") from error
    with handle:
        return parse_log_stream(_file_chunks(handle, chunk_bytes), name)


def detect_serialization(text: str, source: str = "<text>") -> str:
    """Which metric serialization a log uses: one of SERIALIZATIONS (raises when it has none)."""
    return parse_log(text, source).serialization
