"""FSDP rank shards: unpickle SkyRL's `model_world_size_W_rank_R.pt` (DTensor Shard(0) pieces) into
sources; the rows of each tensor concatenate along dim 0 (plain byte concatenation, row-major).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.detect import Detection
from rlkeep.export.layout import DTYPE_ALIASES, DTYPE_BYTES, RANK_FILE, TORCH_INSTALL_HINT
from rlkeep.export.safetensors_header import numel
from rlkeep.export.sources import BytesPiece, SourceModel, SourceTensor, few, read_json_object


def require_torch() -> Any:
    try:
        import torch
    except ImportError as error:
        raise RlkeepError("FSDP rank shards are torch pickles and need torch, which is not installed: "
                          f"install the optional extra with `{TORCH_INSTALL_HINT}` (CPU build torch 2.13.0)") from error
    return torch


@contextmanager
def quiet_device_mesh_unpickling() -> Iterator[None]:
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
    return {getattr(torch, attr): name for attr, name in DTYPE_ALIASES.items()
            if isinstance(getattr(torch, attr, None), torch.dtype)}


def _tensor_bytes(tensor: Any) -> memoryview:
    import torch

    flat = tensor.contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def rank_order(root: str, names: Iterable[str], declared_world: object, config_label: str | None) -> list[str]:
    """The model rank file names under `root`, in rank order, checked against each other and against
    fsdp_config.json's world_size (`declared_world`, None without that file)."""
    found = sorted((int(m.group(1)), int(m.group(2)), m.group(0)) for name in names if (m := RANK_FILE.fullmatch(name)))
    if not found:
        raise RlkeepError(f"{root}: no model_world_size_W_rank_R.pt rank files")
    world_sizes = sorted({w for w, _, _ in found})
    if len(world_sizes) > 1:
        raise RlkeepError(f"{root}: rank files of several world sizes {world_sizes}")
    world = world_sizes[0]
    ranks = [rank for _, rank, _ in found]
    if config_label is not None:
        if type(declared_world) is not int or declared_world < 1:
            raise RlkeepError(f"{config_label}: world_size {declared_world!r} is not a positive integer")
        if declared_world != world or len(ranks) != declared_world:
            raise RlkeepError(f"{config_label}: world_size {declared_world} but {len(ranks)} rank file(s) of world size "
                              f"{world} in {root} (ranks {ranks}): the shard count does not match")
    if ranks != list(range(world)):
        missing = sorted(set(range(world)) - set(ranks))
        raise RlkeepError(f"{root}: world size {world} needs ranks 0..{world - 1}; missing rank file(s) "
                          + ", ".join(f"model_world_size_{world}_rank_{r}.pt" for r in missing))
    return [name for _, _, name in found]


def fsdp_tensors(labels: Sequence[str], states: Sequence[Mapping[str, Any]],
                 piece_of: Callable[[Any], BytesPiece]) -> list[SourceTensor]:
    """The full tensors of rank states (unpickled rank files, `labels` naming them in messages);
    piece_of(local tensor) says where one rank's rows of one tensor are read from."""
    torch = require_torch()
    names = list(states[0].keys())
    for label, state in zip(labels[1:], states[1:]):
        if set(state.keys()) != set(names):
            differ = sorted(set(state.keys()) ^ set(names))
            raise RlkeepError(f"{label}: tensor names differ from {labels[0]}: {few(differ)}")
    lora = [name for name in names if "lora_" in name]
    if lora:
        raise RlkeepError(f"{labels[0]}: LoRA tensors {few(lora)}: merging adapters into the base weights "
                          "needs a merge job; rlkeep does not consolidate LoRA checkpoints")
    dtype_names = _torch_dtype_names(torch)
    return [_fsdp_tensor(name, labels, [state[name] for state in states], torch, dtype_names, piece_of)
            for name in names]


def fsdp_source(src_dir: Path, detection: Detection) -> SourceModel:
    """The FSDP checkpoint under src_dir, its rank files opened in place (memory-mapped)."""
    torch = require_torch()
    root = src_dir / detection.root
    config_path = root / "fsdp_config.json"
    has_config = config_path.exists()
    declared = read_json_object(config_path).get("world_size") if has_config else None
    rank_paths = [root / name for name in rank_order(str(root), (p.name for p in root.iterdir()), declared,
                                                      str(config_path) if has_config else None)]
    states = []
    with quiet_device_mesh_unpickling():
        for path in rank_paths:
            try:
                state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
            except Exception as error:  # a corrupt zip, a truncated pickle, a missing class...
                raise RlkeepError(f"{path}: torch.load failed: {type(error).__name__}: {error}") from error
            if not isinstance(state, Mapping):
                raise RlkeepError(f"{path}: expected a state dict, found {type(state).__name__}")
            states.append(state)
    tensors = fsdp_tensors([str(p) for p in rank_paths], states, lambda local: lambda: _tensor_bytes(local))
    files = sorted(rank_paths + ([config_path] if has_config else []))
    notes = [] if has_config else [f"no {config_path.name}: world size {len(rank_paths)} from the file names"]
    return SourceModel(tensors, root / "huggingface", {}, files, notes, states)


def _fsdp_tensor(name: str, paths: Sequence[str], values: Sequence[Any], torch: Any,
                 dtype_names: Mapping[Any, str], piece_of: Callable[[Any], BytesPiece]) -> SourceTensor:
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
        if local.dtype != dtype or tuple(local.shape[1:]) != tuple(global_shape[1:]) or local.device.type not in ("cpu", "meta"):
            raise RlkeepError(f"{path}: tensor {name!r} shard is {local.dtype}{list(local.shape)} on {local.device}, "
                              f"which does not concatenate along dim 0 into {dtype}{list(global_shape)}")
    if sum(local.shape[0] for local in locals_) != global_shape[0]:
        raise RlkeepError(f"{paths[0].rpartition('/')[0]}: tensor {name!r}: rank shards have "
                          f"{[local.shape[0] for local in locals_]} rows, not the {global_shape[0]} of {list(global_shape)}")
    if dtype not in dtype_names:
        raise RlkeepError(f"{paths[0]}: tensor {name!r} has dtype {dtype}, which safetensors cannot store")
    dtype_name = dtype_names[dtype]
    nbytes = numel(global_shape) * DTYPE_BYTES[dtype_name]
    pieces = tuple(piece_of(local) for local in locals_ if local.numel() > 0)
    return SourceTensor(name, dtype_name, tuple(int(d) for d in global_shape), nbytes, pieces)
