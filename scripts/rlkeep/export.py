"""Export: detect a checkpoint's format, consolidate it into a flat model folder, verify it.

A training checkpoint is not a publishable model until its export is verified, and a folder
whose weights sit under ``policy/`` or ``huggingface/`` is not the flat model. This module:

1. ``detect_format`` / ``choose_source``: decide from a listing (relative path -> size, e.g. a
   store listing before any download) what a step directory holds, which files prove it and
   exactly which files consolidation needs (never optimizer states, extra_state or data.pt).
2. ``consolidate``: stream the weights tensor by tensor into one flat folder (safetensors,
   sharded with a transformers index above ``max_shard_bytes``), plus config and tokenizer.
   A sharded export whose shards all fit keeps its sharding: files already in final form are
   hard-linked, never rewritten. Otherwise safetensors inputs are copied as byte ranges in the
   kernel (copy_file_range). FSDP rank shards (torch pickles of DTensor Shard(0) pieces)
   are concatenated along dim 0, which for row-major tensors is plain byte concatenation.
   The folder is built in a sibling temp dir, verified, fsynced, then renamed into place.
3. ``verify_model``: every check a downstream reader relies on, all problems reported at once.

Megatron dist-checkpoints and DeepSpeed ZeRO partitions are refused with the export job they
need: remapping their tensors by hand here would be a guess.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import logging
import math
import os
import re
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.hashing import hash_range, sha256_file
from rlkeep.jsonio import dumps
from rlkeep.tokenizer import TOKENIZER_FILES, TOKENIZER_REQUIREMENT, has_tokenizer

log = logging.getLogger(__name__)

FORMATS = ("hf-single", "hf-sharded", "fsdp", "megatron", "deepspeed", "unknown")
SINGLE_WEIGHTS = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_NAME = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
RANK_FILE = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9
TORCH_INSTALL_HINT = "pip install -e .[torch]"

# Remote-code models ship their classes next to config.json; they are part of the model folder.
REMOTE_CODE_FILE = re.compile(r"(?:configuration|modeling|tokenization)_[A-Za-z0-9_]+\.py")
CONFIG_FILES = ("config.json", "generation_config.json")
LEFTOVER_EXPORT_PREFIXES = (".tmp-hf-export-", ".old-hf-export-")

# safetensors dtype -> bytes per element
DTYPE_BYTES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
    "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8,
}
# torch / numpy dtype names -> safetensors dtype
_DTYPE_ALIASES = {"float64": "F64", "double": "F64", "float32": "F32", "float": "F32", "float16": "F16",
                  "half": "F16", "bfloat16": "BF16", "int64": "I64", "long": "I64", "int32": "I32", "int": "I32",
                  "int16": "I16", "short": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16", "uint32": "U32",
                  "uint64": "U64", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
                  "float8_e8m0fnu": "F8_E8M0", "complex64": "C64"}
MAX_HEADER_BYTES = 100_000_000  # the safetensors reader's HeaderTooLarge limit
COPY_CHUNK_BYTES = 64 << 20  # granularity of progress for the trailing hasher
FLUSH_EVERY_BYTES = 256 << 20  # start writeback of a shard being written every this many bytes
HASH_BUFFER_BYTES = 8 << 20

MEGATRON_EXPORT_JOB = (
    "a Megatron dist-checkpoint (torch_dist) holds tensor/pipeline-parallel shards under Megatron names; "
    "rlkeep does not remap them by hand. Run a Megatron-to-HF export job on the cluster (SkyRL's HF export "
    "with trainer.hf_save_interval, or a Megatron-Bridge export of this checkpoint) and consolidate its "
    "exports/global_step_N/policy/ instead")
DEEPSPEED_EXPORT_JOB = (
    "a legacy DeepSpeed ZeRO checkpoint holds optimizer-partitioned fp32 state; rlkeep does not "
    "reassemble ZeRO partitions. Run an export job with DeepSpeed's policy/zero_to_fp32.py on this "
    "checkpoint, save the result as safetensors in the source dtype next to policy/huggingface/ "
    "config and tokenizer, and consolidate that HF folder instead")


# --------------------------------------------------------------------------------------------
# Detection (pure: works on a listing)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Detection:
    """What a step directory holds. ``root`` is the subdirectory holding the weights ("" = top)."""

    format: str
    root: str
    evidence: list[str]
    needed_files: list[str]
    consolidatable: bool
    reason: str
    source: str = "local"  # which listing: "export" | "ckpt" (choose_source), "local", "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clean_listing(files: Mapping[str, int]) -> dict[str, int]:
    cleaned: dict[str, int] = {}
    for path, size in files.items():
        parts = [part for part in PurePosixPath(str(path).replace("\\", "/")).parts if part not in ("/", ".")]
        if parts:
            cleaned["/".join(parts)] = int(size)
    return cleaned


def _excluded_because(path: str) -> str | None:
    for part in path.split("/")[:-1]:
        if part.startswith(LEFTOVER_EXPORT_PREFIXES):
            return "leftover of an interrupted HF export, never an export"
        if part == "critic":
            return "critic model, not the policy"
    return None


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _by_directory(files: Mapping[str, int]) -> dict[str, dict[str, int]]:
    grouped: dict[str, dict[str, int]] = {}
    for path, size in files.items():
        directory, _, name = path.rpartition("/")
        grouped.setdefault(directory, {})[name] = size
    return grouped


def _aux_files(directory: str, names: Mapping[str, int]) -> list[str]:
    """config, generation config, tokenizer and remote-code files present in one directory."""
    wanted = [name for name in names if name in CONFIG_FILES or name in TOKENIZER_FILES
              or REMOTE_CODE_FILE.fullmatch(name)]
    return sorted(_join(directory, name) for name in wanted)


def _aux_problems(directory: str, names: Mapping[str, int]) -> list[str]:
    problems = []
    if "config.json" not in names:
        problems.append(f"no {_join(directory, 'config.json')}")
    if not has_tokenizer(names):
        problems.append(f"no tokenizer in {directory or '.'}/ ({TOKENIZER_REQUIREMENT})")
    return problems


def _hf_candidate(directory: str, names: Mapping[str, int]) -> Detection | None:
    shards = {name: SHARD_NAME.fullmatch(name) for name in names}
    shards = {name: match for name, match in shards.items() if match}
    if SINGLE_WEIGHTS not in names and INDEX_NAME not in names and not shards:
        return None
    evidence: list[str] = []
    problems: list[str] = []
    if SINGLE_WEIGHTS in names:
        fmt, weight_files = "hf-single", [SINGLE_WEIGHTS]
        evidence.append(f"{_join(directory, SINGLE_WEIGHTS)} ({names[SINGLE_WEIGHTS]} bytes)")
        if INDEX_NAME in names or shards:
            evidence.append(f"{_join(directory, SINGLE_WEIGHTS)} takes precedence over the index/shards "
                            "beside it, as in transformers")
    else:
        fmt, weight_files = "hf-sharded", [INDEX_NAME]
        if INDEX_NAME in names:
            evidence.append(_join(directory, INDEX_NAME))
        else:
            problems.append(f"shards without {_join(directory, INDEX_NAME)}")
        totals = sorted({int(match.group(2)) for match in shards.values()})
        for total in totals:
            expected = {f"model-{k:05d}-of-{total:05d}.safetensors" for k in range(1, total + 1)}
            missing = sorted(expected - set(names))
            if missing:
                problems.append(f"missing shard {', '.join(_join(directory, m) for m in missing)}")
            else:
                weight_files += sorted(expected)
                evidence.append(f"{total} shards {_join(directory, f'model-*-of-{total:05d}.safetensors')}")
        if not totals:
            problems.append(f"{_join(directory, INDEX_NAME)} without any model-*-of-*.safetensors shard")
    for name in weight_files:
        if name != INDEX_NAME and names.get(name, 0) < 8:
            problems.append(f"{_join(directory, name)} is {names.get(name, 0)} bytes (truncated)")
    problems += _aux_problems(directory, names)
    needed = sorted(set(_join(directory, name) for name in weight_files) | set(_aux_files(directory, names)))
    return Detection(fmt, directory, evidence, needed, not problems,
                     "; ".join(problems) if problems else "complete HF export")


def _fsdp_candidate(directory: str, names: Mapping[str, int], grouped: Mapping[str, Mapping[str, int]],
                    files: Mapping[str, int]) -> Detection:
    ranks = [(int(m.group(1)), int(m.group(2)), name) for name in names if (m := RANK_FILE.fullmatch(name))]
    world_sizes = sorted({world for world, _, _ in ranks})
    evidence = [f"{len(ranks)} rank file(s) {_join(directory, 'model_world_size_*_rank_*.pt')}"]
    problems: list[str] = []
    if len(world_sizes) > 1:
        problems.append(f"rank files of several world sizes {world_sizes} in {directory or '.'}/")
    world = world_sizes[-1]
    present = {rank for w, rank, _ in ranks if w == world}
    missing = sorted(set(range(world)) - present)
    extra = sorted(present - set(range(world)))
    if missing:
        problems.append("missing rank file(s) " + ", ".join(
            _join(directory, f"model_world_size_{world}_rank_{r}.pt") for r in missing))
    if extra:
        problems.append(f"rank(s) {extra} outside world size {world}")
    if "fsdp_config.json" in names:
        evidence.append(f"{_join(directory, 'fsdp_config.json')} (world_size checked against {world} rank files)")
    else:
        evidence.append(f"no {_join(directory, 'fsdp_config.json')} (written by SkyRL since PR #124); "
                        f"world size {world} from the file names")
    aux_dir = _join(directory, "huggingface")
    aux_names = grouped.get(aux_dir, {})
    aux_problems = _aux_problems(aux_dir, aux_names)
    if aux_problems:
        problems.append("; ".join(aux_problems) + " (checkpoints before SkyRL PR #124 carry no HF config and "
                        "tokenizer; consolidate an HF export of this step or add them to huggingface/)")
    else:
        evidence.append(f"{aux_dir}/config.json and tokenizer")
    if any(path.startswith(_join(directory, "lora_adapter") + "/") for path in files):
        problems.append(f"{_join(directory, 'lora_adapter')}/ present: a LoRA run; merging adapters into the base "
                        "weights needs a merge job, rlkeep does not do it")
    needed = sorted([_join(directory, name) for w, _, name in ranks if w == world]
                    + ([_join(directory, "fsdp_config.json")] if "fsdp_config.json" in names else [])
                    + _aux_files(aux_dir, aux_names))
    return Detection("fsdp", directory, evidence, needed, not problems,
                     "; ".join(problems) if problems else "FSDP rank shards with HF config and tokenizer")


def _megatron_candidate(directory: str, names: Mapping[str, int]) -> Detection | None:
    distcp = sorted(name for name in names if name.endswith(".distcp"))
    if "metadata.json" not in names or not (distcp or ".metadata" in names or "common.pt" in names):
        return None
    evidence = [_join(directory, "metadata.json")]
    evidence += [_join(directory, name) for name in (".metadata", "common.pt") if name in names]
    if distcp:
        evidence.append(f"{len(distcp)} file(s) {_join(directory, '__*_*.distcp')}")
    return Detection("megatron", directory, evidence, [], False, MEGATRON_EXPORT_JOB)


_DEEPSPEED_STATES = re.compile(r"global_step\d+/(?:zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt")


def _deepspeed_candidate(files: Mapping[str, int]) -> Detection | None:
    for path in sorted(files):
        directory, _, tail = path.rpartition("/")
        parent, _, step_dir = directory.rpartition("/")
        if _DEEPSPEED_STATES.fullmatch(f"{step_dir}/{tail}"):
            evidence = [path]
            evidence += [p for p in (_join(parent, "latest"), _join(parent, "zero_to_fp32.py")) if p in files]
            return Detection("deepspeed", parent, evidence, [], False, DEEPSPEED_EXPORT_JOB)
    return None


def detect_format(files: Mapping[str, int]) -> Detection:
    """Detect the checkpoint format of one step directory from its listing (relative path -> size).

    A complete HF export wins; then FSDP rank shards; Megatron and DeepSpeed are recognised and
    refused with the export job they need. Nothing is downloaded or opened.
    """
    listing = _clean_listing(files)
    excluded = {path: why for path in listing if (why := _excluded_because(path))}
    usable = {path: size for path, size in listing.items() if path not in excluded}
    notes = sorted({f"ignored {path.rsplit('/', 1)[0]}/: {why}" for path, why in excluded.items()})
    grouped = _by_directory(usable)

    hf = [c for directory, names in sorted(grouped.items()) if (c := _hf_candidate(directory, names))]
    fsdp_dirs = [d for d, names in sorted(grouped.items()) if any(RANK_FILE.fullmatch(n) for n in names)]
    fsdp = [_fsdp_candidate(d, grouped[d], grouped, usable) for d in fsdp_dirs]
    megatron = [c for d, names in sorted(grouped.items()) if (c := _megatron_candidate(d, names))]
    deepspeed = _deepspeed_candidate(usable)

    def finish(detection: Detection, extra: Sequence[str] = ()) -> Detection:
        return replace(detection, evidence=detection.evidence + list(extra) + notes)

    complete_hf = [c for c in hf if c.consolidatable]
    if len(complete_hf) > 1:
        roots = ", ".join(f"{c.root or '.'}/" for c in complete_hf)
        return finish(Detection(complete_hf[0].format, complete_hf[0].root, [], [], False,
                                f"several complete HF weight folders ({roots}); name the one to export"))
    if complete_hf:
        return finish(complete_hf[0])
    incomplete = [f"incomplete HF export in {c.root or '.'}/: {c.reason}" for c in hf]
    if len(fsdp) > 1:
        roots = ", ".join(f"{c.root or '.'}/" for c in fsdp)
        return finish(Detection("fsdp", fsdp[0].root, [], [], False,
                                f"FSDP rank files in several folders ({roots}); name the one to export"), incomplete)
    if fsdp:
        return finish(fsdp[0], incomplete)
    if megatron:
        return finish(megatron[0], incomplete)
    if deepspeed:
        return finish(deepspeed, incomplete)
    if hf:
        return finish(hf[0])
    return finish(Detection("unknown", "", [f"{len(usable)} file(s) listed"], [], False,
                            "no HF safetensors export, FSDP rank shards (model_world_size_W_rank_R.pt), Megatron "
                            "dist-checkpoint or DeepSpeed checkpoint found"))


def choose_source(export_files: Mapping[str, int] | None, ckpt_files: Mapping[str, int] | None) -> Detection:
    """Prefer a complete HF export of the step; otherwise the training checkpoint of the step."""
    export = replace(detect_format(export_files), source="export") if export_files else None
    if export is not None and export.consolidatable and export.format.startswith("hf-"):
        return export
    if ckpt_files:
        checkpoint = replace(detect_format(ckpt_files), source="ckpt")
        why = ("no export of this step" if export is None
               else f"export not used ({export.format}): {export.reason}")
        return replace(checkpoint, evidence=checkpoint.evidence + [why])
    if export is not None:
        return replace(export, evidence=export.evidence + ["no checkpoint of this step listed"])
    return Detection("unknown", "", [], [], False, "neither an export nor a checkpoint of this step was listed",
                     source="none")


def list_files(directory: str | os.PathLike[str]) -> dict[str, int]:
    """Relative posix path -> size of every regular file under directory (the local listing)."""
    root = Path(directory)
    if not root.is_dir():
        raise RlkeepError(f"{root}: not a directory")
    listing: dict[str, int] = {}
    for base, _, names in os.walk(root):
        for name in names:
            path = Path(base) / name
            if path.is_file():
                listing[path.relative_to(root).as_posix()] = path.stat().st_size
    return listing


# --------------------------------------------------------------------------------------------
# Safetensors headers
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # offsets relative to the data section, as in the header
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    header_bytes: int
    metadata: dict[str, str]
    tensors: tuple[TensorEntry, ...]  # in data order

    @property
    def data_start(self) -> int:
        return 8 + self.header_bytes

    @property
    def data_bytes(self) -> int:
        return self.tensors[-1].end if self.tensors else 0


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def read_safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Parse and check a safetensors header the way the reference reader does, with its error names."""
    path = Path(path)

    def fail(kind: str, detail: str) -> RlkeepError:
        return RlkeepError(f"{path}: {kind}: {detail}")

    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise fail("HeaderTooSmall", f"file is {size} bytes, shorter than the 8-byte header length")
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > MAX_HEADER_BYTES:
                raise fail("HeaderTooLarge", f"header length {header_bytes} exceeds {MAX_HEADER_BYTES}")
            if 8 + header_bytes > size:
                raise fail("MetadataIncompleteBuffer",
                           f"header length {header_bytes} runs past the end of the {size}-byte file (truncated)")
            raw = handle.read(header_bytes)
    except OSError as error:
        raise RlkeepError(f"{path}: cannot read: {error.strerror or error}") from error
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise fail("InvalidHeaderDeserialization", f"header is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise fail("InvalidHeaderDeserialization", "header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise fail("InvalidHeaderDeserialization", "__metadata__ must map strings to strings")
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"}:
            raise fail("TensorInvalidInfo", f"tensor {name!r}: expected dtype, shape and data_offsets")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in DTYPE_BYTES:
            raise fail("TensorInvalidInfo", f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise fail("TensorInvalidInfo", f"tensor {name!r}: shape {shape!r} is not a list of sizes")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise fail("InvalidOffset", f"tensor {name!r}: data_offsets {offsets!r} are not [start, end]")
        if offsets[1] - offsets[0] != _numel(shape) * DTYPE_BYTES[dtype]:
            raise fail("TensorInvalidInfo", f"tensor {name!r}: data_offsets {offsets} span "
                       f"{offsets[1] - offsets[0]} bytes but {dtype}{shape} needs {_numel(shape) * DTYPE_BYTES[dtype]}")
        entries.append(TensorEntry(name, dtype, tuple(shape), offsets[0], offsets[1]))
    entries.sort(key=lambda e: (e.start, e.end))
    position = 0
    for entry in entries:
        if entry.start != position:
            what = "a gap before" if entry.start > position else "an overlap at"
            raise fail("InvalidOffset", f"tensor {entry.name!r} starts at {entry.start}: {what} byte {position} "
                       "(offsets must be contiguous from 0)")
        position = entry.end
    if 8 + header_bytes + position != size:
        state = "truncated" if 8 + header_bytes + position > size else "trailing bytes"
        raise fail("MetadataIncompleteBuffer", f"header covers {8 + header_bytes + position} bytes but the file "
                   f"has {size} ({state})")
    return SafetensorsHeader(path, header_bytes, dict(metadata), tuple(entries))


def encode_safetensors_header(tensors: Sequence[tuple[str, str, Sequence[int], int]]) -> bytes:
    """8-byte length + JSON header for (name, dtype, shape, nbytes) laid out back to back."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    position = 0
    for name, dtype, shape, nbytes in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [position, position + nbytes]}
        position += nbytes
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body += b" " * (-len(body) % 8)  # the reference writer pads to 8-byte alignment with spaces
    return struct.pack("<Q", len(body)) + body


# --------------------------------------------------------------------------------------------
# Sources: where each output tensor's bytes come from
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileRange:
    path: Path
    offset: int
    length: int


BytesPiece = FileRange | Callable[[], memoryview]


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


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise RlkeepError(f"{path}: cannot read: {error.strerror or error}") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RlkeepError(f"{path}: not valid JSON: {error}") from error
    if not isinstance(value, dict):
        raise RlkeepError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def _safetensors_source(root: Path, detection: Detection) -> SourceModel:
    notes: list[str] = []
    if detection.format == "hf-single":
        shard_paths = [root / SINGLE_WEIGHTS]
        index_map: dict[str, str] | None = None
        files = list(shard_paths)
    else:
        index_path = root / INDEX_NAME
        index = _read_json_object(index_path)
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
            problems.append(f"tensor(s) named by the index but in no shard: {_few(absent)}")
        if wrong:
            problems.append(f"tensor(s) in a different shard than the index says: {_few(wrong)}")
        if unlisted:
            problems.append(f"tensor(s) in shards but not in the index: {_few(unlisted)}")
        if problems:
            raise RlkeepError(f"{index_path}: " + "; ".join(problems))
        declared = index["metadata"].get("total_size")
        data_bytes = sum(t.nbytes for t in tensors)
        parameters = sum(_numel(t.shape) for t in tensors)
        if declared != data_bytes:
            why = " (the parameter count: verl's merge bug)" if declared == parameters else ""
            notes.append(f"source {index_path.name} metadata.total_size {declared!r} is not the {data_bytes} "
                         f"data bytes{why}; the output index is rewritten")
    whole = {header.path: tuple(e.name for e in header.tensors) for header in headers}
    return SourceModel(tensors, root, whole, files, notes, [])


def _few(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _require_torch() -> Any:
    try:
        import torch
    except ImportError as error:
        raise RlkeepError("FSDP rank shards are torch pickles and need torch, which is not installed: "
                          f"install the optional extra with `{TORCH_INSTALL_HINT}` (CPU build torch 2.13.0)") from error
    return torch


@contextmanager
def _quiet_device_mesh_unpickling() -> Iterator[None]:
    # Unpickling a DeviceMesh outside a process group logs a torch.compile warning that does not
    # concern reading tensors.
    logger = logging.getLogger("torch.distributed.device_mesh")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _torch_dtype_names(torch: Any) -> dict[Any, str]:
    return {getattr(torch, attr): name for attr, name in _DTYPE_ALIASES.items()
            if isinstance(getattr(torch, attr, None), torch.dtype)}


def _tensor_bytes(tensor: Any) -> memoryview:
    import torch

    flat = tensor.contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def _fsdp_source(src_dir: Path, detection: Detection) -> SourceModel:
    torch = _require_torch()
    root = src_dir / detection.root
    found = sorted((int(m.group(1)), int(m.group(2)), root / m.group(0))
                   for p in root.iterdir() if (m := RANK_FILE.fullmatch(p.name)))
    if not found:
        raise RlkeepError(f"{root}: no model_world_size_W_rank_R.pt rank files")
    world_sizes = sorted({w for w, _, _ in found})
    if len(world_sizes) > 1:
        raise RlkeepError(f"{root}: rank files of several world sizes {world_sizes}")
    world = world_sizes[0]
    ranks = [rank for _, rank, _ in found]
    config_path = root / "fsdp_config.json"
    if config_path.exists():
        declared = _read_json_object(config_path).get("world_size")
        if type(declared) is not int or declared < 1:
            raise RlkeepError(f"{config_path}: world_size {declared!r} is not a positive integer")
        if declared != world or len(ranks) != declared:
            raise RlkeepError(f"{config_path}: world_size {declared} but {len(ranks)} rank file(s) of world size "
                              f"{world} in {root} (ranks {ranks}): the shard count does not match")
    if ranks != list(range(world)):
        missing = sorted(set(range(world)) - set(ranks))
        raise RlkeepError(f"{root}: world size {world} needs ranks 0..{world - 1}; missing rank file(s) "
                          + ", ".join(f"model_world_size_{world}_rank_{r}.pt" for r in missing))
    rank_paths = [path for _, _, path in found]
    states = []
    with _quiet_device_mesh_unpickling():
        for path in rank_paths:
            try:
                state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
            except Exception as error:  # a corrupt zip, a truncated pickle, a missing class...
                raise RlkeepError(f"{path}: torch.load failed: {type(error).__name__}: {error}") from error
            if not isinstance(state, Mapping):
                raise RlkeepError(f"{path}: expected a state dict, found {type(state).__name__}")
            states.append(state)
    names = list(states[0].keys())
    for path, state in zip(rank_paths[1:], states[1:]):
        if set(state.keys()) != set(names):
            differ = sorted(set(state.keys()) ^ set(names))
            raise RlkeepError(f"{path}: tensor names differ from {rank_paths[0].name}: {_few(differ)}")
    lora = [name for name in names if "lora_" in name]
    if lora:
        raise RlkeepError(f"{rank_paths[0]}: LoRA tensors {_few(lora)}: merging adapters into the base weights "
                          "needs a merge job; rlkeep does not consolidate LoRA checkpoints")
    dtype_names = _torch_dtype_names(torch)
    tensors = [_fsdp_tensor(name, rank_paths, [state[name] for state in states], torch, dtype_names)
               for name in names]
    aux_dir = root / "huggingface"
    files = sorted(rank_paths + ([config_path] if config_path.exists() else []))
    notes = [] if config_path.exists() else [f"no {config_path.name}: world size {world} from the file names"]
    return SourceModel(tensors, aux_dir, {}, files, notes, states)


def _fsdp_tensor(name: str, paths: Sequence[Path], values: Sequence[Any], torch: Any,
                 dtype_names: Mapping[Any, str]) -> SourceTensor:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch build without distributed cannot have written DTensors
        DTensor = None  # noqa: N806
    world = len(values)
    locals_: list[Any] = [None] * world
    if DTensor is not None and isinstance(values[0], DTensor):
        global_shape, dtype = tuple(values[0].shape), values[0].dtype
        for rank, (path, value) in enumerate(zip(paths, values)):
            if not isinstance(value, DTensor):
                raise RlkeepError(f"{path}: tensor {name!r} is a {type(value).__name__}, not a DTensor as in rank 0")
            placements = tuple(value.placements)
            if any(p.is_partial() for p in placements):
                raise RlkeepError(f"{path}: tensor {name!r} has placement {placements}: a Partial placement holds "
                                  "unreduced partial sums, not a slice; it cannot be consolidated by concatenation")
            if len(placements) != 1 or not placements[0].is_shard(0):
                raise RlkeepError(f"{path}: tensor {name!r} has placements {placements} on a "
                                  f"{value.device_mesh.ndim}-D mesh; only FSDP's Shard(0) on a 1-D mesh is supported")
            mesh = [int(r) for r in value.device_mesh.mesh.flatten().tolist()]
            if len(mesh) != world or rank not in mesh:
                raise RlkeepError(f"{path}: tensor {name!r} lives on a mesh of ranks {mesh}, not the {world} "
                                  "rank files present")
            if tuple(value.shape) != global_shape or value.dtype != dtype:
                raise RlkeepError(f"{path}: tensor {name!r} is {value.dtype}{list(value.shape)} but rank 0 says "
                                  f"{dtype}{list(global_shape)}")
            locals_[mesh.index(rank)] = value.to_local()
    else:
        for path, value in zip(paths, values):
            if not isinstance(value, torch.Tensor) or (DTensor is not None and isinstance(value, DTensor)):
                raise RlkeepError(f"{path}: {name!r} is a {type(value).__name__}, not a tensor")
            if value.dim() == 0:
                raise RlkeepError(f"{path}: tensor {name!r} is a scalar; plain rank shards must split along dim 0")
        locals_ = list(values)
        dtype = values[0].dtype
        global_shape = (sum(v.shape[0] for v in values), *values[0].shape[1:])
    for path, local in zip(paths, locals_):
        if local.dtype != dtype or tuple(local.shape[1:]) != tuple(global_shape[1:]) or local.device.type != "cpu":
            raise RlkeepError(f"{path}: tensor {name!r} shard is {local.dtype}{list(local.shape)} on {local.device}, "
                              f"which does not concatenate along dim 0 into {dtype}{list(global_shape)}")
    if sum(local.shape[0] for local in locals_) != global_shape[0]:
        raise RlkeepError(f"{paths[0].parent}: tensor {name!r}: rank shards have "
                          f"{[local.shape[0] for local in locals_]} rows, not the {global_shape[0]} of {list(global_shape)}")
    if dtype not in dtype_names:
        raise RlkeepError(f"{paths[0]}: tensor {name!r} has dtype {dtype}, which safetensors cannot store")
    dtype_name = dtype_names[dtype]
    nbytes = _numel(global_shape) * DTYPE_BYTES[dtype_name]
    pieces = tuple((lambda local=local: _tensor_bytes(local)) for local in locals_ if local.numel() > 0)
    return SourceTensor(name, dtype_name, tuple(int(d) for d in global_shape), nbytes, pieces)


# --------------------------------------------------------------------------------------------
# Planning and writing
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlannedShard:
    name: str
    tensors: tuple[SourceTensor, ...]
    reuse: Path | None  # an input file already in exactly this form: linked or copied whole

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def plan_shards(tensors: Sequence[SourceTensor], max_shard_bytes: int,
                whole_files: Mapping[Path, tuple[str, ...]] | None = None) -> list[PlannedShard]:
    """Group tensors into output shards.

    A safetensors source whose every file fits max_shard_bytes keeps its own sharding: each file
    is already in final form and is linked (or copied) whole, never rewritten, and the published
    shards hash the same as the training export's. Otherwise tensors are packed greedily in source
    order, transformers-style: a shard closes before it would exceed max_shard_bytes of tensor
    data (a single larger tensor gets a shard of its own).
    """
    whole_files = whole_files or {}
    groups = _source_groups(tensors, max_shard_bytes, whole_files) or _packed_groups(tensors, max_shard_bytes)
    if not groups:
        raise RlkeepError("the source checkpoint holds no tensors")
    planned = []
    for number, group in enumerate(groups, start=1):
        name = SINGLE_WEIGHTS if len(groups) == 1 else f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        origin = group[0].origin
        same = origin is not None and whole_files.get(origin) == tuple(t.name for t in group)
        planned.append(PlannedShard(name, tuple(group), origin if same else None))
    return planned


def _source_groups(tensors: Sequence[SourceTensor], max_shard_bytes: int,
                   whole_files: Mapping[Path, tuple[str, ...]]) -> list[list[SourceTensor]] | None:
    """One group per source file, when the source files are exactly the tensors and each fits."""
    if not tensors or not whole_files:
        return None
    groups: dict[Path, list[SourceTensor]] = {}
    for tensor in tensors:
        if tensor.origin is None or tensor.origin not in whole_files:
            return None
        groups.setdefault(tensor.origin, []).append(tensor)
    if set(groups) != set(whole_files):
        return None
    for origin, group in groups.items():
        if tuple(t.name for t in group) != whole_files[origin] or sum(t.nbytes for t in group) > max_shard_bytes:
            return None
    return list(groups.values())


def _packed_groups(tensors: Sequence[SourceTensor], max_shard_bytes: int) -> list[list[SourceTensor]]:
    groups: list[list[SourceTensor]] = []
    size = 0
    for tensor in tensors:
        if not groups or (size + tensor.nbytes > max_shard_bytes and groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(tensor)
        size += tensor.nbytes
    return groups


class _TrailingHasher:
    """sha256 of a file read back from the page cache while it is written, trailing the writer,
    so the digest is of the bytes on disk and hashing overlaps the copy on another core."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cond = threading.Condition()
        self._written = 0
        self._closed = False

    def advance(self, written: int) -> None:
        with self._cond:
            self._written = written
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def run(self) -> str:
        digest = hashlib.sha256()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            position = 0
            while True:
                with self._cond:
                    while self._written <= position and not self._closed:
                        self._cond.wait()
                    limit, closed = self._written, self._closed
                if os.fstat(fd).st_size < limit:
                    raise RlkeepError(f"{self.path}: shorter than the {limit} bytes written")
                hash_range(digest, fd, position, limit)
                position = limit
                if closed and position >= self._written:
                    return digest.hexdigest()
        finally:
            os.close(fd)


def _copy_range(src_fd: int, dst_fd: int, offset: int, length: int, dst_offset: int, src_path: Path) -> None:
    """Copy bytes between files in the kernel; plain pread/pwrite where copy_file_range is refused."""
    done = 0
    use_kernel = hasattr(os, "copy_file_range")
    while done < length:
        want = length - done
        if use_kernel:
            try:
                count = os.copy_file_range(src_fd, dst_fd, want, offset + done, dst_offset + done)
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                    raise
                use_kernel = False
                continue
        else:
            chunk = os.pread(src_fd, min(want, HASH_BUFFER_BYTES), offset + done)
            count = len(chunk)
            _pwrite_all(dst_fd, memoryview(chunk), dst_offset + done)
        if count == 0:
            raise RlkeepError(f"{src_path}: ends at byte {offset + done}, before the {length} bytes its header "
                              f"promises from {offset} (truncated while reading)")
        done += count


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    data = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    while len(data):
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


class _Writer:
    """Writes planned shards into a folder. Digests come from trailing hashers on a thread pool;
    a single syncer thread flushes each shard to disk while the next one is copied."""

    def __init__(self, out_dir: Path, pool: ThreadPoolExecutor) -> None:
        self.out_dir = out_dir
        self.pool = pool
        self.digests: dict[str, Future[str]] = {}
        self.reused: list[str] = []
        self._src_fds: dict[Path, int] = {}
        self._hashers: list[_TrailingHasher] = []
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlkeep-fsync")
        self._syncs: list[Future[None]] = []

    def finish(self) -> None:
        """Wait until every shard is on disk (raises the first fsync error)."""
        for future in self._syncs:
            future.result()

    def close(self) -> None:
        for hasher in self._hashers:
            hasher.close()
        self._syncer.shutdown(wait=True)
        for fd in self._src_fds.values():
            os.close(fd)
        self._src_fds.clear()

    def _src_fd(self, path: Path) -> int:
        if path not in self._src_fds:
            self._src_fds[path] = os.open(path, os.O_RDONLY)
        return self._src_fds[path]

    def _hash_behind(self, path: Path) -> _TrailingHasher:
        hasher = _TrailingHasher(path)
        self._hashers.append(hasher)
        self.digests[path.name] = self.pool.submit(hasher.run)
        return hasher

    def write_shard(self, shard: PlannedShard) -> None:
        target = self.out_dir / shard.name
        if shard.reuse is not None:
            _link_or_copy(shard.reuse, target)
            self.reused.append(f"{shard.name} <- {shard.reuse}")
            self.digests[shard.name] = self.pool.submit(sha256_file, target)  # complete: nothing to trail
            self._syncs.append(self._syncer.submit(_fsync_path, target))  # a link shares the source's pages
            return
        header = encode_safetensors_header([(t.name, t.dtype, t.shape, t.nbytes) for t in shard.tensors])
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            hasher = self._hash_behind(target)
            _pwrite_all(fd, memoryview(header), 0)
            position = len(header)
            hasher.advance(position)
            flushed_at, flushing = 0, None
            for tensor in shard.tensors:
                start = position
                for piece in tensor.pieces:
                    if isinstance(piece, FileRange):
                        for offset in range(0, piece.length, COPY_CHUNK_BYTES):
                            length = min(COPY_CHUNK_BYTES, piece.length - offset)
                            _copy_range(self._src_fd(piece.path), fd, piece.offset + offset, length, position,
                                        piece.path)
                            position += length
                            hasher.advance(position)
                    else:
                        data = piece()
                        _pwrite_all(fd, data, position)
                        position += data.nbytes
                        hasher.advance(position)
                    # Start writeback early so the disk works while we copy, instead of at the end.
                    if position - flushed_at >= FLUSH_EVERY_BYTES and (flushing is None or flushing.done()):
                        flushing, flushed_at = self._syncer.submit(os.fdatasync, fd), position
                if position - start != tensor.nbytes:
                    raise RlkeepError(f"tensor {tensor.name!r}: wrote {position - start} bytes, expected "
                                      f"{tensor.nbytes} for {tensor.dtype}{list(tensor.shape)}")
            hasher.close()
        except BaseException:
            self._syncs.append(self._syncer.submit(os.close, fd))
            raise
        self._syncs.append(self._syncer.submit(_fsync_and_close, fd))

    def write_small(self, name: str, data: bytes) -> None:
        fd = os.open(self.out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _pwrite_all(fd, memoryview(data), 0)
        except BaseException:
            os.close(fd)
            raise
        self._syncs.append(self._syncer.submit(_fsync_and_close, fd))
        self.digests[name] = _done(hashlib.sha256(data).hexdigest())


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _done(value: str) -> Future[str]:
    future: Future[str] = Future()
    future.set_result(value)
    return future


def _fsync_path(path: Path) -> None:
    _fsync_and_close(os.open(path, os.O_RDONLY))


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)), thread_name_prefix="rlkeep-sha256")


