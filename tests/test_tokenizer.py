"""One definition of a tokenizer: the model check (verify-model, consolidation) and the publication
check (check-publication) agree on every folder, through their real entry points on real files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from rlkeep.errors import RlkeepError
from rlkeep.export import verify_model
from rlkeep.hub import check_publication
from rlkeep.export.layout import BPE_VOCABULARY_PAIR, TOKENIZER_FILES, VOCABULARY_FILES, has_tokenizer

FILE_TEXT = {"tokenizer.json": '{"version": "1.0"}', "tokenizer_config.json": '{"model_max_length": 32768}',
             "vocab.json": '{"a": 0}', "special_tokens_map.json": "{}", "added_tokens.json": "{}",
             "chat_template.json": '{"chat_template": ""}'}

# top-level file names -> does the folder hold a tokenizer?
CASES = {
    ("tokenizer.json", "tokenizer_config.json"): True,  # what the SkyRL HF export writes
    ("tokenizer.model",): True,
    ("spiece.model",): True,
    ("sentencepiece.bpe.model",): True,
    ("tiktoken.model",): True,
    ("vocab.txt",): True,
    ("vocab.json", "merges.txt"): True,
    ("vocab.json",): False,  # half a BPE vocabulary
    ("merges.txt",): False,
    ("tokenizer_config.json",): False,  # settings without a vocabulary
    ("tokenizer_config.json", "special_tokens_map.json", "chat_template.json"): False,
    (): False,
}


def model_folder(root: Path, tokenizer_names: tuple[str, ...]) -> Path:
    root.mkdir(parents=True)
    save_file({"model.embed_tokens.weight": np.zeros((4, 2), dtype=np.float32)}, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    for name in tokenizer_names:
        (root / name).write_text(FILE_TEXT.get(name, "not json: a binary or text vocabulary\n"))
    return root


def model_check_finds_tokenizer(folder: Path) -> bool:
    try:
        verify_model(folder)
    except RlkeepError as error:
        assert "no tokenizer" in str(error), str(error)  # the only problem these folders can have
        return False
    return True


def publication_check_finds_tokenizer(folder: Path) -> bool:
    return not any("no tokenizer" in problem for problem in check_publication(folder))


@pytest.mark.parametrize("names,expected", list(CASES.items()), ids=lambda value: "+".join(value)
                         if isinstance(value, tuple) else None)
def test_the_model_check_and_the_publication_check_agree(tmp_path: Path, names: tuple[str, ...],
                                                          expected: bool) -> None:
    folder = model_folder(tmp_path / "model", names)
    assert has_tokenizer(set(names)) is expected
    assert model_check_finds_tokenizer(folder) is expected
    assert publication_check_finds_tokenizer(folder) is expected


def test_every_vocabulary_is_among_the_files_a_model_folder_carries() -> None:
    assert set(VOCABULARY_FILES) | set(BPE_VOCABULARY_PAIR) <= set(TOKENIZER_FILES)
    assert {name for case in CASES for name in case} <= set(TOKENIZER_FILES)
