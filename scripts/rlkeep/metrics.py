"""The metric surface across a run's chain of attempts, the per-trial table, and their outputs.

Trainer stdout is the portable metric source (SkyRL writes no metrics file). Each log is
scanned once, in bounded memory, for every serialization rlkeep knows (formats.md §2):

- ``wandb-json``: ``WANDB_MIRROR kind=<k> step=<n> metrics={json}`` lines. Only ``kind=train``
  rows feed the surface; ``kind=eval`` rows are kept apart (``Surface.eval_rows``, ``eval.csv``)
  because eval runs at its own cadence and W&B shows it on its own panels.
- ``skyrl-console``: a ``Step N:`` header followed by a pprint-ed dict (floats as strings).
- ``python-dict``: legacy ``{'async/... 'trainer/global_step': N}`` blocks with no header.
  Unlike the regex in the reference parser, a dict is accepted whatever key sorts last, as
  long as it starts with ``async/`` and has ``trainer/global_step``.
- ``json-lines``: one JSON object per line with a step key.

The formats without a kind have no eval/train split: an eval block printed for a step merges
into that step's row as ``eval/...`` columns (same-step blocks merge as wandb.log does).

A file's serialization is the first present in that order; blocks of the others in the same
file are ignored (a run that mirrors W&B and also logs to the console would otherwise count
every step twice). ANSI colours, Ray actor prefixes and Iris ``job logs`` prefixes are
stripped per line; a multi-line dict only takes lines from the process that printed its
header, so another actor's lines interleaved by Ray do not corrupt it.

Chain order is the caller's order, never file-name order. When a later attempt logs step S,
every row of earlier attempts at steps >= S is superseded (that branch died; surviving
checkpoints descend from the later attempt) and kept in ``superseded.csv``.

In the pipeline (``metric_surface_step``) an attempt whose log is readable but holds no metric
block (0 bytes, or only a traceback: a bad node) is a dead attempt: it adds no rows, replaces
nothing, and is named in ``attempts.json`` and ``report.md``. A malformed or truncated block,
or a log missing from logs.tar, still stops the step. Per-trial rows come from the trace
tarball in their own step (``trial_table_step``), so selection never waits on the traces.
"""
from __future__ import annotations

import argparse
import ast
import csv
import functools
import io
import json
import math
import mmap
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import atomic_write_bytes
from rlkeep import run_report
from rlkeep.jsonskim import SkimError, pick_members

SERIALIZATIONS: tuple[str, ...] = ("wandb-json", "skyrl-console", "python-dict", "json-lines")
STEP_KEYS: tuple[str, ...] = ("trainer/global_step", "global_step", "step", "_step")
ROW_META: tuple[str, ...] = ("global_step", "attempt", "source", "line")
DEFAULT_REWARD_METRIC = "reward/avg_raw_reward"
DEFAULT_EMA_ALPHA = 1 / 3

CHUNK_BYTES = 4 << 20
# A metric dict longer than this (or one whose closing brace never comes) is a truncated block.
MAX_BLOCK_CHARS = 8 << 20
MAX_BLOCK_LINES = 50_000
MAX_PROBLEMS_SHOWN = 5


class MetricsError(RlkeepError):
    """A trainer log, a result.json or a metric cannot be read as the surface needs it."""


