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
   are concatenated along dim 0, which for row-major tensors is plain byte concatenation; the
   pipeline step reads them in place in the store by byte range (``fsdp_store``), so the model's
   bytes are on disk once. The folder is built in a sibling temp dir, verified, fsynced, then
   renamed into place.
3. ``verify_model``: every check a downstream reader relies on, all problems reported at once.

Megatron dist-checkpoints and DeepSpeed ZeRO partitions are refused with the export job they
need: remapping their tensors by hand here would be a guess.

One module per job: layout (file names, dtype sizes), detect, safetensors_header, sources, fsdp
and fsdp_store (where each tensor's bytes come from), plan (output shards and the index), writer,
verify (one function per check), consolidate, cli (`rlkeep consolidate`, `rlkeep
verify-model`) and step (the pipeline step). The public names are re-exported here.
"""
from __future__ import annotations

from rlkeep.export.cli import consolidate_main, verify_main
from rlkeep.export.consolidate import consolidate
from rlkeep.export.detect import Detection, choose_source, detect_format, list_files
from rlkeep.export.layout import (
    CONFIG_FILES,
    DEFAULT_MAX_SHARD_BYTES,
    DTYPE_BYTES,
    FORMATS,
    INDEX_NAME,
    MAX_HEADER_BYTES,
    RANK_FILE,
    SHARD_NAME,
    SINGLE_WEIGHTS,
    TOKENIZER_FILES,
    VOCABULARY_FILES,
)
from rlkeep.export.plan import PlannedShard, plan_shards
from rlkeep.export.safetensors_header import (
    SafetensorsHeader,
    TensorEntry,
    encode_safetensors_header,
    read_safetensors_header,
)
from rlkeep.export.sources import FileRange, SourceModel, SourceTensor
from rlkeep.export.step import export_model_step
from rlkeep.export.verify import Expected, verify_model

__all__ = [
    "CONFIG_FILES", "DEFAULT_MAX_SHARD_BYTES", "DTYPE_BYTES", "FORMATS", "INDEX_NAME", "MAX_HEADER_BYTES",
    "RANK_FILE", "SHARD_NAME", "SINGLE_WEIGHTS", "TOKENIZER_FILES", "VOCABULARY_FILES", "Detection", "Expected",
    "FileRange", "PlannedShard", "SafetensorsHeader", "SourceModel", "SourceTensor", "TensorEntry", "choose_source",
    "consolidate", "consolidate_main", "detect_format", "encode_safetensors_header", "export_model_step", "list_files",
    "plan_shards", "read_safetensors_header", "verify_main", "verify_model",
]
