"""What a tokenizer is in a flat model folder: one definition for the export's model check
(`rlkeep verify-model`, consolidation) and the publication check (`rlkeep check-publication`).

A folder holds a tokenizer when it holds a vocabulary a loader can build one from: a file that
is a complete vocabulary by itself (the fast `tokenizer.json`, a SentencePiece or tiktoken model,
a WordPiece `vocab.txt`), or a byte-level BPE `vocab.json` together with its `merges.txt`.
`tokenizer_config.json` alone is settings without a vocabulary, so it is not a tokenizer.
The SkyRL HF export writes the tokenizer files beside config.json (docs/reference.md, formats §1).
"""
from __future__ import annotations

from collections.abc import Collection

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
