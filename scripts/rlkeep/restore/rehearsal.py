"""The restore rehearsal's comparisons: a restored tree against what its archive was built from.

- every regular file of the sync tars is in the MANIFEST, kept (and so restored and checked) or
  skipped with its reason;
- the job files the archive carries (`rlkeep/...`: chain.json, the sync manifests, the record)
  have the local files' bytes (the MANIFEST's digest, checked as each member streamed past);
- the run's own tools agree: the metric surface rebuilt from the restored trainer logs, and the
  trial table rebuilt from the restored trace tree, equal `metrics/metrics.csv` and
  `metrics/trials.csv` byte for byte.
Each function returns the problems it found (empty: agreed), naming the file.
"""
from __future__ import annotations

import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlkeep.archive.manifest import ManifestEntry
from rlkeep.hashing import sha256_file

TOOL_READ_BYTES = 1 << 20
SHOWN = 20


def unaccounted_sync_members(sources: Sequence[tuple[str, Path]], entries: Mapping[str, ManifestEntry]) -> list[str]:
    """Regular files of each (tree, sync tar) the MANIFEST lists neither as kept nor as skipped."""
    problems: list[str] = []
    for tree, tar_path in sources:
        with tarfile.open(tar_path, "r:") as tar:
            names = [info.name.removeprefix("./") for info in tar.getmembers() if info.isfile()]
        absent = [f"{tree}/{name}" for name in names if f"{tree}/{name}" not in entries]
        if absent:
            problems.append(f"{len(absent)} file(s) of {tar_path} are not in the archive's MANIFEST: "
                            + ", ".join(absent[:SHOWN]))
    return problems


def differing_job_files(tree: Path, entries: Mapping[str, ManifestEntry],
                        job_files: Sequence[tuple[str, Path]]) -> list[str]:
    """Job files (archive member, local path) whose archived bytes differ from the local file's. By the
    MANIFEST's digest, which the restore held the member to as it streamed past, so the file is never
    written; from a MANIFEST written before digests, by the copy restored into `tree`."""
    problems: list[str] = []
    for member, local in job_files:
        entry = entries.get(member)
        restored = tree / member
        if entry is None or entry.reason is not None:
            problems.append(f"{member}: not kept in the archive's MANIFEST (the archive was built with {local})")
        elif entry.sha256 is not None:
            if entry.sha256 != sha256_file(local):
                problems.append(f"{member}: restored bytes differ from {local}")
        elif not restored.is_file():
            problems.append(f"{member}: not restored (the archive was built with {local})")
        elif sha256_file(restored) != sha256_file(local):
            problems.append(f"{member}: restored bytes differ from {local}")
    return problems


def _first_difference(rebuilt: bytes, original: bytes) -> str:
    rebuilt_lines, original_lines = rebuilt.splitlines(), original.splitlines()
    for number, (a, b) in enumerate(zip(rebuilt_lines, original_lines), start=1):
        if a != b:
            return f"line {number} differs: rebuilt {a[:120]!r}, original {b[:120]!r}"
    return f"rebuilt has {len(rebuilt_lines)} lines, the original {len(original_lines)}"


def metric_surface_problems(tree: Path, attempts: Sequence[str], original: Path) -> list[str]:
    """The metric surface of the restored `logs/attempts/<slug>/trainer.log`s against metrics.csv."""
    from rlkeep.metrics.common import NoMetricsError
    from rlkeep.metrics.parse import parse_log_stream
    from rlkeep.metrics.report import metrics_csv
    from rlkeep.metrics.surface import AttemptWithoutMetrics, surface_from_parsed

    parsed, dead = [], []
    for slug in attempts:
        path = tree / "logs" / "attempts" / slug / "trainer.log"
        if not path.is_file():
            return [f"{path}: the trainer log of attempt {slug} was not restored; the metric surface cannot be rebuilt"]
        source = f"restored logs/attempts/{slug}/trainer.log"
        with open(path, "rb") as handle:
            try:
                parsed.append((slug, parse_log_stream(iter(lambda: handle.read(TOOL_READ_BYTES), b""), source)))
            except NoMetricsError as error:
                dead.append(AttemptWithoutMetrics(attempt=slug, source=source, reason=error.reason))
    rebuilt = metrics_csv(surface_from_parsed(parsed, dead, chain=list(attempts)))
    wanted = original.read_bytes()
    if rebuilt == wanted:
        return []
    return [f"the metric surface rebuilt from the restored logs differs from {original}: "
            f"{_first_difference(rebuilt, wanted)}"]


def is_result_member(member: str, trace_tree: str) -> bool:
    """`<trace_tree>/<trial>/result.json`: what the trial table is made from."""
    parts = member.split("/")
    return len(parts) == 3 and parts[0] == trace_tree and parts[2] == "result.json"


def trial_rows_problems(rows: Sequence[dict], original: Path) -> list[str]:
    """Trial rows (rlkeep.metrics.trials.trial_from_result of each restored result.json, as the
    rehearsal reads them streaming) against trials.csv."""
    from rlkeep.metrics.report import trials_csv

    rebuilt = trials_csv(sorted(rows, key=lambda row: row["trial"]))
    wanted = original.read_bytes()
    if rebuilt == wanted:
        return []
    return [f"the trial table rebuilt from the restored traces differs from {original}: "
            f"{_first_difference(rebuilt, wanted)}"]
