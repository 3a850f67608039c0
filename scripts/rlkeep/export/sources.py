"""Sources: where each output tensor's bytes come from (safetensors inputs as file byte ranges)."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.detect import Detection
from rlkeep.export.layout import INDEX_NAME, SINGLE_WEIGHTS
from rlkeep.export.safetensors_header import numel, read_safetensors_header


@dataclass(frozen=True)
class FileRange:
    path: Path
    offset: int
    length: int


@dataclass(frozen=True)
class StoreRange:
    """Bytes read from an object of the store as they are written: never a local copy first."""
    store: Any  # rlkeep.storage.Store
    key: str
    offset: int
    length: int


BytesPiece = FileRange | StoreRange | Callable[[], memoryview]


@dataclass(frozen=True)
class SourceTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    pieces: tuple[BytesPiece, ...]  # concatenated in order they are the tensor's bytes
    origin: Path | None = None  # the safetensors file holding it, when it comes from one


@dataclass
class SourceModel:
    tensors: list[SourceTensor]
    aux_dir: Path  # config.json, tokenizer ... live here
    # safetensors file -> its tensor names in data order (a planned shard equal to one is reused)
    whole_files: dict[Path, tuple[str, ...]]
    files: list[Path]  # every source file read, for provenance
    notes: list[str]
    keepalive: list[Any]


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise RlkeepError(f"{path}: cannot read: {error.strerror or error}") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RlkeepError(f"{path}: not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise RlkeepError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def safetensors_source(root: Path, detection: Detection) -> SourceModel:
    notes: list[str] = []
    if detection.format == "hf-single":
        shard_paths = [root / SINGLE_WEIGHTS]
        index_map: dict[str, str] | None = None
        files = list(shard_paths)
    else:
        index_path = root / INDEX_NAME
        index = read_json_object(index_path)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise RlkeepError(f"{index_path}: weight_map must map tensor names to shard file names")
        if not isinstance(index.get("metadata"), dict):
            raise RlkeepError(f"{index_path}: no metadata object (transformers refuses such an index)")
        index_map = weight_map
        names = sorted(set(weight_map.values()))
        for name in names:
            if "/" in name or name in ("", ".", ".."):
                raise RlkeepError(f"{index_path}: weight_map names {name!r}, not a file beside the index")
            if not (root / name).is_file():
                raise RlkeepError(f"{root / name}: shard named by {index_path} is missing")
        shard_paths = [root / name for name in names]
        files = [index_path] + shard_paths
    headers = [read_safetensors_header(path) for path in shard_paths]
    seen: dict[str, Path] = {}
    tensors: list[SourceTensor] = []
    for header in headers:
        for entry in header.tensors:
            if entry.name in seen:
                raise RlkeepError(f"{header.path}: tensor {entry.name!r} is also in {seen[entry.name]} "
                                  "(duplicated across shards)")
            seen[entry.name] = header.path
            piece = FileRange(header.path, header.data_start + entry.start, entry.nbytes)
            tensors.append(SourceTensor(entry.name, entry.dtype, entry.shape, entry.nbytes, (piece,), header.path))
    if index_map is not None:
        index_path = root / INDEX_NAME
        unlisted = sorted(name for name in seen if name not in index_map)
        wrong = sorted(name for name, path in seen.items() if name in index_map and index_map[name] != path.name)
        absent = sorted(name for name in index_map if name not in seen)
        problems = []
        if absent:
            problems.append(f"tensor(s) named by the index but in no shard: {few(absent)}")
        if wrong:
            problems.append(f"tensor(s) in a different shard than the index says: {few(wrong)}")
        if unlisted:
            problems.append(f"tensor(s) in shards but not in the index: {few(unlisted)}")
        if problems:
            raise RlkeepError(f"{index_path}: " + "; ".join(problems))
        declared = index["metadata"].get("total_size")
        data_bytes = sum(t.nbytes for t in tensors)
        parameters = sum(numel(t.shape) for t in tensors)
        if declared != data_bytes:
            why = " (the parameter count: verl's merge bug)" if declared == parameters else ""
            notes.append(f"source {index_path.name} metadata.total_size {declared!r} is not the {data_bytes} "
                         f"data bytes{why}; the output index is rewritten")
    whole = {header.path: tuple(e.name for e in header.tensors) for header in headers}
    return SourceModel(tensors, root, whole, files, notes, [])


def few(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