class NoMetricsError(MetricsError):
    """A readable log that holds no metric block at all (reason `empty` or `no_metric_blocks`).

    In a chain this is a dead attempt (a bad node: a traceback, or a pod that never wrote a
    line): data for the record, not an error. Alone (the CLI, one log) it is still an error.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------- line cleaning

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# `[17:05:45] task=/user/job/0 | ` and `[17:05:45] task=/user/job/0 attempt=3 | ` (Iris job logs)
_IRIS_PREFIX = re.compile(r"\[\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\]((?: [A-Za-z_]+=\S+)+) \| ")
# `(skyrl_entrypoint pid=2211) `, `(pid=7, ip=10.0.0.2) `, `(raylet) `
_RAY_PREFIX = re.compile(r"\((?:[^()\n]*\bpid=\d+[^()\n]*|raylet[^()\n]*)\) ")
# both, in one match: group 1 the Iris tokens, group 2 the Ray prefix
_LINE_PREFIX = re.compile(f"(?:{_IRIS_PREFIX.pattern})?({_RAY_PREFIX.pattern})?")
_NOT_CONTINUATION = re.compile(r"^(?!\s)", re.M)  # a line that is not an indented pprint continuation
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")

_WANDB = re.compile(r"WANDB_MIRROR\s+kind=(?P<kind>\S+)\s+step=(?P<step>\d+)\s+metrics=(?P<json>.*)$")
_STEP_HEADER = re.compile(r"(?:^|\s)Step (\d+):\s*$")
_STEP_INLINE = re.compile(r"(?:^|\s)Step (\d+):\s*\{")
_NUMERIC_STRING = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.I)


def clean_line(raw: str) -> tuple[str, str]:
    """Split a raw log line into (origin, message).

    origin identifies the printing process (Iris task/attempt tokens plus the Ray prefix) so a
    multi-line block can skip lines of other processes; message is the line without ANSI codes
    and without those prefixes. Exactly one separator space is removed after each prefix, so a
    pprint continuation line keeps its leading indent.
    """
    line = _ANSI.sub("", raw) if "\x1b" in raw else raw
    match = _LINE_PREFIX.match(line)
    origin = (match.group(1) or "") + (match.group(2) or "")
    return origin, line[match.end():].rstrip("\r")


# --------------------------------------------------------------------------- values

def _to_number(text: str) -> float | None:
    """float(text) for a numeric string ('0.3203', 'nan', '1e-06'), else None."""
    try:
        number = float(text)
    except ValueError:
        return None
    # float() also takes '1_000' and surrounding spaces; only plain numerals count here
    return number if _NUMERIC_STRING.fullmatch(text) else None


def coerce_value(value: Any) -> Any:
    """Numeric strings (the console logger's '0.3203') become floats; everything else stays."""
    if isinstance(value, str):
        number = _to_number(value.strip())
        return value if number is None else number
    return value


def _literal(node: ast.AST) -> Any:
    """ast.literal_eval plus the bare names pprint writes for non-finite floats (nan, inf) and
    numpy 2 scalar reprs (np.float64(0.5)) found in legacy dicts."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(element) for element in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id.lower() in {"nan", "inf", "infinity"}:
        return float(node.id)
    if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and isinstance(node.func, (ast.Name, ast.Attribute))):
        name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        if re.fullmatch(r"(?:float|int|u?int\d+|float\d+|bool_?)", name):
            return _literal(node.args[0])
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


def parse_python_dict(text: str) -> dict[str, Any]:
    """Parse a printed Python dict. Raises ValueError/SyntaxError when it is not one."""
    if '"' not in text:
        # Fast path: with no double quotes anywhere, swapping quotes gives JSON for the common
        # case of str keys and number/str values.
        try:
            value = json.loads(text.replace("'", '"'))
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    value = _literal(ast.parse(text.strip(), mode="eval").body)
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValueError("not a dict with str keys")
    return value


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
        chosen = next((name for name in SERIALIZATIONS if name in self.present), None)
        if chosen is None:
            raise NoMetricsError(
                f"{self.source}: no metric blocks found (looked for WANDB_MIRROR lines, "
                "'Step N:' console dicts, {'async/...} dicts and JSON lines with a step key)", "no_metric_blocks")
        problems = self.problems[chosen]
        if problems:
            shown = "; ".join(f"{self.source}:{line}: {message}" for line, message in problems[:MAX_PROBLEMS_SHOWN])
            more = f" (and {len(problems) - MAX_PROBLEMS_SHOWN} more)" if len(problems) > MAX_PROBLEMS_SHOWN else ""
            raise MetricsError(f"{self.source}: malformed {chosen} metric blocks: {shown}{more}")
        rows = self.rows[chosen]
        if not rows:
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.other_kinds.items())) or "none"
            raise MetricsError(
                f"{self.source}: {chosen} metric lines found but none is a training row "
                f"(eval rows: {len(self.eval_rows)}, other kinds: {kinds})")
        ignored = {name: len(self.rows[name]) for name in SERIALIZATIONS
                   if name != chosen and self.rows[name]}
        return ParsedLog(
            source=self.source,
            serialization=chosen,
            rows=rows,
            eval_rows=self.eval_rows if chosen == "wandb-json" else [],
            ignored_blocks=ignored,
            other_kinds=dict(sorted(self.other_kinds.items())),
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
        inline = _STEP_INLINE.search(text)
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
                header = _STEP_HEADER.search(text)
                return (int(header.group(1)), lines_back) if header else None
            end = start - 1
        return None

    def _problem(self, serialization: str, line: int, message: str) -> None:
        self.present.add(serialization)
        self.problems[serialization].append((line, message))

    def _make_row(self, serialization: str, metrics: dict[str, Any], default_step: int | None,
                  line: int) -> dict[str, Any] | None:
        values = metrics  # freshly parsed for this row: coerced in place
        numeric = _NUMERIC_STRING.fullmatch
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
        match = _WANDB.match(tail[:closing + 1] if closing >= 0 else _ANSI.sub("", tail))
        if not match:
            return None
        self.present.add("wandb-json")
        try:
            metrics = json.loads(match.group("json"))
        except ValueError as error:
            self._problem("wandb-json", line, f"WANDB_MIRROR metrics are not valid JSON ({error})")
            return end
        if not isinstance(metrics, dict):
            self._problem("wandb-json", line, "WANDB_MIRROR metrics are not a JSON object")
            return end
        row = self._make_row("wandb-json", metrics, int(match.group("step")), line)
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
        if text.endswith("cluster]"):
            text = _RAY_REPEATED.sub("", text)
        text = text.strip()
        if not text.endswith("}"):
            return None
        try:
            value = json.loads(text)
        except ValueError as error:
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
                except (ValueError, SyntaxError, RecursionError):
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
                run = _ANSI.sub("", run)
            texts = _bulk_continuations(run, origin)
            if texts is None:  # another process's lines interleaved, or a cut-off dict: line by line
                texts = []
                for index, raw in enumerate(run.split("\n")):
                    match = _LINE_PREFIX.match(raw)
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
    if _NOT_CONTINUATION.search(stripped):
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


# --------------------------------------------------------------------------- the surface

@dataclass(frozen=True)
class AttemptWithoutMetrics:
    """An attempt whose readable log holds no metric block: preserved, named, no rows."""

    attempt: str
    source: str
    reason: str  # empty | no_metric_blocks (NoMetricsError.reason)
    state: str | None = None  # the scheduler's state in chain.json, as the logs manifest recorded it
    bytes: int | None = None
    lines: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "reason": self.reason, "state": self.state, "bytes": self.bytes,
                "lines": self.lines, "source": self.source}


@dataclass
class Surface:
    """rows: one per global step (sorted), keys global_step, attempt, source, line + metrics.
    superseded: rows replaced by a later attempt or a later block, with superseded_by/reason.
    files: per log, in chain order: source, attempt, serialization, steps, ignored_blocks."""

    rows: list[dict[str, Any]]
    superseded: list[dict[str, Any]]
    files: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]] = field(default_factory=list)
    without_metrics: list[AttemptWithoutMetrics] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)  # every attempt, in chain order (with and without metrics)

    def metric_names(self) -> list[str]:
        return _metric_columns(self.rows)

    def steps(self) -> list[int]:
        return [row["global_step"] for row in self.rows]


def _metric_columns(rows: Iterable[Mapping[str, Any]], exclude: Sequence[str] = ROW_META) -> list[str]:
    names: set[str] = set()
    for row in rows:
        names.update(row)
    return sorted(names.difference(exclude))


def _merge_attempt_rows(attempt: str, source: str, rows: Sequence[dict[str, Any]],
                        kind: str) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """One attempt's rows by step. Blocks logged twice for a step merge like wandb.log(step=N)
    does; a block whose values a later block overwrote is kept as superseded."""
    merged: dict[int, dict[str, Any]] = {}
    superseded: list[dict[str, Any]] = []
    for row in rows:
        step = row["global_step"]
        full = {**row, "attempt": attempt, "source": source}
        earlier = merged.get(step)
        if earlier is None:
            merged[step] = full
            continue
        conflicts = [key for key, value in row.items() if key not in ("line", "global_step")
                     and key in earlier and not _same_value(earlier[key], value)]
        if conflicts:
            superseded.append({**earlier, "kind": kind, "superseded_by": attempt,
                               "reason": f"step logged again at line {row['line']} of the same log"})
        merged[step] = {**earlier, **full}
    return merged, superseded


def _same_value(left: Any, right: Any) -> bool:
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    return left == right


def _chain_rows(per_attempt: Sequence[tuple[str, str, list[dict[str, Any]]]], kind: str
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    current: dict[int, dict[str, Any]] = {}
    superseded: list[dict[str, Any]] = []
    for attempt, source, rows in per_attempt:
        merged, within = _merge_attempt_rows(attempt, source, rows, kind)
        superseded.extend(within)
        if not merged:
            continue
        resume = min(merged)
        for step in sorted(step for step in current if step >= resume):
            old = current.pop(step)
            reason = (f"re-logged by later attempt {attempt}" if step in merged
                      else f"after the resume point (step {resume}) of later attempt {attempt}")
            superseded.append({**old, "kind": kind, "superseded_by": attempt, "reason": reason})
        current.update(merged)
    return [current[step] for step in sorted(current)], superseded


def surface_from_parsed(logs: Sequence[tuple[str, ParsedLog]],
                        without_metrics: Sequence[AttemptWithoutMetrics] = (),
                        chain: Sequence[str] | None = None) -> Surface:
    """Build the surface from (attempt_slug, parsed log) pairs in chain order.

    without_metrics: the chain's dead attempts (no rows, no supersession); chain: every
    attempt in order, for the report (default: the attempts with metrics, then the others).
    """
    seen: dict[str, str] = {}
    for attempt, source in [*((a, p.source) for a, p in logs), *((d.attempt, d.source) for d in without_metrics)]:
        if attempt in seen:
            raise MetricsError(f"attempt {attempt!r} appears twice in the chain ({seen[attempt]} and {source})")
        seen[attempt] = source
    if not logs and without_metrics:
        dead = ", ".join(f"{d.attempt} ({d.reason})" for d in without_metrics)
        raise MetricsError(f"no attempt of the chain logged metrics: {dead}; the surface is empty, so there is "
                           "nothing to select a checkpoint from (the logs are preserved in logs.tar)")
    rows, superseded = _chain_rows([(a, p.source, p.rows) for a, p in logs], "train")
    eval_rows, eval_superseded = _chain_rows([(a, p.source, p.eval_rows) for a, p in logs], "eval")
    files = [{
        "source": parsed.source,
        "attempt": attempt,
        "serialization": parsed.serialization,
        "steps": parsed.steps,
        "eval_rows": len(parsed.eval_rows),
        "ignored_blocks": parsed.ignored_blocks,
    } for attempt, parsed in logs]
    order = list(chain) if chain is not None else [*(a for a, _ in logs), *(d.attempt for d in without_metrics)]
    return Surface(rows=rows, superseded=superseded + eval_superseded, files=files, eval_rows=eval_rows,
                   without_metrics=list(without_metrics), chain=order)


def build_surface(logs: Sequence[tuple[str, str, str]]) -> Surface:
    """(attempt_slug, source_name, text) in chain order -> the metric surface."""
    return surface_from_parsed([(attempt, parse_log(text, source)) for attempt, source, text in logs])


def ema_series(values: Sequence[float], alpha: float) -> list[float]:
    """EMA_1 = r_1, EMA_n = alpha*r_n + (1-alpha)*EMA_{n-1}."""
    out: list[float] = []
    for value in values:
        out.append(value if not out else alpha * value + (1 - alpha) * out[-1])
    return out


def _row_step(row: Mapping[str, Any]) -> int:
    step = coerce_value(row.get("global_step"))
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        where = f" ({row['source']}:{row['line']})" if "source" in row and "line" in row else ""
        raise MetricsError(f"surface row has no integer global_step ({row.get('global_step')!r}){where}")
    return step


def numeric_series(rows: Sequence[Mapping[str, Any]], metric: str) -> list[tuple[int, float]]:
    """(step, value) for every row holding a finite number for metric, in step order.

    Raises MetricsError when the metric is absent everywhere or a value is not a number
    (naming the step, file and line). NaN values are skipped: W&B logs them for a step where
    the batch had no finished trajectory, and they carry no ranking information.
    """
    points: list[tuple[int, float]] = []
    present = False
    for step, row in sorted(((_row_step(row), row) for row in rows), key=lambda pair: pair[0]):
        if metric not in row or row[metric] is None or row[metric] == "":
            continue
        present = True
        value = coerce_value(row[metric])
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            where = f" ({row['source']}:{row['line']})" if "source" in row and "line" in row else ""
            raise MetricsError(f"metric {metric!r} has a non-numeric value {row[metric]!r} at step {step}{where}")
        if math.isfinite(value):
            points.append((step, float(value)))
    if not present:
        names = sorted({key for row in rows for key in row if key not in ROW_META})
        hint = [name for name in names if name.startswith("reward/")] or names[:10]
        raise MetricsError(f"metric {metric!r} is absent from the metric surface; available: {', '.join(hint) or 'none'}")
    return points


def read_metrics_csv(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Surface rows back from a metrics.csv: numbers coerced, empty cells dropped, and
    source/line set to the CSV file and line so later errors point into it."""
    rows: list[dict[str, Any]] = []
    try:
        handle = open(path, newline="", encoding="utf-8")
    except OSError as error:
        raise MetricsError(f"{path}: cannot read metrics.csv ({error.strerror})") from error
    with handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or reader.fieldnames[:2] != ["global_step", "attempt"]:
            raise MetricsError(f"{path}: not a metrics.csv (header must start with global_step,attempt)")
        for line, record in enumerate(reader, start=2):
            row: dict[str, Any] = {"source": str(path), "line": line, "attempt": record["attempt"]}
            row.update({key: coerce_value(value) for key, value in record.items()
                        if key not in ("attempt",) and value not in ("", None)})
            row["global_step"] = _row_step(row)
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- trials (result.json)

TRIAL_COLUMNS: tuple[str, ...] = (
    "trial", "task", "reward", "exception_type", "n_input_tokens", "n_output_tokens", "n_episodes",
    "trial_duration", "environment_setup_duration", "agent_setup_duration",
    "agent_execution_duration", "verifier_duration", "error",
)
PHASES: tuple[str, ...] = ("environment_setup", "agent_setup", "agent_execution", "verifier")

_RESULT_FIELDS: dict[str, Any] = {
    "task_name": None, "trial_name": None, "verifier_result": None, "exception_info": None,
    "started_at": None, "finished_at": None,
    "agent_result": {"n_input_tokens": None, "n_output_tokens": None, "metadata": {"n_episodes": None}},
    **{phase: None for phase in PHASES},
}


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        return None


def span_seconds(started: Any, finished: Any) -> float | None:
    """Seconds between two ISO times; None when either is missing, unparseable, or one has a
    zone and the other not (subtracting those would be a guess)."""
    start, end = _parse_time(started), _parse_time(finished)
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return None
    return round((end - start).total_seconds(), 6)


def _phase_seconds(span: Any) -> float | None:
    if not isinstance(span, dict):
        return None
    return span_seconds(span.get("started_at"), span.get("finished_at"))


def _number_or_none(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def trial_from_result(trial: str, data: Any) -> dict[str, Any]:
    """One trials.csv row from a result.json's bytes (or mmap); malformed input gives a row
    whose `error` says why ("<reason>: <detail>") instead of raising."""
    row: dict[str, Any] = {column: None for column in TRIAL_COLUMNS}
    row["trial"] = trial
    try:
        picked = pick_members(data, _RESULT_FIELDS, "result.json")
        for name in ("verifier_result", "exception_info", "agent_result"):
            if picked.get(name) is not None and not isinstance(picked[name], dict):
                raise SkimError("unexpected-shape", f"{name} is {type(picked[name]).__name__}, expected an object or null")
    except SkimError as error:
        row["error"] = str(error)
        return row
    row["task"] = picked.get("task_name")
    verifier = picked.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    if isinstance(rewards, dict):
        row["reward"] = _number_or_none(coerce_value(rewards.get("reward")))
    exception = picked.get("exception_info")
    if isinstance(exception, dict):
        row["exception_type"] = exception.get("exception_type") or "unknown"
    agent = picked.get("agent_result") or {}
    row["n_input_tokens"] = _number_or_none(agent.get("n_input_tokens"))
    row["n_output_tokens"] = _number_or_none(agent.get("n_output_tokens"))
    metadata = agent.get("metadata")
    if isinstance(metadata, dict):
        row["n_episodes"] = _number_or_none(metadata.get("n_episodes"))
    row["trial_duration"] = span_seconds(picked.get("started_at"), picked.get("finished_at"))
    for phase in PHASES:
        row[f"{phase}_duration"] = _phase_seconds(picked.get(phase))
    return row


def trials_from_results(items: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Trial rows from (trial dir name, result.json bytes-like) pairs, sorted by trial.

    Pass a generator to hold one result.json at a time; an mmap avoids reading it at all.
    """
    return sorted((trial_from_result(trial, data) for trial, data in items), key=lambda row: row["trial"])


def iter_result_files(trace_dir: str | os.PathLike[str]) -> Iterator[tuple[str, Any]]:
    """(trial, mmap or b"") for every <trace_dir>/<trial>/result.json, one open at a time."""
    root = Path(trace_dir)
    if not root.is_dir():
        raise MetricsError(f"{root}: trace directory does not exist")
    for trial_dir in sorted(entry for entry in root.iterdir() if entry.is_dir()):
        path = trial_dir / "result.json"
        if not path.is_file():
            continue
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                yield trial_dir.name, b""
                continue
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield trial_dir.name, mapped


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
    return _csv_bytes(["global_step", "attempt", *_metric_columns(surface.eval_rows)], surface.eval_rows)


def superseded_csv(surface: Surface) -> bytes:
    lead = ["global_step", "attempt", "kind", "superseded_by", "reason", "source", "line"]
    rows = sorted(surface.superseded, key=lambda r: (r["kind"], r["global_step"], r["attempt"], r["line"]))
    return _csv_bytes([*lead, *_metric_columns(rows, exclude=lead)], rows)


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
            "attempts_without_metrics": [entry.to_json() for entry in surface.without_metrics]}
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


# The metric surface's files (rule metric_surface: logs only) and the trial files (rule
# trial_table: the trace tarball only); the CLI writes both.
SURFACE_FILES: tuple[str, ...] = ("metrics.csv", "superseded.csv", "eval.csv", "attempts.json", "report.md", "reward.png")
TRIAL_FILES: tuple[str, ...] = ("trials.csv", "trials.md")
OUTPUT_FILES: tuple[str, ...] = SURFACE_FILES + TRIAL_FILES


def _write_all(rendered: Mapping[str, bytes], out_dir: str | os.PathLike[str]) -> dict[str, str]:
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
    return _write_all(rendered, out_dir)


# --------------------------------------------------------------------------- pipeline step

TAR_READ_BYTES = 1 << 20
IN_MEMORY_RESULT_BYTES = 32 << 20  # larger result.json files are spilled to disk and mapped


def _manifest_attempts(manifest: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """logs.manifest.json's per-attempt entries (state, bytes, lines) by slug."""
    entries = (manifest or {}).get("attempts") or []
    return {str(e["attempt"]): e for e in entries if isinstance(e, Mapping) and e.get("attempt")}


def _tar_logs(tar_path: Path, attempts: Sequence[str], manifest: Mapping[str, Any] | None = None
              ) -> tuple[list[tuple[str, ParsedLog]], list[AttemptWithoutMetrics]]:
    """Every attempt's trainer log from logs.tar (members attempts/<slug>/trainer.log), parsed
    as a stream, in the record's chain order: (logs with metrics, attempts without metrics).

    A readable log without any metric block is a dead attempt (kept apart, with its state from
    the logs manifest); a missing member, an unreadable tar or a malformed/truncated block raises.
    """
    import tarfile

    described = _manifest_attempts(manifest)
    parsed: list[tuple[str, ParsedLog]] = []
    dead: list[AttemptWithoutMetrics] = []
    try:
        with tarfile.open(tar_path, "r:") as tar:
            for slug in attempts:
                name = f"attempts/{slug}/trainer.log"
                try:
                    member = tar.getmember(name)
                    handle = tar.extractfile(member)
                except KeyError:
                    handle = None
                if handle is None:
                    raise MetricsError(f"{tar_path}: no {name}: the trainer log of attempt {slug} was not synced")
                source = f"{tar_path.name}:{name}"
                with handle:
                    chunks = iter(lambda: handle.read(TAR_READ_BYTES), b"")
                    try:
                        parsed.append((slug, parse_log_stream(chunks, source)))
                    except NoMetricsError as error:
                        entry = described.get(slug, {})
                        dead.append(AttemptWithoutMetrics(
                            attempt=slug, source=source, reason=error.reason, state=entry.get("state"),
                            bytes=entry.get("bytes", member.size), lines=entry.get("lines")))
    except (tarfile.TarError, OSError) as error:
        raise MetricsError(f"{tar_path}: cannot read the logs tar ({error}); rerun sync_logs") from error
    return parsed, dead


def _tar_results(tar_path: Path, scratch: Path) -> Iterator[tuple[str, Any]]:
    """(trial, result.json bytes or mmap) for every <trial>/result.json in trace_jobs.tar, one
    at a time; a large one is copied to scratch and mapped instead of read into memory."""
    import shutil
    import tarfile

    with tarfile.open(tar_path, "r:") as tar:
        for member in tar:
            parts = member.name.split("/")
            if len(parts) != 2 or parts[1] != "result.json" or not member.isfile():
                continue
            handle = tar.extractfile(member)
            if handle is None:
                continue
            with handle:
                if member.size <= IN_MEMORY_RESULT_BYTES:
                    yield parts[0], handle.read()
                    continue
                spill = scratch / "large-result.json"
                with open(spill, "wb") as out:
                    shutil.copyfileobj(handle, out, TAR_READ_BYTES)
            with open(spill, "rb") as mapped_file, mmap.mmap(mapped_file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield parts[0], mapped
            spill.unlink(missing_ok=True)


def metric_surface_step(ctx: Any) -> None:
    """`<job>/metrics/` surface files: every attempt's log in logs.tar (chain order from the
    record), the report and the plot. Attempts whose log holds no metric block are named, not
    fatal; the trace tarball is not read here (trial_table_step)."""
    from rlkeep.jsonio import read_json

    manifest = read_json(ctx.inputs["logs_manifest"]) if "logs_manifest" in ctx.inputs else None
    parsed, dead = _tar_logs(ctx.inputs["logs"], ctx.record.attempts, manifest)
    surface = surface_from_parsed(parsed, dead, chain=ctx.record.attempts)
    candidates = read_json(ctx.inputs["candidates"]).get("candidates", []) if "candidates" in ctx.inputs else None
    out_dir = ctx.outputs["metrics"].parent
    _check_outputs(ctx, out_dir, SURFACE_FILES)
    _write_all(render_surface(surface, None, candidates=candidates,
                              behavior_break_step=ctx.record.behavior_break_step, job=ctx.job), out_dir)
    for info in surface.files:
        print(f"{info['source']}: {info['serialization']}, {len(info['steps'])} steps")
    for entry in dead:
        print(f"{entry.source}: no metrics ({entry.reason}; attempt state {entry.state or 'unknown'}): "
              "preserved in logs.tar, no rows")
    print(f"metrics: {len(surface.rows)} steps, {len(surface.superseded)} superseded rows, "
          f"{len(dead)} attempts without metrics")


def trial_table_step(ctx: Any) -> None:
    """`<job>/metrics/trials.csv` + `trials.md`: one row per trial from trace_jobs.tar."""
    out_dir = ctx.outputs["trials"].parent
    _check_outputs(ctx, out_dir, TRIAL_FILES)
    trials = trials_from_results(_tar_results(ctx.inputs["traces"], ctx.work_dir("trial_table")))
    _write_all(render_trials(trials, job=ctx.job, source=ctx.inputs["traces"].name), out_dir)
    print(f"trials: {len(trials)} ({sum(1 for t in trials if t.get('error'))} malformed result.json)")


def _check_outputs(ctx: Any, out_dir: Path, names: Sequence[str]) -> None:
    foreign = sorted(str(path) for path in ctx.outputs.values() if path.parent != out_dir or path.name not in names)
    if foreign:
        raise MetricsError(f"outputs {foreign} are not among {', '.join(names)} in {out_dir}")


# --------------------------------------------------------------------------- CLI

def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlkeep metrics",
        description="Build the metric surface from trainer logs given in chain order (attempt = file stem).")
    parser.add_argument("logs", nargs="+", help="trainer logs, oldest attempt first")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--results-dir", help="trace directory holding <trial>/result.json")
    parser.add_argument("--job", help="job name for the report title")
    args = parser.parse_args(argv)
    parsed: list[tuple[str, ParsedLog]] = []
    for log in args.logs:
        path = Path(log)
        if not path.is_file():
            raise MetricsError(f"{log}: trainer log does not exist")
        parsed.append((path.stem, parse_log_file(path, source=str(log))))
    surface = surface_from_parsed(parsed)
    trials = trials_from_results(iter_result_files(args.results_dir)) if args.results_dir else []
    write_outputs(surface, trials, args.out, job=args.job)
    for info in surface.files:
        print(f"{info['source']}: {info['serialization']}, {len(info['steps'])} steps")
    malformed = sum(1 for trial in trials if trial.get("error"))
    print(f"metrics: {len(surface.rows)} steps, {len(surface.superseded)} superseded rows, "
          f"{len(trials)} trials ({malformed} malformed) -> {args.out}")
    return 0