# --------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------

Expected = Mapping[str, tuple[str, Sequence[int]]]


def verify_model(model_dir: str | os.PathLike[str], *, expected: Expected | None = None) -> dict[str, Any]:
    """Check a flat model folder; raise RlkeepError listing every problem, else return the evidence.

    expected: tensor name -> (dtype, shape) of the source checkpoint; dtype as safetensors names it
    ("BF16") or a torch/numpy dtype.
    """
    with _hash_pool() as pool:
        return _verify(Path(model_dir), expected, {}, pool)


@dataclass
class _Findings:
    """What the checks of one model folder found: problems (all reported at once) and passed checks."""

    model_dir: Path
    problems: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)


@dataclass
class _WeightLayout:
    weights: list[str]
    index_map: dict[str, str] | None = None
    declared_total: Any = None


@dataclass
class _Tensors:
    found: dict[str, tuple[str, tuple[int, ...], str]]  # name -> (dtype, shape, weight file)
    data_bytes: int
    headers_ok: bool

    @property
    def parameter_count(self) -> int:
        return sum(_numel(shape) for _, shape, _ in self.found.values())


def _verify(model_dir: Path, expected: Expected | None, digests: Mapping[str, Future[str]],
            pool: ThreadPoolExecutor) -> dict[str, Any]:
    if not model_dir.is_dir():
        raise RlkeepError(f"{model_dir}: not a directory")
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    pending = {p.relative_to(model_dir).as_posix(): digests.get(p.relative_to(model_dir).as_posix())
               or pool.submit(sha256_file, p) for p in files}
    findings = _Findings(model_dir)
    top = {p.name for p in model_dir.iterdir() if p.is_file()}
    layout = _check_weight_layout(findings, top, files)
    tensors = _check_headers(findings, layout.weights)
    if layout.index_map is not None and tensors.headers_ok:
        _check_index_coverage(findings, layout, tensors)
    if expected is not None and tensors.headers_ok:
        _check_against_source(findings, expected, tensors)
    architectures = _check_config(findings)
    tokenizer_files = _check_tokenizer(findings, top)
    _check_other_json(findings, top)
    file_report = _collect_digests(findings, pending)
    problems = findings.problems
    if problems:
        raise RlkeepError(f"{model_dir} is not a verified flat model ({len(problems)} problem"
                          f"{'s' if len(problems) != 1 else ''}):\n  - " + "\n  - ".join(problems))
    dtypes: dict[str, int] = {}
    for dtype, _, _ in tensors.found.values():
        dtypes[dtype] = dtypes.get(dtype, 0) + 1
    findings.checks.append("sha256 and size of every file")
    return {
        "dir": str(model_dir),
        "weights": layout.weights,
        "sharded": layout.index_map is not None,
        "tensor_count": len(tensors.found),
        "parameter_count": tensors.parameter_count,
        "total_size": tensors.data_bytes,
        "dtypes": dtypes,
        "architectures": architectures,
        "tokenizer_files": tokenizer_files,
        "files": file_report,
        "checks": findings.checks,
        "compared_with_source": expected is not None,
    }


