"""Line cleaning (ANSI colours, Ray and Iris prefixes) and metric values (numbers, printed dicts)."""
from __future__ import annotations

import ast
import json
import re
from typing import Any


# --------------------------------------------------------------------------- line cleaning

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# `[17:05:45] task=/user/job/0 | ` and `[17:05:45] task=/user/job/0 attempt=3 | ` (Iris job logs)
_IRIS_PREFIX = re.compile(r"\[\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\]((?: [A-Za-z_]+=\S+)+) \| ")
# `(skyrl_entrypoint pid=2211) `, `(pid=7, ip=10.0.0.2) `, `(raylet) `
_RAY_PREFIX = re.compile(r"\((?:[^()\n]*\bpid=\d+[^()\n]*|raylet[^()\n]*)\) ")
# both, in one match: group 1 the Iris tokens, group 2 the Ray prefix
LINE_PREFIX = re.compile(f"(?:{_IRIS_PREFIX.pattern})?({_RAY_PREFIX.pattern})?")
NOT_CONTINUATION = re.compile(r"^(?!\s)", re.M)  # a line that is not an indented pprint continuation
# Ray's de-duplication suffix, with the notice it adds the first time (tests/data/upstream/SOURCES.md)
RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\](?: \(Ray deduplicates logs[^)]*\))?\s*$")

WANDB = re.compile(r"WANDB_MIRROR\s+kind=(?P<kind>\S+)\s+step=(?P<step>\d+)\s+metrics=(?P<json>.*)$")
STEP_HEADER = re.compile(r"(?:^|\s)Step (\d{1,18}):\s*$")
STEP_INLINE = re.compile(r"(?:^|\s)Step (\d{1,18}):\s*\{")
NUMERIC_STRING = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.I)


def clean_line(raw: str) -> tuple[str, str]:
    """Split a raw log line into (origin, message).

    origin identifies the printing process (Iris task/attempt tokens plus the Ray prefix) so a
    multi-line block can skip lines of other processes; message is the line without ANSI codes
    and without those prefixes. Exactly one separator space is removed after each prefix, so a
    pprint continuation line keeps its leading indent.
    """
    line = ANSI.sub("", raw) if "\x1b" in raw else raw
    match = LINE_PREFIX.match(line)
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
    return number if NUMERIC_STRING.fullmatch(text) else None


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
