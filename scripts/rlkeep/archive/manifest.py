"""The archive's MANIFEST and the skip rule it records: which members stay out of the archive and
why, the summary line, one line per artifact (kept with its size and sha256, or skipped with its size and reason), and
the parser verification, restore and reclamation read it back with.
"""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError

DEFAULT_LARGE_THRESHOLD = 10 << 20  # raw terminal recordings above this are skipped
MANIFEST_MEMBER = "MANIFEST"
WEIGHT_PATTERNS = ("*.safetensors", "*.pt", "*.pth", "*.bin", "*.ckpt", "*.distcp", "*.gguf")
CACHE_PARTS = frozenset({
    "__pycache__", ".venv", ".cache", "site-packages", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    "pip-cache", ".pip-cache", "uv-cache", ".uv-cache", ".conda", "pkgs",
})
CACHE_SUFFIXES = (".pyc", ".pyo")
# `core.*` is a core dump unless the suffix says it is text or source (an agent's `core.py`
# is informative): the runbook's own pattern would drop those.
CORE_TEXT_SUFFIXES = frozenset({
    "py", "pyi", "json", "jsonl", "txt", "log", "md", "rst", "yaml", "yml", "toml", "cfg", "ini", "csv",
    "c", "h", "cc", "cpp", "hpp", "rs", "go", "java", "js", "ts", "tsx", "jsx", "sh", "html", "css", "sql",
    "rb", "php", "kt", "swift", "scala", "lua", "r", "xml", "proto", "tex",
})
TERMINAL_RECORDINGS = ("*.pane", "recording.cast")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_WEIGHT_NAME = re.compile("|".join(fnmatch.translate(pattern) for pattern in WEIGHT_PATTERNS))
_TERMINAL_RECORDING_NAME = re.compile("|".join(fnmatch.translate(pattern) for pattern in TERMINAL_RECORDINGS))


# --------------------------------------------------------------------------- the skip rule


def archive_rule(member: str, size: int, *, large_threshold: int) -> str | None:
    """Why `member` stays out of the archive, or None when it is kept.

    `member` is a '/'-separated path (the archive member name or a path inside a source).
    """
    parts = member.strip("/").split("/")
    name, folders = parts[-1], parts[:-1]
    if any(part in CACHE_PARTS for part in parts) or name.endswith(CACHE_SUFFIXES):
        return "cache"
    if _WEIGHT_NAME.match(name):
        return "weights"
    if any(folder.startswith("global_step_") for folder in folders):
        return "checkpoint"
    if name == "core" or name.endswith(".hprof") or (
        name.startswith("core.") and name[len("core."):].rsplit(".", 1)[-1].lower() not in CORE_TEXT_SUFFIXES
    ):
        return "core_dump"
    if size > large_threshold and _TERMINAL_RECORDING_NAME.match(name):
        return "large_terminal_recording"
    return None


# --------------------------------------------------------------------------- MANIFEST text


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, chars = [], iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        code = next(chars, "")
        out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}.get(code, "\\" + code))
    return "".join(out)


