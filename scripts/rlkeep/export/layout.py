"""File names, dtype sizes and limits a flat model folder and its sources use, and what a tokenizer
is in one (one definition for the export's model check and the publication check, rlkeep.hub.checks)."""
from __future__ import annotations

import logging
import re
from collections.abc import Collection


log = logging.getLogger("rlkeep.export")

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
DTYPE_ALIASES = {"float64": "F64", "double": "F64", "float32": "F32", "float": "F32", "float16": "F16",
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


# What a tokenizer is in a flat model folder: one definition for the export's model check
# (`rlkeep verify-model`, consolidation) and the publication check (`rlkeep check-publication`).
#
# A folder holds a tokenizer when it holds a vocabulary a loader can build one from: a file that
# is a complete vocabulary by itself (the fast `tokenizer.json`, a SentencePiece or tiktoken model,
# a WordPiece `vocab.txt`), or a byte-level BPE `vocab.json` together with its `merges.txt`.
# `tokenizer_config.json` alone is settings without a vocabulary, so it is not a tokenizer.
# The SkyRL HF export writes the tokenizer files beside config.json (docs/reference.md, formats §1).
# Each of these is a complete vocabulary by itself.
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
                    "tiktoken.model", "vocab.txt")
# A byte-level BPE vocabulary needs both halves.
BPE_VOCABULARY_PAIR = ("vocab.json", "merges.txt")
# Every tokenizer file a flat model folder carries (consolidation copies these beside the weights).
TOKENIZER_FILES = VOCABULARY_FILES + BPE_VOCABULARY_PAIR + (
    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
    "chat_template.json")
TOKENIZER_REQUIREMENT = f"one of {', '.join(VOCABULARY_FILES)}, or {' with '.join(BPE_VOCABULARY_PAIR)}"


def has_tokenizer(names: Collection[str]) -> bool:
    """True when the top-level file names of a folder include a loadable vocabulary."""
    return any(name in names for name in VOCABULARY_FILES) or all(name in names for name in BPE_VOCABULARY_PAIR)