def _check_weight_layout(findings: _Findings, top: set[str], files: Sequence[Path]) -> _WeightLayout:
    """One layout at the top level: model.safetensors alone, or an index and its shards."""
    model_dir, problems = findings.model_dir, findings.problems
    if SINGLE_WEIGHTS in top and INDEX_NAME in top:
        problems.append(f"{model_dir}: both {SINGLE_WEIGHTS} and {INDEX_NAME}; a flat model has one layout")
    if SINGLE_WEIGHTS in top:
        stray = sorted(n for n in top if SHARD_NAME.fullmatch(n))
        if stray:
            problems.append(f"{model_dir}: stray shard file(s) beside {SINGLE_WEIGHTS}: {_few(stray)}")
        return _WeightLayout([SINGLE_WEIGHTS])
    if INDEX_NAME in top:
        index_map, declared_total, weights = _check_index(model_dir, top, problems)
        return _WeightLayout(weights, index_map, declared_total)
    nested = sorted({p.relative_to(model_dir).parent.as_posix() for p in files if p.suffix == ".safetensors"})
    if nested:
        problems.append(f"{model_dir}: no top-level weights; safetensors are nested under "
                        f"{', '.join(d + '/' for d in nested)}: an intermediate, not the flat model "
                        "(run `rlkeep consolidate` to flatten it)")
    else:
        problems.append(f"{model_dir}: no {SINGLE_WEIGHTS} or {INDEX_NAME}")
    return _WeightLayout([])


