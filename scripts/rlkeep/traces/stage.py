"""The stage folder: what in it is ours (shards, manifest, card), the checks before a build, and
installing a passing build or withdrawing on a rejected one; anything else there is kept."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import write_json
from rlkeep.traces.card import CARD_MARKER, CARD_NAME

MANIFEST_NAME = "trace_export_manifest.json"
REJECTED_MANIFEST_NAME = "trace_export_manifest.rejected.json"
DATA_DIR = "data"


def clear_stale_work_dirs(out_dir: Path) -> None:
    for stale in out_dir.parent.glob(f".{out_dir.name}.build-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


# Our shard names: Harbor's `train-iiiii-of-nnnnn.parquet`, and `train-NNNNN.parquet` of exports
# before rlkeep 0.x wrote Harbor's names (replaced like any stale shard of ours).
SHARD_PATTERN = re.compile(r"train-\d+(?:-of-\d+)?\.parquet")


def our_shards(data_dir: Path) -> list[Path]:
    """The shard files an earlier export wrote (data/train-*.parquet): with our card, the only files in the
    stage folder an export replaces or withdraws. Anything else there is the operator's and stays."""
    if not data_dir.is_dir() or data_dir.is_symlink():
        return []
    return sorted(path for path in data_dir.iterdir() if SHARD_PATTERN.fullmatch(path.name))


def check_stage_folder(out_dir: Path) -> None:
    """Stop before building when something that is not ours sits where the export writes: a
    non-folder at out_dir or data/, or a folder or link named like a shard or the manifest."""
    problems = []
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        problems.append(f"{out_dir} is not a folder")
    else:
        data_dir = out_dir / DATA_DIR
        if data_dir.is_symlink() or (data_dir.exists() and not data_dir.is_dir()):
            problems.append(f"{data_dir} is not a folder")
        for name in (MANIFEST_NAME, REJECTED_MANIFEST_NAME):
            path = out_dir / name
            if path.is_symlink() or (path.exists() and not path.is_file()):
                problems.append(f"{path} is not a regular file")
        problems += [f"{path} is not a regular file" for path in our_shards(data_dir)
                     if path.is_symlink() or not path.is_file()]
    if problems:
        raise RlkeepError(f"trace export into {out_dir}: {'; '.join(problems)}; the export replaces only its own "
                          "data/train-*.parquet shards and manifest, so it leaves this as it is: move it aside and rerun")


def foreign_files(out_dir: Path) -> list[str]:
    """Files in the stage folder that this export did not write (kept as they were)."""
    out_dir = Path(out_dir)
    ours = {MANIFEST_NAME, REJECTED_MANIFEST_NAME} | {f"{DATA_DIR}/{p.name}" for p in our_shards(out_dir / DATA_DIR)}
    if card_is_ours(out_dir / CARD_NAME):
        ours.add(CARD_NAME)
    return sorted(rel for rel in (p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if not p.is_dir())
                  if rel not in ours)


def card_is_ours(path: Path) -> bool:
    """A README.md this export wrote (it carries the marker); anything else there is the operator's."""
    if not path.is_file() or path.is_symlink():
        return False
    with open(path, "rb") as handle:
        return CARD_MARKER.encode() in handle.read(4096)


def install(work: Path, out_dir: Path) -> None:
    """Put the built shards and manifest into out_dir, replacing only our earlier shards. The
    manifest is the completion marker: it goes first on the way out and last on the way in."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    (out_dir / REJECTED_MANIFEST_NAME).unlink(missing_ok=True)
    data_dir = out_dir / DATA_DIR
    data_dir.mkdir(exist_ok=True)
    for stale in our_shards(data_dir):
        stale.unlink()
    for shard in sorted((work / DATA_DIR).iterdir()):
        os.replace(shard, data_dir / shard.name)
    card = out_dir / CARD_NAME
    if (work / CARD_NAME).is_file() and (not card.exists() or card_is_ours(card)):
        os.replace(work / CARD_NAME, card)
    os.replace(work / MANIFEST_NAME, out_dir / MANIFEST_NAME)


def reject(out_dir: Path, manifest: dict[str, Any], message: str) -> None:
    """A build under the gate: the previous export's shards are withdrawn (they describe other
    input) and the rejected manifest is kept beside them for inspection; other files stay."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    data_dir = out_dir / DATA_DIR
    for stale in our_shards(data_dir):
        stale.unlink()
    if card_is_ours(out_dir / CARD_NAME):
        (out_dir / CARD_NAME).unlink()
    if data_dir.is_dir() and not data_dir.is_symlink() and not any(data_dir.iterdir()):
        data_dir.rmdir()  # the folder our shards were in; kept when anything else is inside
    write_json(out_dir / REJECTED_MANIFEST_NAME, dict(manifest, status="rejected", reason=message))
