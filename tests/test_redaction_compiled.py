"""rlkeep.redaction.compiled: the Hyperscan database is compiled once per host and pattern set and
loaded from the cache after; a cache file that is corrupt, cut or foreign is compiled over, an
unwritable cache only costs the compile, and no credential value of the environment reaches it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlkeep.redaction import Redactor, redactor_from_environment
from rlkeep.redaction.compiled import DIGEST_BYTES, compiled_database

hyperscan = pytest.importorskip("hyperscan")

EXPRESSIONS = [b"abc", b"(?i)hf_[a-z]{8}"]
FLAGS = [hyperscan.HS_FLAG_SOM_LEFTMOST | hyperscan.HS_FLAG_DOTALL] * 2
TEXT = b"xxabcx hf_abcdefgh"
HITS = [(0, 2, 5), (0, 10, 13), (1, 7, 18)]


def hits(database) -> list[tuple[int, int, int]]:
    found: list[tuple[int, int, int]] = []
    database.scan(TEXT, match_event_handler=lambda pattern, start, end, *_: found.append((pattern, start, end)))
    return found


def only_file(directory: Path) -> Path:
    files = list(directory.iterdir())
    assert len(files) == 1, files
    return files[0]


def test_compiled_once_then_loaded_and_a_damaged_file_compiled_over(tmp_path: Path) -> None:
    assert hits(compiled_database(hyperscan, EXPRESSIONS, FLAGS, tmp_path)) == HITS
    cached = only_file(tmp_path)
    written = cached.stat().st_mtime_ns
    assert hits(compiled_database(hyperscan, EXPRESSIONS, FLAGS, tmp_path)) == HITS
    assert cached.stat().st_mtime_ns == written  # loaded, not compiled and written again
    body = bytearray(cached.read_bytes())
    for damage in (lambda b: b.__setitem__(DIGEST_BYTES + 40, b[DIGEST_BYTES + 40] ^ 0x55),  # a flipped bit
                   lambda b: b.__delitem__(slice(len(b) // 2, None)),  # cut short
                   lambda b: b.__setitem__(slice(0, DIGEST_BYTES), bytes(DIGEST_BYTES))):  # another digest
        damaged = bytearray(body)
        damage(damaged)
        cached.write_bytes(bytes(damaged))
        assert hits(compiled_database(hyperscan, EXPRESSIONS, FLAGS, tmp_path)) == HITS
        assert cached.read_bytes() == bytes(body)  # compiled again and put back whole
    assert hits(compiled_database(hyperscan, [b"abc"], FLAGS[:1], tmp_path)) == [(0, 2, 5), (0, 10, 13)]
    assert len(list(tmp_path.iterdir())) == 2  # another pattern set is another file


def test_an_unwritable_cache_only_costs_the_compile(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    assert hits(compiled_database(hyperscan, EXPRESSIONS, FLAGS, blocked / "rlkeep")) == HITS


def test_the_cache_holds_no_credential_value_and_the_value_is_still_redacted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    value = "q7Zr" + "Lk93vXpWm2Tn8Hs4"  # a password no rule's pattern describes, assembled here
    redactor = redactor_from_environment({"DATABASE_PASSWORD": value})
    assert redactor.engine == "hyperscan"
    redacted, findings = redactor.redact_text(f"psql -W {value} runs")
    assert value not in redacted and findings
    cached = only_file(tmp_path / "rlkeep")
    assert value.encode() not in cached.read_bytes()
    again = Redactor([value.encode().decode()], engine="hyperscan")  # the cached database, another literal set
    assert value not in again.redact_text(f"export X={value}")[0]
    assert os.listdir(tmp_path / "rlkeep") == [cached.name]