def _check_headers(findings: _Findings, weights: Sequence[str]) -> _Tensors:
    """Every weight file's header parses, the safetensors reader opens it, no tensor is in two files."""
    tensors = _Tensors(found={}, data_bytes=0, headers_ok=bool(weights))
    for name in weights:
        path = findings.model_dir / name
        if not path.is_file():
            continue  # reported by the index check
        try:
            header = read_safetensors_header(path)
        except RlkeepError as error:
            findings.problems.append(str(error))
            tensors.headers_ok = False
            continue
        reader_problem = _reference_reader_problem(path)
        if reader_problem:
            findings.problems.append(reader_problem)
            tensors.headers_ok = False
        for entry in header.tensors:
            if entry.name in tensors.found:
                findings.problems.append(f"{path}: tensor {entry.name!r} is also in {tensors.found[entry.name][2]} "
                                         "(duplicated across shards)")
            else:
                tensors.found[entry.name] = (entry.dtype, entry.shape, name)
        tensors.data_bytes += header.data_bytes
    if tensors.headers_ok:
        findings.checks.append("every weight file's header parses; offsets contiguous, in bounds, covering the "
                               "file; the safetensors reader opens it")
    return tensors


def _check_index_coverage(findings: _Findings, layout: _WeightLayout, tensors: _Tensors) -> None:
    """The index maps every tensor to the shard holding it, and total_size is the data bytes."""
    index_path = findings.model_dir / INDEX_NAME
    index_map, declared_total, found = layout.index_map or {}, layout.declared_total, tensors.found
    missing = sorted(t for t in index_map if t not in found)
    misplaced = sorted(t for t, (_, _, shard) in found.items() if t in index_map and index_map[t] != shard)
    unlisted = sorted(t for t in found if t not in index_map)
    for label, names in (("named by the index but in no shard", missing),
                         ("in a different shard than the index says", misplaced),
                         ("in a shard but not in the index", unlisted)):
        if names:
            findings.problems.append(f"{index_path}: tensor(s) {label}: {_few(names)}")
    if declared_total != tensors.data_bytes:
        if declared_total == tensors.parameter_count:
            findings.problems.append(f"{index_path}: metadata.total_size {declared_total} is the parameter count, "
                                     f"not the {tensors.data_bytes} bytes of tensor data (verl's merge bug)")
        else:
            findings.problems.append(f"{index_path}: metadata.total_size {declared_total!r} is not the "
                                     f"{tensors.data_bytes} bytes of tensor data")
    if not (missing or misplaced or unlisted) and declared_total == tensors.data_bytes:
        findings.checks.append("index: every tensor mapped to the shard holding it; total_size is the data bytes")


