"""FSDP rank files read in place in the store, so the export holds the model's bytes on disk once.

A rank file written by torch.save is a zip whose members are stored uncompressed: the pickle
(`<name>/data.pkl`) and one member per storage (`<name>/data/<key>`). The zip's central directory,
the pickle and each storage member's local header are read by ranged GETs; the pickle is unpickled
with storages on the meta device (shapes, dtypes, placements and storage offsets, no data), and each
tensor's rows become a StoreRange the writer streams straight into the output shard.
"""
from __future__ import annotations

import io
import pickle
import struct
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.detect import Detection
from rlkeep.export.fsdp import fsdp_tensors, quiet_device_mesh_unpickling, rank_order, require_torch
from rlkeep.export.sources import SourceModel, StoreRange, read_json_object

# The zip format's local file header: signature, versions, flags, method, time, date, crc, sizes,
# then the lengths of the name and the extra field that precede a member's data.
LOCAL_HEADER = struct.Struct("<4s5H3L2H")
LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
# bytes asked for with a local header, covering the name and torch's alignment padding in one GET
LOCAL_HEADER_READ = 512
# Storages up to this size are read for real while unpickling: a DeviceMesh's rank table is one, and
# it must hold its values; larger ones (the weights) stay on the meta device.
SMALL_STORAGE = 64 << 10
# a zip's directory is read in blocks of at least this size (its end record, then the directory)
READ_AHEAD = 64 << 10


class StoreFile(io.RawIOBase):
    """One store object as a seekable read-only file, read by ranged GETs of at least READ_AHEAD bytes."""

    def __init__(self, store: Any, key: str, size: int) -> None:
        self.store, self.key, self.size = store, key, size
        self.position = 0
        self.bytes_read = 0
        self._block_start, self._block = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        wanted = min(len(view), self.size - self.position)
        if wanted <= 0:
            return 0
        end = self.position + wanted
        if not (self._block_start <= self.position and end <= self._block_start + len(self._block)):
            length = min(max(wanted, READ_AHEAD), self.size - self.position)
            sink = io.BytesIO()
            self.store.read_range(self.key, self.position, length, sink)
            self._block_start, self._block = self.position, sink.getvalue()
            self.bytes_read += length
        start = self.position - self._block_start
        view[:wanted] = self._block[start:start + wanted]
        self.position = end
        return wanted


def _read_member(file: StoreFile, info: zipfile.ZipInfo, label: str, with_data: bool) -> tuple[int, bytes]:
    """Where a stored member's bytes start (after its local header, name and extra field), and its
    bytes when with_data: one ranged GET."""
    length = min(LOCAL_HEADER_READ + (info.file_size if with_data else 0), file.size - info.header_offset)
    sink = io.BytesIO()
    file.store.read_range(file.key, info.header_offset, length, sink)
    file.bytes_read += length
    head = sink.getvalue()
    if len(head) < LOCAL_HEADER.size or head[:4] != LOCAL_HEADER_SIGNATURE:
        raise RlkeepError(f"{label}: member {info.filename} has no zip local header at byte {info.header_offset}")
    *_, name_length, extra_length = LOCAL_HEADER.unpack_from(head)
    start = LOCAL_HEADER.size + name_length + extra_length
    data = b""
    if with_data:
        data = head[start:start + info.file_size]
        if len(data) < info.file_size:
            file.seek(info.header_offset + start)
            data = file.read(info.file_size)
        if len(data) != info.file_size:
            raise RlkeepError(f"{label}: member {info.filename} ends before its {info.file_size} bytes")
    return info.header_offset + start, data


class _MetaUnpickler(pickle.Unpickler):
    """torch.save's pickle with every storage on the meta device; each rebuilt tensor is remembered
    with the storage member and element offset its bytes come from."""

    def __init__(self, data: bytes, torch: Any, read_small: Callable[[str], bytes]) -> None:
        super().__init__(io.BytesIO(data))
        self.torch, self.read_small = torch, read_small
        self.storage_keys: dict[int, str] = {}
        self.storages: list[Any] = []  # kept alive: storage_keys is keyed by their ids
        self.tensors: dict[int, tuple[str, Any]] = {}  # id(tensor) -> (storage key, tensor)

    def persistent_load(self, saved_id: Any) -> Any:
        torch = self.torch
        if not isinstance(saved_id, tuple) or len(saved_id) != 5 or saved_id[0] not in ("storage", b"storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {saved_id!r}")
        _, storage_type, key, _, numel = saved_id
        dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
        key = key.decode() if isinstance(key, bytes) else str(key)
        nbytes = numel * dtype.itemsize
        if 0 < nbytes <= SMALL_STORAGE:
            untyped = torch.frombuffer(bytearray(self.read_small(key)), dtype=torch.uint8).untyped_storage()
        else:
            untyped = torch.UntypedStorage(nbytes, device="meta")
        typed = torch.TypedStorage(wrap_storage=untyped, dtype=dtype)
        self.storages.append(typed)
        self.storage_keys[id(typed)] = key
        return typed

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class("torch._tensor" if module == "torch.tensor" else module, name)
        if (module, name) != ("torch._utils", "_rebuild_tensor_v2"):
            return found

        def rebuild(storage: Any, *args: Any) -> Any:
            tensor = found(storage, *args)
            self.tensors[id(tensor)] = (self.storage_keys[id(storage)], tensor)
            return tensor
        return rebuild


