"""Consolidation: stream a checkpoint into a flat model folder built in a sibling temp dir,
verify it, fsync it, rename it into place.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlkeep.diskspace import require_free
from rlkeep.errors import RlkeepError
from rlkeep.export.detect import Detection, detect_format, list_files
from rlkeep.export.fsdp import fsdp_source
from rlkeep.export.layout import CONFIG_FILES, DEFAULT_MAX_SHARD_BYTES, INDEX_NAME, REMOTE_CODE_FILE
from rlkeep.export.plan import PlannedShard, index_bytes, plan_shards
from rlkeep.export.sources import SourceModel, few, safetensors_source
from rlkeep.export.verify import architectures_problem, json_problem, verify_folder
from rlkeep.export.writer import Writer, fsync_directory, hash_pool
from rlkeep.export.layout import TOKENIZER_FILES, TOKENIZER_REQUIREMENT, has_tokenizer


def consolidate(src_dir: str | os.PathLike[str], dst_dir: str | os.PathLike[str], *,
                detection: Detection | None = None,
                max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> dict[str, Any]:
    """Consolidate the step directory src_dir into the flat model folder dst_dir; return the report.

    dst_dir appears only complete and verified (built in a sibling temp dir, then renamed); on any
    failure nothing is left behind. An existing non-empty dst_dir is refused, never overwritten.
    """
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    if type(max_shard_bytes) is not int or max_shard_bytes < 1:
        raise RlkeepError(f"max_shard_bytes must be a positive number of bytes, got {max_shard_bytes!r}")
    if not src_dir.is_dir():
        raise RlkeepError(f"{src_dir}: source checkpoint directory does not exist")
    if dst_dir.exists() and (not dst_dir.is_dir() or any(dst_dir.iterdir())):
        raise RlkeepError(f"{dst_dir}: already exists and is not empty; remove it or choose another destination")
    if detection is None:
        detection = detect_format(list_files(src_dir))
    if not detection.consolidatable:
        raise RlkeepError(f"{src_dir}: {detection.format} checkpoint cannot be consolidated here: {detection.reason}")
    missing = [name for name in detection.needed_files if not (src_dir / name).is_file()]
    if missing:
        raise RlkeepError(f"{src_dir}: needed file(s) missing (download them first): {few(missing)}")

    root = src_dir / detection.root
    if detection.format in ("hf-single", "hf-sharded"):
        source = safetensors_source(root, detection)
    elif detection.format == "fsdp":
        source = fsdp_source(src_dir, detection)
    else:
        raise RlkeepError(f"{src_dir}: unknown format {detection.format!r}")
    sizes = {p: (src_dir / p).stat().st_size for p in detection.needed_files}
    return consolidate_source(source, dst_dir, detection=detection, origin=str(src_dir), sizes=sizes,
                              max_shard_bytes=max_shard_bytes)


def consolidate_source(source: SourceModel, dst_dir: Path, *, detection: Detection, origin: str,
                       sizes: Mapping[str, int], max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> dict[str, Any]:
    """Write the model of `source` (read from `origin`, whose files are `sizes`) into dst_dir, verified,
    through a sibling temp dir; return the report."""
    if not source.tensors:
        raise RlkeepError(f"{origin}: the checkpoint holds no tensors")
    aux = _aux_sources(source.aux_dir)
    expected = {t.name: (t.dtype, t.shape) for t in source.tensors}
    plan = plan_shards(source.tensors, max_shard_bytes, source.whole_files)

    dst_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dst_dir.name}.tmp-", dir=dst_dir.parent))
    try:
        require_free(staging, _bytes_to_write(plan, aux, staging), f"consolidation of {origin} into {dst_dir}")
        with hash_pool() as pool:
            writer = Writer(staging, pool)
            try:
                for shard in plan:
                    writer.write_shard(shard)
                if len(plan) > 1:
                    writer.write_small(INDEX_NAME, index_bytes(plan))
                for path in aux:
                    writer.write_small(path.name, path.read_bytes())
                writer.finish()
            finally:
                writer.close()
            try:
                verification = verify_folder(staging, expected, writer.digests, pool)
            except RlkeepError as error:  # name the destination, not the temp dir about to vanish
                raise RlkeepError(str(error).replace(str(staging), str(dst_dir))) from error
        fsync_directory(staging)
        if dst_dir.exists():
            dst_dir.rmdir()  # empty, checked above
        os.rename(staging, dst_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        source.keepalive.clear()
    fsync_directory(dst_dir.parent)
    verification["dir"] = str(dst_dir)
    return _report(origin, sizes, dst_dir, detection, plan, max_shard_bytes, writer.reused, source.notes, verification)


# a shard's safetensors header (names, dtypes, shapes, offsets), generously
HEADER_ALLOWANCE = 1 << 16


def _bytes_to_write(plan: Sequence[PlannedShard], aux: Sequence[Path], staging: Path) -> int:
    """What consolidation adds to the staging folder's filesystem: rewritten shards, reused shards that
    cannot be hard-linked there (another filesystem), the aux files and the index."""
    device = staging.stat().st_dev
    written = 0
    for shard in plan:
        if shard.reuse is None:
            written += shard.data_bytes + HEADER_ALLOWANCE
        elif shard.reuse.stat().st_dev != device:
            written += shard.reuse.stat().st_size
    return written + sum(path.stat().st_size for path in aux) + HEADER_ALLOWANCE


def _report(origin: str, sizes: Mapping[str, int], dst_dir: Path, detection: Detection, plan: Sequence[PlannedShard],
            max_shard_bytes: int, reused_whole: Any, notes: Any, verification: dict[str, Any]) -> dict[str, Any]:
    """The consolidation report export.json carries: source files, detection, output and verification."""
    return {
        "status": "completed",
        "format": detection.format,
        "source": {
            "dir": origin,
            "kind": detection.source,
            "root": detection.root,
            "files": [{"path": p, "size": sizes[p]} for p in sorted(sizes)],
        },
        "detection": detection.to_dict(),
        "output": {
            "dir": str(dst_dir),
            "weights": [s.name for s in plan],
            "sharded": len(plan) > 1,
            "max_shard_bytes": max_shard_bytes,
            "reused_whole": reused_whole,
        },
        "files": verification["files"],
        "parameter_count": verification["parameter_count"],
        "tensor_count": verification["tensor_count"],
        "total_size": verification["total_size"],
        "notes": notes,
        "verification": {k: v for k, v in verification.items() if k != "files"},
    }


def _aux_sources(aux_dir: Path) -> list[Path]:
    if not aux_dir.is_dir():
        raise RlkeepError(f"{aux_dir}: missing; config.json and the tokenizer are expected there")
    names = {p.name for p in aux_dir.iterdir() if p.is_file()}
    if "config.json" not in names:
        raise RlkeepError(f"{aux_dir / 'config.json'}: missing; a model without its config cannot be loaded")
    if not has_tokenizer(names):
        raise RlkeepError(f"{aux_dir}: no tokenizer ({TOKENIZER_REQUIREMENT})")
    chosen = [aux_dir / n for n in sorted(names) if n in CONFIG_FILES or n in TOKENIZER_FILES
              or REMOTE_CODE_FILE.fullmatch(n)]
    # Checked here too so a bad source file is named, not its copy in the temp dir.
    problems = [architectures_problem(aux_dir / "config.json")]
    problems += [json_problem(path) for path in chosen if path.suffix == ".json" and path.name != "config.json"]
    problems = [p for p in problems if p]
    if problems:
        raise RlkeepError("; ".join(problems))
    return chosen