def _check_against_source(findings: _Findings, expected: Expected, tensors: _Tensors) -> None:
    """Tensor names, dtypes and shapes are the source checkpoint's."""
    model_dir, found = findings.model_dir, tensors.found
    wanted = {name: (_dtype_name(dtype), tuple(shape)) for name, (dtype, shape) in expected.items()}
    missing = sorted(set(wanted) - set(found))
    extra = sorted(set(found) - set(wanted))
    differ = sorted(f"{n} is {found[n][0]}{list(found[n][1])}, source {wanted[n][0]}{list(wanted[n][1])}"
                    for n in set(wanted) & set(found)
                    if (found[n][0], tuple(found[n][1])) != (wanted[n][0], tuple(wanted[n][1])))
    if missing:
        findings.problems.append(f"{model_dir}: tensor(s) of the source missing from the model: {_few(missing)}")
    if extra:
        findings.problems.append(f"{model_dir}: tensor(s) not in the source: {_few(extra)}")
    if differ:
        findings.problems.append(f"{model_dir}: dtype/shape differ from the source: {'; '.join(differ[:8])}")
    if not (missing or extra or differ):
        findings.checks.append(f"all {len(wanted)} tensor names, dtypes and shapes match the source")


def _check_config(findings: _Findings) -> list[str]:
    """config.json parses and names the model's architectures; returns them."""
    config_path = findings.model_dir / "config.json"
    if not config_path.is_file():
        findings.problems.append(f"{config_path}: missing")
    elif problem := _architectures_problem(config_path):
        findings.problems.append(problem)
    else:
        architectures = _read_json_object(config_path)["architectures"]
        findings.checks.append(f"config.json parses and names architectures {architectures}")
        return architectures
    return []