Locate = Callable[[Any], "StoreRange | None"]


def _load_rank(store: Any, key: str, size: int, label: str, torch: Any) -> tuple[Mapping[str, Any], Locate, StoreFile]:
    """A rank file's state dict (meta tensors), the function giving the StoreRange of a tensor it
    rebuilt (None for another file's), and the file (its bytes_read: what learning them read)."""
    file = StoreFile(store, key, size)
    try:
        archive = zipfile.ZipFile(file)
        infos = {info.filename: info for info in archive.infolist()}
        pickles = [name for name in infos if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise RlkeepError(f"{label}: not a torch.save zip: {len(pickles)} top-level data.pkl members")
        base = pickles[0][:-len("data.pkl")]
        if base + "byteorder" in infos and archive.read(base + "byteorder").decode() != "little":
            raise RlkeepError(f"{label}: saved big-endian; safetensors is little-endian and rlkeep does not byte-swap")
        data = archive.read(pickles[0])
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise RlkeepError(f"{label}: cannot read its zip directory: {error}") from error
    offsets: dict[str, int] = {}

    def member(storage_key: str) -> zipfile.ZipInfo:
        name = f"{base}data/{storage_key}"
        info = infos.get(name)
        if info is None or info.compress_type != zipfile.ZIP_STORED:
            raise RlkeepError(f"{label}: storage member {name} is " + ("missing" if info is None else "compressed"))
        return info

    def read_small(storage_key: str) -> bytes:
        info = member(storage_key)
        offsets[info.filename], data = _read_member(file, info, label, with_data=True)
        return data

    unpickler = _MetaUnpickler(data, torch, read_small)
    with quiet_device_mesh_unpickling(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
        try:
            state = unpickler.load()
        except Exception as error:  # a truncated pickle, a missing class...
            raise RlkeepError(f"{label}: unpickling failed: {type(error).__name__}: {error}") from error
    if not isinstance(state, Mapping):
        raise RlkeepError(f"{label}: expected a state dict, found {type(state).__name__}")
    def locate(local: Any) -> StoreRange | None:
        found = unpickler.tensors.get(id(local))
        if found is None:
            return None
        storage_key, tensor = found
        if not tensor.is_contiguous():
            raise RlkeepError(f"{label}: a tensor of shape {list(tensor.shape)} is not stored row-major "
                              f"(strides {list(tensor.stride())})")
        info = member(storage_key)
        if info.filename not in offsets:
            offsets[info.filename] = _read_member(file, info, label, with_data=False)[0]
        start = tensor.storage_offset() * tensor.element_size()
        length = tensor.numel() * tensor.element_size()
        if start + length > info.file_size:
            raise RlkeepError(f"{label}: a tensor reads bytes {start}..{start + length} of storage {info.filename}, "
                              f"which holds {info.file_size}")
        return StoreRange(store, key, offsets[info.filename] + start, length)
    return state, locate, file


def fsdp_store_source(store: Any, prefix: str, sizes: Mapping[str, int], src_dir: Path,
                      detection: Detection) -> SourceModel:
    """The FSDP checkpoint at `prefix` of the store: its small files (fsdp_config.json, huggingface/)
    already downloaded into src_dir, its model rank files (relative name -> size in `sizes`) read in place."""
    torch = require_torch()
    root = detection.root
    config_path = src_dir / root / "fsdp_config.json"
    has_config = config_path.exists()
    declared = read_json_object(config_path).get("world_size") if has_config else None
    root_key = f"{prefix}/{root}" if root else prefix
    listed = [name.rpartition("/")[2] for name in sizes if name.rpartition("/")[0] == root]
    names = rank_order(store.url_of(root_key), listed, declared, str(config_path) if has_config else None)
    labels = [store.url_of(f"{root_key}/{name}") for name in names]
    states, locates, files = [], [], []
    for name, label in zip(names, labels):
        state, locate, file = _load_rank(store, f"{root_key}/{name}", sizes[f"{root}/{name}" if root else name],
                                         label, torch)
        states.append(state)
        locates.append(locate)
        files.append(file)

    def piece_of(local: Any) -> StoreRange:
        for locate in locates:
            found = locate(local)
            if found is not None:
                return found
        raise RlkeepError(f"{store.url_of(root_key)}: a tensor of shape {list(local.shape)} was not rebuilt from "
                          "a storage of a rank file (a wrapped or derived tensor); its bytes cannot be located")
    with torch.no_grad():  # DTensor.to_local() then hands back the very local tensor the unpickler rebuilt
        tensors = fsdp_tensors(labels, states, piece_of)
    notes = [] if has_config else [f"no fsdp_config.json: world size {len(names)} from the file names"]
    metadata_bytes = sum(file.bytes_read for file in files)
    notes.append(f"rank files read in place from the store: {metadata_bytes:,} bytes of zip directory, pickle "
                 "and member headers, then each tensor's rows")
    return SourceModel(tensors, src_dir / root / "huggingface", {}, [], notes, states)