def _summary_value(summary: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = summary.get(key)
    if value is None or value == "" or value == []:
        if required:
            raise RlkeepError(f"archive summary: field '{key}' is missing; expected a value for the MANIFEST line")
        return "none"
    if isinstance(value, (list, tuple)):
        text = ",".join(str(item) for item in value)
    else:
        text = str(value)
    if any(char.isspace() for char in text):
        raise RlkeepError(f"archive summary: field '{key}' is {text!r}; expected a value without spaces")
    return text


def summary_line(summary: dict[str, Any], kept: tuple[int, int], skipped: tuple[int, int]) -> str:
    """`run=<job> kind=rl cluster=<c> jobs=<id,id> dates=<a>..<b> kept=<n>files,<b>bytes ...`."""
    first = _summary_value(summary, "first_submitted")
    last = _summary_value(summary, "last_finished")
    fields = [
        f"run={_summary_value(summary, 'run', required=True)}",
        f"kind={_summary_value({'kind': summary.get('kind', 'rl')}, 'kind')}",
        f"cluster={_summary_value(summary, 'cluster')}",
        f"jobs={_summary_value(summary, 'jobs', required=True)}",
        f"dates={first}..{last}",
        f"kept={kept[0]}files,{kept[1]}bytes",
        f"skipped={skipped[0]}files,{skipped[1]}bytes",
        f"tracker={_summary_value(summary, 'tracker')}",
    ]
    return " ".join(fields)


def summary_from_chain(record: Any, chain: dict[str, Any]) -> dict[str, Any]:
    """The MANIFEST summary from a JobRecord and `<job>/chain.json` (times are epoch ms, UTC)."""
    attempts = chain.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        raise RlkeepError("chain.json: field 'attempts' is missing or empty; expected the run's attempts in order")

    def iso(ms: Any) -> str:
        return datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    submitted = [a["submitted_ms"] for a in attempts if isinstance(a, dict) and a.get("submitted_ms") is not None]
    finished = [a["finished_ms"] for a in attempts if isinstance(a, dict) and a.get("finished_ms") is not None]
    return {
        "run": record.job,
        "kind": getattr(record, "kind", "rl"),
        "cluster": record.cluster,
        "jobs": [a.get("id") for a in attempts if isinstance(a, dict)] or list(record.chain),
        "first_submitted": iso(min(submitted)) if submitted else None,
        "last_finished": iso(max(finished)) if finished else None,
        "tracker": record.tracker_url or chain.get("tracker_url"),
    }


@dataclass(frozen=True)
class ManifestEntry:
    member: str
    size: int
    reason: str | None  # None: kept
    # of the member's bytes as archived (after redaction), so a restore can check each file from
    # the MANIFEST alone; None in a MANIFEST written before the column existed
    sha256: str | None = None

    def line(self) -> str:
        if self.reason is None:
            digest = "" if self.sha256 is None else f"\t{self.sha256}"
            return f"kept\t{self.size}\t{_escape(self.member)}{digest}"
        return f"skipped\t{self.size}\t{_escape(self.member)}\t{self.reason}"


def manifest_text(summary: dict[str, Any], entries: list[ManifestEntry]) -> str:
    kept = [e for e in entries if e.reason is None]
    skipped = [e for e in entries if e.reason is not None]
    head = summary_line(summary, (len(kept), sum(e.size for e in kept)), (len(skipped), sum(e.size for e in skipped)))
    return "\n".join([head, *(entry.line() for entry in entries)]) + "\n"


def parse_manifest(text: str, where: str) -> tuple[dict[str, str], list[ManifestEntry]]:
    """(summary fields, entries); raises RlkeepError naming the line of anything malformed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise RlkeepError(f"{where}: empty MANIFEST; expected a summary line and one line per artifact")
    summary: dict[str, str] = {}
    for token in lines[0].split(" "):
        key, sep, value = token.partition("=")
        if not sep:
            raise RlkeepError(f"{where}: line 1: {token!r} is not key=value; expected the run summary line")
        summary[key] = value
    for key in ("run", "kind", "cluster", "jobs", "dates", "kept", "skipped", "tracker"):
        if key not in summary:
            raise RlkeepError(f"{where}: line 1: field '{key}' is missing from the summary line")
    entries: list[ManifestEntry] = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        try:
            if fields[0] == "kept" and len(fields) == 3:
                entries.append(ManifestEntry(_unescape(fields[2]), int(fields[1]), None))
                continue
            if fields[0] == "kept" and len(fields) == 4 and SHA256_HEX.fullmatch(fields[3]):
                entries.append(ManifestEntry(_unescape(fields[2]), int(fields[1]), None, fields[3]))
                continue
            if fields[0] == "skipped" and len(fields) == 4 and fields[3]:
                entries.append(ManifestEntry(_unescape(fields[2]), int(fields[1]), fields[3]))
                continue
        except ValueError:
            pass
        raise RlkeepError(f"{where}: line {number}: {line[:200]!r}; expected kept<TAB>size<TAB>member[<TAB>sha256] "
                          "or skipped<TAB>size<TAB>member<TAB>reason")
    return summary, entries



def summary_counts(value: str) -> tuple[int, int]:
    """(files, bytes) of a summary field `kept=<n>files,<n>bytes`."""
    files, _, size = value.partition(",")
    return int(files.removesuffix("files")), int(size.removesuffix("bytes"))


def iter_manifest_entries(manifest_path: Path) -> Iterable[ManifestEntry]:
    """The artifacts listed in a MANIFEST file (for reports)."""
    _, entries = parse_manifest(Path(manifest_path).read_text(encoding="utf-8"), str(manifest_path))
    return entries