def _check_tokenizer(findings: _Findings, top: set[str]) -> list[str]:
    """A loadable vocabulary is present (rlkeep.tokenizer); returns the tokenizer files."""
    tokenizer_files = sorted(n for n in top if n in TOKENIZER_FILES)
    if has_tokenizer(top):
        findings.checks.append(f"tokenizer present: {', '.join(tokenizer_files)}")
    else:
        findings.problems.append(f"{findings.model_dir}: no tokenizer ({TOKENIZER_REQUIREMENT})")
    return tokenizer_files


def _check_other_json(findings: _Findings, top: set[str]) -> None:
    """Every other top-level JSON file (generation config, tokenizer config, ...) parses."""
    for name in sorted(n for n in top if n.endswith(".json") and n not in (INDEX_NAME, "config.json")):
        if problem := _json_problem(findings.model_dir / name):
            findings.problems.append(problem)


def _collect_digests(findings: _Findings, pending: Mapping[str, Future[str]]) -> list[dict[str, Any]]:
    """Path, size and sha256 of every file (hashed meanwhile by the pool)."""
    file_report = []
    for relative, future in pending.items():
        try:
            digest = future.result()
        except (OSError, RlkeepError) as error:
            findings.problems.append(f"{findings.model_dir / relative}: cannot be hashed: {error}")
            continue
        file_report.append({"path": relative, "size": (findings.model_dir / relative).stat().st_size,
                            "sha256": digest})
    return file_report


