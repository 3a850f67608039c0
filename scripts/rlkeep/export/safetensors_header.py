"""Safetensors headers: read one in bounded memory with every length check, and encode one."""
from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.layout import DTYPE_BYTES, MAX_HEADER_BYTES


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


def numel(shape: Sequence[int]) -> int:
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
        if offsets[1] - offsets[0] != numel(shape) * DTYPE_BYTES[dtype]:
            raise fail("TensorInvalidInfo", f"tensor {name!r}: data_offsets {offsets} span "
                       f"{offsets[1] - offsets[0]} bytes but {dtype}{shape} needs {numel(shape) * DTYPE_BYTES[dtype]}")
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
