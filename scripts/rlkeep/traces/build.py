"""The trace dataset build: options checked, source (tar streamed, or extracted when unsorted, or a
trace root) turned into shards in a sibling work dir, the coverage gate applied, the card and the
manifest written, and the result installed into the stage folder."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import write_json
from rlkeep.redaction import redactor_from_environment
from rlkeep.traces.card import CARD_NAME, CardInfo, render_card
from rlkeep.traces.coverage import DEFAULT_MIN_COVERAGE, CoverageError, below_gate, coverage_message
from rlkeep.traces.export import EPISODES, FILTERS, export_rows
from rlkeep.traces.shards import DEFAULT_TRIALS_PER_SHARD
from rlkeep.traces.stage import (
    DATA_DIR, MANIFEST_NAME, card_is_ours, check_stage_folder, clear_stale_work_dirs, install, reject,
)
from rlkeep.traces.tarsafe import extract_and_hash
from rlkeep.traces.text import TextRedactor
from rlkeep.traces.trials import TarTrials, UnsortedTar, iter_trials, needed_for_export


def _export_tar(tar_path: Path, work: Path, options: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Stream the tar; if its trials are out of order, extract it safely and read the tree."""
    trials = TarTrials(tar_path)
    try:
        manifest = export_rows(trials, work / DATA_DIR, **options)
        assert trials.sha256 is not None
        return manifest, trials.sha256
    except UnsortedTar:
        shutil.rmtree(work / DATA_DIR, ignore_errors=True)
    root = work / "source"
    _, digest = extract_and_hash(tar_path, root, _needed_below_trial)
    return export_rows((trial.read() for trial in iter_trials(root)), work / DATA_DIR, **options), digest


def _needed_below_trial(rel: str) -> bool:
    top, _, inner = rel.partition("/")
    return bool(inner) and needed_for_export(inner)


def build_trace_dataset(source: Path, out_dir: Path, *, episodes: str = "last", filter: str = "none",
                        redactor: TextRedactor | None = None, min_coverage: float = DEFAULT_MIN_COVERAGE,
                        trials_per_shard: int = DEFAULT_TRIALS_PER_SHARD,
                        source_sha256: str | None = None, clean_terminal_noise: bool = False,
                        sharegpt: bool = False, card: CardInfo | None = None) -> dict[str, Any]:
    """Build out_dir/data/train-*.parquet and out_dir/trace_export_manifest.json; return the manifest.

    source: the sync step's tar (streamed; extracted safely into a work dir when its members
    are not in sorted order) or an extracted trace root.
    source_sha256: for a tar, the digest the sync manifest recorded (checked); for a
    directory, recorded as the source's identity. redactor: None uses
    `rlkeep.redaction.redactor_from_environment()`. The build happens in a sibling work dir;
    only a build that passes the coverage gate replaces out_dir's data/ and manifest, and writes
    the dataset card README.md (unless an operator's README.md sits there: it is kept).
    clean_terminal_noise: off by default (Harbor keeps the text the model saw); recorded in the
    manifest and the card. sharegpt: add the conversations_sharegpt column.
    Raises CoverageError (an RlkeepError) under the gate, RlkeepError on unreadable input.
    """
    if episodes not in EPISODES:
        raise RlkeepError(f"episodes must be one of {', '.join(EPISODES)}, not {episodes!r}")
    if filter not in FILTERS:
        raise RlkeepError(f"filter must be one of {', '.join(FILTERS)}, not {filter!r}")
    if not 0.0 <= min_coverage <= 1.0:
        raise RlkeepError(f"min_coverage must lie in [0, 1], not {min_coverage!r}")
    if trials_per_shard < 1:
        raise RlkeepError(f"trials_per_shard must be at least 1, not {trials_per_shard!r}")
    source, out_dir = Path(source), Path(out_dir).absolute()
    if not source.exists():
        raise RlkeepError(f"{source}: trace source does not exist")
    check_stage_folder(out_dir)
    redactor = redactor if redactor is not None else redactor_from_environment()
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        clear_stale_work_dirs(out_dir)
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
    except OSError as error:
        raise RlkeepError(f"{out_dir}: cannot create the build directory beside it: {error}") from error
    try:
        options = dict(episodes=episodes, filter=filter, redactor=redactor, trials_per_shard=trials_per_shard,
                       clean_terminal_noise=clean_terminal_noise, sharegpt=sharegpt)
        if source.is_file():
            manifest, digest = _export_tar(source, work, options)
            if source_sha256 and source_sha256 != digest:
                raise RlkeepError(f"{source}: sha256 {digest} differs from the expected {source_sha256}")
            manifest["source"] = {"kind": "tar", "name": source.name, "sha256": digest}
        else:
            manifest = export_rows((trial.read() for trial in iter_trials(source)), work / DATA_DIR, **options)
            manifest["source"] = {"kind": "directory", "sha256": source_sha256}
        manifest["min_coverage"] = min_coverage
        covered = manifest["trials_exported"] + manifest["trials_filtered_out"]
        if below_gate(covered, manifest["result_count"], min_coverage):
            message = coverage_message(covered, manifest["result_count"], min_coverage)
            reject(out_dir, manifest, message)
            raise CoverageError(message, manifest)
        existing = out_dir / CARD_NAME
        if existing.exists() and not card_is_ours(existing):
            manifest["card"] = {"written": False, "reason": f"{CARD_NAME} in the stage folder is not ours; kept"}
        else:
            manifest["card"] = {"written": True, "name": CARD_NAME}
            text = render_card(manifest, card or CardInfo(), data_dir=DATA_DIR, manifest_name=MANIFEST_NAME)
            (work / CARD_NAME).write_text(text, encoding="utf-8")
        write_json(work / MANIFEST_NAME, manifest)
        install(work, out_dir)
        return manifest
    except OSError as error:  # unreadable source file, full disk, permissions: name the path
        raise RlkeepError(f"trace export from {source} into {out_dir} failed: {error}") from error
    finally:
        shutil.rmtree(work, ignore_errors=True)