def _dtype_name(dtype: Any) -> str:
    """A safetensors dtype name from itself or a torch/numpy dtype (torch.bfloat16 -> BF16)."""
    text = str(dtype)
    if text in DTYPE_BYTES:
        return text
    return _DTYPE_ALIASES.get(text.removeprefix("torch.").removeprefix("numpy."), text)


def _check_index(model_dir: Path, top: set[str], problems: list[str]) -> tuple[dict[str, str] | None, Any, list[str]]:
    index_path = model_dir / INDEX_NAME
    try:
        index = _read_json_object(index_path)
    except RlkeepError as error:
        problems.append(str(error))
        return None, None, []
    metadata, weight_map = index.get("metadata"), index.get("weight_map")
    if not isinstance(metadata, dict):
        problems.append(f"{index_path}: no 'metadata' object (transformers refuses such an index)")
        metadata = {}
    total = metadata.get("total_size")
    if type(total) is not int:
        problems.append(f"{index_path}: metadata.total_size {total!r} is not an integer byte count")
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        problems.append(f"{index_path}: 'weight_map' must map tensor names to shard file names")
        return None, total, []
    shards = sorted(set(weight_map.values()))
    for name in shards:
        if "/" in name:
            problems.append(f"{index_path}: shard {name!r} is nested, not beside the index")
        elif not (model_dir / name).is_file():
            problems.append(f"{model_dir / name}: shard named by the index is missing")
    stray = sorted((n for n in top if SHARD_NAME.fullmatch(n) and n not in shards))
    if stray:
        problems.append(f"{index_path}: shard file(s) not named by the index: {_few(stray)}")
    if list(weight_map) != sorted(weight_map):
        problems.append(f"{index_path}: weight_map is not sorted (transformers writes sort_keys=True)")
    return weight_map, total, [s for s in shards if "/" not in s and (model_dir / s).is_file()]


def _reference_reader_problem(path: Path) -> str | None:
    """Second opinion from the safetensors library itself (it mmaps; reads no tensor data)."""
    try:
        from safetensors import safe_open
    except ImportError:
        return None
    try:
        with safe_open(str(path), framework="numpy") as handle:
            list(handle.keys())
    except Exception as error:  # SafetensorError is not exported under a stable name
        return f"{path}: the safetensors reader refuses it: {error}"
    return None


