"""Shard planning: which tensors go to which output shard, and the transformers index."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlkeep.errors import RlkeepError
from rlkeep.export.layout import SINGLE_WEIGHTS
from rlkeep.export.sources import SourceTensor
from rlkeep.jsonio import dumps


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


def index_bytes(plan: Sequence[PlannedShard]) -> bytes:
    weight_map = {t.name: shard.name for shard in plan for t in shard.tensors}
    index = {"metadata": {"total_size": sum(s.data_bytes for s in plan)}, "weight_map": weight_map}
    return dumps(index).encode("utf-8")  # indent 2, sort_keys, as transformers writes it