# --------------------------------------------------------------------------------------------
# Consolidation
# --------------------------------------------------------------------------------------------

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
        raise RlkeepError(f"{src_dir}: needed file(s) missing (download them first): {_few(missing)}")

    root = src_dir / detection.root
    if detection.format in ("hf-single", "hf-sharded"):
        source = _safetensors_source(root, detection)
    elif detection.format == "fsdp":
        source = _fsdp_source(src_dir, detection)
    else:
        raise RlkeepError(f"{src_dir}: unknown format {detection.format!r}")
    if not source.tensors:
        raise RlkeepError(f"{root}: the checkpoint holds no tensors")
    aux = _aux_sources(source.aux_dir)
    expected = {t.name: (t.dtype, t.shape) for t in source.tensors}
    plan = plan_shards(source.tensors, max_shard_bytes, source.whole_files)

    dst_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dst_dir.name}.tmp-", dir=dst_dir.parent))
    try:
        with _hash_pool() as pool:
            writer = _Writer(staging, pool)
            try:
                for shard in plan:
                    writer.write_shard(shard)
                if len(plan) > 1:
                    writer.write_small(INDEX_NAME, _index_bytes(plan))
                for path in aux:
                    writer.write_small(path.name, path.read_bytes())
                writer.finish()
            finally:
                writer.close()
            try:
                verification = _verify(staging, expected, writer.digests, pool)
            except RlkeepError as error:  # name the destination, not the temp dir about to vanish
                raise RlkeepError(str(error).replace(str(staging), str(dst_dir))) from error
        _fsync_directory(staging)
        if dst_dir.exists():
            dst_dir.rmdir()  # empty, checked above
        os.rename(staging, dst_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        source.keepalive.clear()
    _fsync_directory(dst_dir.parent)
    verification["dir"] = str(dst_dir)
    sizes = {p: (src_dir / p).stat().st_size for p in detection.needed_files}
    return {
        "status": "completed",
        "format": detection.format,
        "source": {
            "dir": str(src_dir),
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
            "reused_whole": writer.reused,
        },
        "files": verification["files"],
        "parameter_count": verification["parameter_count"],
        "tensor_count": verification["tensor_count"],
        "total_size": verification["total_size"],
        "notes": source.notes,
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
    problems = [_architectures_problem(aux_dir / "config.json")]
    problems += [_json_problem(path) for path in chosen if path.suffix == ".json" and path.name != "config.json"]
    problems = [p for p in problems if p]
    if problems:
        raise RlkeepError("; ".join(problems))
    return chosen


def _architectures_problem(config_path: Path) -> str | None:
    try:
        value = _read_json_object(config_path).get("architectures")
    except RlkeepError as error:
        return str(error)
    if isinstance(value, list) and value and all(isinstance(a, str) and a for a in value):
        return None
    return f"{config_path}: field 'architectures' must be a non-empty list of class names, found {value!r}"


def _json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{path}: not valid JSON: {error}"
    return None


def _index_bytes(plan: Sequence[PlannedShard]) -> bytes:
    weight_map = {t.name: shard.name for shard in plan for t in shard.tensors}
    index = {"metadata": {"total_size": sum(s.data_bytes for s in plan)}, "weight_map": weight_map}
    return dumps(index).encode("utf-8")  # indent 2, sort_keys, as transformers writes it


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def consolidate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep consolidate",
                                     description="Consolidate a checkpoint step directory into a verified flat "
                                                 "model folder; print the JSON report.")
    parser.add_argument("src", type=Path, help="step directory (an HF export folder or ckpts/global_step_N)")
    parser.add_argument("dst", type=Path, nargs="?", help="flat model folder to create (must not exist)")
    parser.add_argument("--max-shard-bytes", type=int, default=DEFAULT_MAX_SHARD_BYTES,
                        help=f"largest output shard in bytes of tensor data (default {DEFAULT_MAX_SHARD_BYTES}); "
                             "a sharded export whose shards all fit keeps its sharding, linked whole")
    parser.add_argument("--inspect", action="store_true", help="only detect the format and print the evidence")
    args = parser.parse_args(argv)
    if args.inspect:
        print(dumps(detect_format(list_files(args.src)).to_dict()), end="")
        return 0
    if args.dst is None:
        parser.error("DST is required unless --inspect is given")
    print(dumps(consolidate(args.src, args.dst, max_shard_bytes=args.max_shard_bytes)), end="")
    return 0


def verify_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep verify-model",
                                     description="Verify a flat model folder; print the JSON evidence.")
    parser.add_argument("dir", type=Path, help="model folder")
    args = parser.parse_args(argv)
    print(dumps(verify_model(args.dir)), end="")
    return 0


# --------------------------------------------------------------------------- pipeline step


def _step_listing(store: Any, prefix: str) -> dict[str, int]:
    """Relative path -> size of everything under one step folder of the store."""
    return {info.key[len(prefix) + 1:]: info.size for info in store.list(prefix)}


def export_step(ctx: Any) -> None:
    """`<job>/model/` + `<job>/export.json`: detect the selected step's format from the store listing,
    download only what consolidation needs, consolidate to a flat verified model, record provenance."""
    from rlkeep.jsonio import read_json, write_json
    from rlkeep.regions import store_to_local
    from rlkeep.steps import check_transfer
    from rlkeep.diskspace import require_free
    from rlkeep.storage import open_store

    selected = read_json(ctx.inputs["selected"])
    step = int(selected["step"])
    record = ctx.record
    store = open_store(record.store)
    prefixes = {"export": f"{record.layout['exports'].strip('/')}/global_step_{step}",
                "ckpt": f"{record.layout['ckpts'].strip('/')}/global_step_{step}"}
    listings = {name: _step_listing(store, prefix) for name, prefix in prefixes.items()}
    detection = choose_source(listings["export"] or None, listings["ckpt"] or None)
    if not detection.consolidatable:
        raise RlkeepError(f"{record.store}/{prefixes.get(detection.source, prefixes['ckpt'])}: "
                          f"{detection.format} checkpoint of step {step} cannot be consolidated here: {detection.reason}")
    prefix = prefixes[detection.source]
    sizes = listings[detection.source]
    needed = sorted(detection.needed_files)
    check_transfer(ctx, nbytes=sum(sizes[name] for name in needed), what=f"checkpoint download from {record.store}/{prefix}",
                   **store_to_local(ctx))

    src_dir = ctx.work_dir("export") / f"global_step_{step}-{detection.source}"
    # Resumable: a file already downloaded whole is kept, but only while the store still holds that
    # very object (same size, ETag and time): a source replaced after a refused export is read again.
    sources_path = src_dir.with_name(f"{src_dir.name}.sources.json")
    identity = {info.key[len(prefix) + 1:]: [info.size, info.etag, info.last_modified] for info in store.list(prefix)}
    downloaded = read_json(sources_path) if sources_path.is_file() else {}

    def kept(name: str) -> bool:
        target = src_dir / name
        return target.is_file() and target.stat().st_size == sizes[name] and downloaded.get(name) == identity.get(name)

    require_free(src_dir, sum(sizes[name] for name in needed if not kept(name)),
                 f"checkpoint download from {record.store}/{prefix}")
    for name in needed:
        target = src_dir / name
        if kept(name):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.part")
        try:
            with open(partial, "wb") as handle:
                store.read_into(f"{prefix}/{name}", handle)
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)  # stopped or out of space: no half file stays behind
            raise
        downloaded[name] = identity.get(name)
        write_json(sources_path, downloaded)
    log.info("export: %s from %s/%s (%d files)", detection.format, record.store, prefix, len(needed))
    model_dir = ctx.outputs["model"]
    if model_dir.exists() and not any(model_dir.iterdir()):
        model_dir.rmdir()
    # A consolidation killed mid-way leaves its temp folder (a model's size); Snakemake's lock makes
    # this step the only writer of model_dir, so any such sibling is a leftover.
    for stale in model_dir.parent.glob(f".{model_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    report = consolidate(src_dir, model_dir, detection=detection)
    write_json(ctx.outputs["export"], {
        **report,
        "source_local": report["source"],
        "status": "completed",
        "step": step,
        "format": detection.format,
        "source": f"{record.store}/{prefix}",
        "source_keys": [f"{prefix}/{name}" for name in needed],
        "detection": detection.to_dict(),
    })
    shutil.rmtree(src_dir, ignore_errors=True)
    sources_path.unlink(missing_ok=True)
