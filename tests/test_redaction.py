"""rlkeep.redaction: the rule table, a real tree redacted in place, the CLI in a subprocess.

Every secret here is generated at run time (tests.support.secrets_corpus, seeded), so neither this
file nor the module holds a string a secret scanner would take for a credential.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import stat
import string
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from rlkeep import redaction
from rlkeep.errors import RlkeepError
from rlkeep.redaction.prefilter import StdlibPrefilter
from rlkeep.redaction import (
    ENVIRONMENT_KIND,
    KINDS,
    RULES,
    Finding,
    Redactor,
    available_engines,
    classify,
    credential_variable_names,
    redact_tree,
    redactor_from_environment,
)
from tests.support.secrets_corpus import KINDS as CORPUS_KINDS
from tests.support.secrets_corpus import Planted, benign_lookalikes, opaque_value, plant

ENGINES = available_engines()
RULE_IDS = [f"{i:02d}-{rule.kind}-{rule.prefixes[0].strip()}" for i, rule in enumerate(RULES)]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=ENGINES)
def redactor(request: pytest.FixtureRequest) -> Redactor:
    return Redactor(engine=request.param)


def kinds_of(findings: list[tuple[int, str]]) -> list[str]:
    return [kind for _, kind in findings]


# ------------------------------------------------------------------------------------------
# The table: every row's positive sample is found and redacted, its negative is not found.

@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_positive_sample_is_found_and_redacted(rule: redaction.Rule, redactor: Redactor) -> None:
    redacted, findings = redactor.redact_text(rule.positive)
    assert rule.kind in kinds_of(findings)
    assert rule.secret not in redacted
    assert f"<redacted:{rule.kind}>" in redacted
    assert redactor.find_in_text(redacted) == []


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_negative_sample_is_not_found(rule: redaction.Rule, redactor: Redactor) -> None:
    assert redactor.find_in_text(rule.negative) == []


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_positive_sample_is_found_inside_a_json_string(rule: redaction.Rule, redactor: Redactor) -> None:
    line = json.dumps({"step": 3, "message": f"resolved config:\n{rule.positive}\n", "ok": True})
    redacted, findings = redactor.redact_text(line)
    assert rule.kind in kinds_of(findings)
    assert json.dumps(rule.secret)[1:-1] not in redacted
    assert json.loads(redacted)["step"] == 3  # still valid JSON


def test_every_rule_has_distinct_samples_and_a_literal_prefix() -> None:
    for rule in RULES:
        assert rule.secret and rule.secret in rule.positive, rule.kind
        assert rule.negative != rule.positive
        if rule.lowercase:  # lower-case rules run on lower-cased text: their prefixes must be lower case
            assert all(prefix == prefix.lower() for prefix in rule.prefixes), rule.kind
    assert set(CORPUS_KINDS) | {ENVIRONMENT_KIND} == set(KINDS)


def test_each_hint_accepts_every_match_of_its_rule() -> None:
    """The optional re2 prefilter only looks where prefix + hint matches: that must be a superset
    of the rule (checked here with `re`, whose syntax the hints share)."""
    rng = random.Random(13)
    for index, rule in enumerate(RULES):
        samples = [rule.positive, json.dumps({"x": rule.positive})]
        samples += [plant(rule.kind, rng).text for _ in range(20)] if rule.kind in CORPUS_KINDS else []
        for prefix in rule.prefixes:
            body = re.compile(re.escape(prefix.encode()) + rule.body.encode())
            hint = re.compile(re.escape(prefix.encode()) + rule.hint.encode(), re.I if rule.lowercase else 0)
            for sample in samples:
                subject = sample.encode().lower() if rule.lowercase else sample.encode()
                for match in body.finditer(subject):
                    assert hint.match(sample.encode(), match.start()), (RULE_IDS[index], prefix)


def test_lower_case_rule_bodies_hold_no_upper_case_letter() -> None:
    """With prefilter positions a lower-case rule runs as its regex with re.IGNORECASE on the text
    as it is, instead of on lower-cased text: the same matches only while the pattern itself has
    no upper-case letter outside an escape (re folds the text and the pattern's letters alike)."""
    for index, rule in enumerate(RULES):
        if rule.lowercase:
            unescaped = re.sub(r"\\.", "", rule.body)
            assert not re.search("[A-Z]", unescaped), RULE_IDS[index]


def test_a_stray_marker_prefix_does_not_hide_the_rest_of_the_window(redactor: Redactor) -> None:
    """`<redacted:` that is not a whole marker (a log quoting the format) masks nothing and
    stops nothing: the secrets beside it are still found, in memory and streamed."""
    rng = random.Random(15)
    planted = [plant(kind, rng) for kind in CORPUS_KINDS]
    text = "format: <redacted: KIND> or <redacted:\n" + "\n".join(p.text for p in planted) + "\n"
    redacted, findings = redactor.redact_text(text)
    assert sorted(set(kinds_of(findings))) == sorted(set(CORPUS_KINDS))
    assert all(p.secret not in redacted for p in planted)
    assert "<redacted: KIND>" in redacted and redactor.find_in_text(redacted) == []


def test_short_and_long_texts_find_the_same() -> None:
    """Short texts take the trie prefilter, windows the per-prefix one: same findings."""
    stdlib = Redactor(engine="re")
    rng = random.Random(14)
    filler = "\n".join(benign_lookalikes(rng)) + "\n"
    for kind in CORPUS_KINDS:
        text = f"config: {plant(kind, rng).text} end\n"
        short = stdlib.find_in_text(text)
        padding = filler * (StdlibPrefilter.SHORT // len(filler) + 1)
        long = stdlib.find_in_text(padding + text)
        assert short and [(line + padding.count("\n"), k) for line, k in short] == long, kind


def test_sources_hold_no_sample_secret_literally() -> None:
    """The samples are assembled at import time; the files themselves must not contain them."""
    sources = [*sorted((REPO / "scripts/rlkeep/redaction").glob("*.py")), Path(__file__),
               REPO / "tests/support/secrets_corpus.py"]
    assert len(sources) > 3
    texts = [path.read_text() for path in sources]
    for rule in RULES:
        for text in texts:
            assert rule.secret not in text, rule.kind


def test_corpus_plants_are_found_by_kind_and_removed(redactor: Redactor) -> None:
    rng = random.Random(11)
    for _ in range(5):
        for kind in CORPUS_KINDS:
            planted = plant(kind, rng)
            for text in (planted.text, json.dumps({"content": f"$ env\n{planted.text}\n"})):
                redacted, findings = redactor.redact_text(text)
                assert kind in kinds_of(findings), (kind, findings)
                assert planted.secret not in redacted and json.dumps(planted.secret)[1:-1] not in redacted


def test_ml_log_lookalikes_are_not_flagged(redactor: Redactor) -> None:
    rng = random.Random(5)
    lines = benign_lookalikes(rng) + [
        "password=${DB_PASSWORD}",
        "DB_PASSWORD: '{{ vault_db_password }}'",
        'client_secret = os.environ["CLIENT_SECRET"]',
        "secret: %(secret)s",
        '"num_key_value_heads": 8, "key": "model.layers.0.self_attn.k_proj.weight"',
        "cwd=/home/trainer/runs/skyrl-2025 pwd=/home/trainer/runs/step_100",
    ]
    for line in lines:
        assert redactor.find_in_text(line) == [], line


def test_sha256_git_sha_and_uuid_values_under_secret_names_are_not_flagged(redactor: Redactor) -> None:
    rng = random.Random(8)
    sha256 = "".join(rng.choice("0123456789abcdef") for _ in range(64))
    git_sha = sha256[:40]
    uuid = f"{sha256[:8]}-{sha256[8:12]}-{sha256[12:16]}-{sha256[16:20]}-{sha256[20:32]}"
    for line in (f"token={git_sha}", f'"secret": "{sha256}"', f"api_key: {uuid}", f"password=sha256:{sha256}"):
        assert redactor.find_in_text(line) == [], line


# ------------------------------------------------------------------------------------------
# In-memory API details.

def test_redact_text_reports_lines_and_keeps_other_text(redactor: Redactor) -> None:
    rng = random.Random(1)
    hf, gh = plant("huggingface_token", rng), plant("github_token", rng)
    text = f"line one\nHF_TOKEN={hf.text}\nplain\n\nclone {gh.text} done\n"
    redacted, findings = redactor.redact_text(text)
    assert findings == [(2, "huggingface_token"), (5, "github_token")]
    assert redacted == "line one\nHF_TOKEN=<redacted:huggingface_token>\nplain\n\nclone <redacted:github_token> done\n"


def test_a_multiline_pem_keeps_the_line_count(redactor: Redactor) -> None:
    pem = plant("pem_private_key", random.Random(2))
    text = f"key:\n{pem.text}\nafter: 1\n"
    redacted, findings = redactor.redact_text(text)
    assert findings == [(2, "pem_private_key")]
    assert redacted.count("\n") == text.count("\n")
    assert redacted.splitlines()[-1] == "after: 1"
    assert pem.secret not in redacted


def test_text_with_undecodable_bytes_round_trips(redactor: Redactor) -> None:
    token = plant("huggingface_token", random.Random(3))
    raw = b"caf\xe9 \xff\xfe bad utf-8 " + token.text.encode() + b" \xc3\x28 end"
    text = raw.decode("utf-8", "surrogateescape")
    redacted, findings = redactor.redact_text(text)
    assert kinds_of(findings) == ["huggingface_token"]
    assert redacted.encode("utf-8", "surrogateescape") == raw.replace(token.text.encode(), b"<redacted:huggingface_token>")


def test_a_second_key_brought_into_range_by_the_first_redaction_is_also_redacted(redactor: Redactor) -> None:
    rng = random.Random(4)
    first = "".join(rng.choice("0123456789abcdef") for _ in range(40))
    second = "".join(rng.choice("0123456789abcdef") for _ in range(40))
    redacted, findings = redactor.redact_text(f"WANDB_API_KEY={first} {second}")
    assert first not in redacted and second not in redacted
    assert kinds_of(findings) == ["wandb_api_key", "wandb_api_key"]
    assert redactor.find_in_text(redacted) == []


def test_reprs_never_show_values() -> None:
    value = opaque_value(random.Random(6))
    redactor = Redactor([value])
    assert value not in repr(redactor)
    assert repr(Finding("huggingface_token", "a/b.log", 3)) == "Finding(kind='huggingface_token', path='a/b.log', line=3, member='')"


def test_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(RlkeepError, match="engine 'pcre' is not available"):
        Redactor(engine="pcre")


@pytest.mark.skipif(len(ENGINES) < 2, reason="only the stdlib engine is installed")
def test_every_engine_finds_the_same_in_a_noisy_corpus() -> None:
    rng = random.Random(21)
    pieces = []
    for index in range(400):
        pieces.append(rng.choice(benign_lookalikes(rng)))
        if index % 7 == 0:
            pieces.append(plant(rng.choice(CORPUS_KINDS), rng).text)
    text = "\n".join(json.dumps({"i": i, "text": piece}) if i % 2 else piece for i, piece in enumerate(pieces))
    expected = Redactor(engine="re").redact_text(text)
    assert expected[1]
    for engine in ENGINES[1:]:
        assert Redactor(engine=engine).redact_text(text) == expected, engine


# ------------------------------------------------------------------------------------------
# Environment literals.

def test_environment_values_are_collected_by_name_and_suffix() -> None:
    environ = {"HF_TOKEN": "v" * 20, "MY_SERVICE_PASSWORD": "p" * 12, "INTERNAL_API_KEY": "k" * 9,
               "SHORT_TOKEN": "abc", "AWS_ACCESS_KEY_ID": "a" * 20, "HOME": "/root", "TOKENIZERS_PARALLELISM": "false"}
    assert credential_variable_names(environ) == ["AWS_ACCESS_KEY_ID", "HF_TOKEN", "INTERNAL_API_KEY",
                                                  "MY_SERVICE_PASSWORD", "SHORT_TOKEN"]
    redactor = redactor_from_environment(environ)
    assert redactor.find_in_text("x " + "p" * 12 + " y") == [(1, ENVIRONMENT_KIND)]
    assert redactor.find_in_text("abc and /root") == []  # short values and unrelated variables ignored


def test_literals_are_matched_raw_percent_encoded_and_json_escaped(redactor: Redactor) -> None:
    value = "q7" + opaque_value(random.Random(9), 14) + '/+"x'
    literal_redactor = Redactor([value], engine=redactor.engine)
    from urllib.parse import quote
    for spelling in (value, quote(value, safe=""), json.dumps(value)[1:-1]):
        redacted, findings = literal_redactor.redact_text(f"psql -W {spelling} runs")
        assert kinds_of(findings) == [ENVIRONMENT_KIND], spelling
        assert spelling not in redacted


def test_prefixes_and_literals_inside_a_long_candidate_stretch(redactor: Redactor) -> None:
    """A prefilter match can span kilobytes (here `://` ... `:` ... `@` with a huge user part, too
    long for the URL rule itself); whatever starts inside it is still tried."""
    value = opaque_value(random.Random(15))
    token = plant("huggingface_token", random.Random(16))
    literal_redactor = Redactor([value], engine=redactor.engine)
    text = "x ://" + "a" * 3000 + "," + token.text + "," + value + ":pw@host rest"
    redacted, findings = literal_redactor.redact_text(text)
    assert sorted(kinds_of(findings)) == [ENVIRONMENT_KIND, "huggingface_token"]
    assert value not in redacted and token.text not in redacted


# ------------------------------------------------------------------------------------------
# A real tree.

class Tree:
    """A staged model repo plus run logs, with known secrets in known places."""

    def __init__(self, root: Path) -> None:
        rng = random.Random(42)
        self.root = root
        self.p = {kind: plant(kind, rng) for kind in CORPUS_KINDS}
        self.tensor_secret = plant("github_token", rng)
        self.header_secret = plant("huggingface_token", rng)
        self.parquet_secret = plant("openai_api_key", rng)
        p = self.p
        root.mkdir()
        (root / "logs").mkdir()
        (root / "logs" / "train.log").write_text(
            "2025-06-12 INFO start\n"
            f"2025-06-12 INFO env HF_TOKEN={p['huggingface_token'].text}\n"
            f"2025-06-12 INFO key id {p['aws_access_key_id'].text}\n"
            "2025-06-12 INFO checkpoint sha256:" + "ab" * 32 + "\n"
            f"2025-06-12 INFO curl -H 'Authorization: Bearer {p['bearer_token'].secret}'\n"
            f"2025-06-12 INFO db {p['url_credentials'].text}\n")
        os.chmod(root / "logs" / "train.log", 0o640)
        (root / "traces").mkdir()
        trace = {"trial": "t1", "messages": [{"role": "tool", "content": "cat key.pem\n" + p["pem_private_key"].text},
                                             {"role": "assistant", "content": "done"}]}
        (root / "traces" / "trial.json").write_text(json.dumps(trace, indent=2) + "\n")
        (root / "config.yaml").write_text(
            "trainer:\n  lr: 1.0e-6\n"
            f"  wandb_api_key: {p['wandb_api_key'].secret}\n"
            "database:\n  password: ${DB_PASSWORD}\n"
            f"  {p['generic_secret'].text}\n")
        (root / "README.md").write_text(
            "---\nlicense: apache-2.0\n---\n# skyrl-qwen3-8b\n\n## Training Traces\n\n"
            "See https://huggingface.co/datasets/org/traces.\n\n"
            f"Weights were staged from {p['presigned_url'].text}\n"
            f"and the code from `git clone https://{p['github_token'].text}@github.com/org/repo`.\n")
        tensor_bytes = np.frombuffer(self.tensor_secret.text.encode().ljust(48, b"\0"), dtype=np.uint8).copy()
        self.tensors = {"secret_bytes": tensor_bytes, "weight": np.arange(12, dtype=np.float32).reshape(3, 4)}
        save_file(self.tensors, str(root / "model.safetensors"),
                  metadata={"format": "pt", "note": f"pushed with {self.header_secret.text}"})
        (root / "latin1.log").write_bytes("café résumé ".encode("latin-1") + b"key=" + p["anthropic_api_key"].text.encode()
                                          + b"\n")
        (root / "broken.log").write_bytes(b"ok \xc3\x28 \xff\xfe bad\n" + p["google_api_key"].text.encode() + b" \x80end\n")
        (root / "wide.txt").write_bytes(("\ufeffhello\nslack " + p["slack_token"].text + "\nbye\n").encode("utf-16-le"))
        pq.write_table(pa.table({"text": [f"leak {self.parquet_secret.text}"]}), root / "rows.parquet")
        with gzip.open(root / "logs.tar.gz", "wb") as handle:
            handle.write(f"archived {p['jwt'].text}\n".encode())
        (root / "sub" / "nested").mkdir(parents=True)
        self.clean = root / "sub" / "nested" / "notes.txt"
        self.clean.write_text("nothing to see: num_tokens=4096 git_sha=" + "0" * 40 + "\n")
        os.utime(self.clean, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
        (root / "link.log").symlink_to(root / "logs" / "train.log")
        (root / "alias").symlink_to(root / "sub", target_is_directory=True)
        os.mkfifo(root / "pipe")

    EXPECTED = {
        ("logs/train.log", 2, "huggingface_token"),
        ("logs/train.log", 3, "aws_access_key_id"),
        ("logs/train.log", 5, "bearer_token"),
        ("logs/train.log", 6, "url_credentials"),
        ("traces/trial.json", 6, "pem_private_key"),
        ("config.yaml", 3, "wandb_api_key"),
        ("config.yaml", 6, "generic_secret"),
        ("README.md", 10, "presigned_url"),
        ("README.md", 11, "github_token"),
        ("model.safetensors", 1, "huggingface_token"),
        ("latin1.log", 1, "anthropic_api_key"),
        ("broken.log", 2, "google_api_key"),
        ("wide.txt", 2, "slack_token"),
        ("logs.tar.gz", 1, "jwt"),  # inside the gzip (member logs.tar)
        ("rows.parquet", 1, "openai_api_key"),  # in a string cell (member `column text`)
    }
    SKIPPED = {
        "alias": "not scanned: symlink",
        "pipe": "not scanned: not a regular file",
        "link.log": "not scanned: symlink",
        "model.safetensors": redaction.SAFETENSORS_REASON,
    }

    def snapshot(self) -> dict[str, tuple[int, int]]:
        return {p.relative_to(self.root).as_posix(): (p.lstat().st_ino, p.lstat().st_mtime_ns)
                for p in sorted(self.root.rglob("*")) if p.is_file() or p.is_symlink() or p.is_fifo()}


def finding_set(findings: list[Finding]) -> set[tuple[str, int, str]]:
    return {(f.path, f.line, f.kind) for f in findings}


def test_check_mode_reports_everything_and_writes_nothing(tmp_path: Path, redactor: Redactor) -> None:
    tree = Tree(tmp_path / "repo")
    before = tree.snapshot()
    contents = {p: p.read_bytes() for p in tree.root.rglob("*") if p.is_file() and not p.is_symlink()}
    report = redact_tree(tree.root, redactor, check=True)
    assert finding_set(report.findings) == Tree.EXPECTED
    assert dict(report.files_skipped) == Tree.SKIPPED
    assert report.unreadable == []
    assert report.files_scanned == 10
    assert tree.snapshot() == before
    assert all(p.read_bytes() == data for p, data in contents.items())


def test_redaction_in_place_then_idempotent(tmp_path: Path, redactor: Redactor) -> None:
    tree = Tree(tmp_path / "repo")
    root = tree.root
    before = tree.snapshot()
    report = redact_tree(root, redactor)
    assert finding_set(report.findings) == Tree.EXPECTED
    assert sorted(report.files_rewritten) == sorted({path for path, _, _ in Tree.EXPECTED})

    # Every secret is gone from every text file; line structure is unchanged.
    texts = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.suffix in {".log", ".json", ".yaml", ".md"}}
    for planted in tree.p.values():
        for blob in texts.values():
            assert planted.secret.encode() not in blob and json.dumps(planted.secret)[1:-1].encode() not in blob
    assert (root / "logs" / "train.log").read_text().count("\n") == 6
    assert "password: ${DB_PASSWORD}" in (root / "config.yaml").read_text()
    assert json.loads((root / "traces" / "trial.json").read_text())["messages"][0]["content"].startswith(
        "cat key.pem\n<redacted:pem_private_key>")

    # Encodings and odd bytes survive; only the secret changed.
    assert (root / "latin1.log").read_bytes().startswith("café résumé key=<redacted:anthropic_api_key>".encode("latin-1"))
    assert (root / "broken.log").read_bytes() == b"ok \xc3\x28 \xff\xfe bad\n<redacted:google_api_key> \x80end\n"
    wide = (root / "wide.txt").read_bytes()
    assert wide.startswith(b"\xff\xfe") and wide.decode("utf-16") == "hello\nslack <redacted:slack_token>\nbye\n"

    # The safetensors header metadata is redacted, the tensor data is byte-identical.
    loaded = load_file(str(root / "model.safetensors"))
    for name, array in tree.tensors.items():
        np.testing.assert_array_equal(loaded[name], array)
    with safe_open(str(root / "model.safetensors"), "np") as handle:
        assert handle.metadata()["note"] == "pushed with <redacted:huggingface_token>"
    assert tree.tensor_secret.text.encode() in (root / "model.safetensors").read_bytes()

    # Containers are redacted inside and stay readable.
    assert pq.read_table(root / "rows.parquet").column("text")[0].as_py() == "leak <redacted:openai_api_key>"
    assert gzip.open(root / "logs.tar.gz").read() == b"archived <redacted:jwt>\n"

    # Mode kept; untouched files not rewritten at all.
    assert stat.S_IMODE((root / "logs" / "train.log").stat().st_mode) == 0o640
    after = tree.snapshot()
    for rel in ("sub/nested/notes.txt", "link.log"):
        assert after[rel] == before[rel], rel
    assert not [p for p in root.rglob("*.redacting")]

    # Second run: nothing found, nothing rewritten.
    again = redact_tree(root, redactor)
    assert again.findings == [] and again.files_rewritten == []
    assert tree.snapshot() == after
    assert redact_tree(root, redactor, check=True).findings == []


def test_report_json_shape(tmp_path: Path) -> None:
    tree = Tree(tmp_path / "repo")
    report = redact_tree(tree.root, Redactor(), check=True).to_json()
    assert set(report) == {"findings", "files_scanned", "files_skipped", "unreadable"}
    assert {"kind": "wandb_api_key", "path": "config.yaml", "line": 3} in report["findings"]
    assert {"kind": "openai_api_key", "path": "rows.parquet", "line": 1, "member": "column text"} in report["findings"]


def test_a_single_file_root_and_a_missing_root(tmp_path: Path) -> None:
    token = plant("huggingface_token", random.Random(12))
    path = tmp_path / "one.log"
    path.write_text(f"a\n{token.text}\n")
    report = redact_tree(path, Redactor(), check=True)
    assert finding_set(report.findings) == {("one.log", 2, "huggingface_token")}
    with pytest.raises(RlkeepError, match="no such file or directory"):
        redact_tree(tmp_path / "missing", Redactor())


@pytest.mark.parametrize(("name", "head", "expected"), [
    ("x.parquet", b"PAR1\x15\x04", ("container", "parquet")),
    ("weights.bin", b"PK\x03\x04rest", ("container", "zip")),
    ("old.pt", b"\x80\x02}q\x00", ("verbatim", "pickle")),
    ("tokenizer.model", b"\n\x0b\n\x05<unk>\x15\x00\x00", ("verbatim", "sentencepiece")),
    ("photo.jpg", b"\xff\xd8\xff\xe0", ("no_text", "jpeg")),
    ("x.npy", b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False", ("binary", "numpy object array (pickled)")),
    ("a.bz2", b"BZh91AY&SY\x00", ("container", "bzip2")),
    ("t.tar", b"x" * 257 + b"ustar\x0000" + b"\0" * 300, ("container", "tar")),
    ("data.txt", b"abc\x00def", ("binary", "NUL bytes")),
    ("strange.bin", b"just text", ("text", "")),  # the content decides, not the name
    ("log.txt", b"plain text\n", ("text", "")),
    ("w.log", "hi there".encode("utf-16-le"), ("wide", "utf-16-le")),
    ("w.log", b"\xff\xfe" + "hi".encode("utf-16-le"), ("wide", "utf-16-le")),
    ("latin.txt", "café".encode("latin-1"), ("text", "")),
])
def test_classify(name: str, head: bytes, expected: tuple[str, str]) -> None:
    kind = classify(name, head, 10_000)
    assert (kind.handling, kind.detail) == expected


# ------------------------------------------------------------------------------------------
# Large files: streamed in windows, same result as in memory, bounded memory.

def test_streaming_across_window_edges_equals_in_memory(tmp_path: Path, redactor: Redactor) -> None:
    rng = random.Random(30)
    filler = (json.dumps({"step": 1, "loss": 0.5, "num_tokens": 4096, "sha": "ab" * 32}) + "\n").encode()
    parts: list[bytes] = []
    planted: list[Planted] = []
    size = 0
    for edge in (1 << 20, 2 << 20, 3 << 20):
        for kind in ("pem_private_key", "huggingface_token", "wandb_api_key", "jwt"):
            target = edge - rng.randint(0, 300) if kind != "pem_private_key" else edge - 200
            while size < target:
                parts.append(filler)
                size += len(filler)
            secret = plant(kind, rng)
            planted.append(secret)
            piece = f"leak: {secret.text}\n".encode()
            parts.append(piece)
            size += len(piece)
    parts.append(filler * 10)
    data = b"".join(parts)
    path = tmp_path / "result.json"
    path.write_bytes(data)
    expected_text, expected_findings = redactor.redact_text(data.decode())
    report = redact_tree(path, redactor)
    assert [(f.line, f.kind) for f in report.findings] == expected_findings
    assert len(expected_findings) == len(planted)
    assert path.read_text() == expected_text
    assert all(p.secret not in expected_text for p in planted)


@pytest.mark.parametrize("seed", range(6))
def test_small_windows_without_newlines_give_the_in_memory_result(seed: int, redactor: Redactor) -> None:
    """Windows of 700 bytes with 300 of overlap, cut anywhere (no newlines): every short secret
    is found exactly once whichever window edge it straddles."""
    rng = random.Random(seed)
    pieces = []
    for _ in range(60):
        pieces.append("".join(rng.choice("abc xyz,.:{}\"0123") for _ in range(rng.randint(0, 120))))
        pieces.append(plant(rng.choice(["huggingface_token", "github_token", "aws_access_key_id", "slack_token",
                                        "google_api_key", "generic_secret", "bearer_token"]), rng).text)
    data = " ".join(pieces).encode()
    expected, expected_findings = redactor.redact_bytes(data)
    stream = io.BytesIO(data)
    out = io.BytesIO()

    class Collect:
        def emit(self, original: memoryview, redacted: bytes | None) -> None:
            out.write(original if redacted is None else redacted)

    findings = redactor.redact_stream(stream.read, Collect(), chunk_size=700, overlap=300)  # type: ignore[arg-type]
    assert out.getvalue() == expected
    assert findings == expected_findings and len(findings) >= 60


def test_memory_stays_bounded_on_a_file_without_newlines(tmp_path: Path, redactor: Redactor) -> None:
    token = plant("huggingface_token", random.Random(31))
    path = tmp_path / "huge.json"
    block = (json.dumps({"k": "v" * 100, "sha": "ab" * 32}) + ",").encode()
    with open(path, "wb") as handle:
        handle.write(b"[")
        for index in range(12 * (1 << 20) // len(block)):
            handle.write(block)
            if index == 40_000:
                handle.write(f'"{token.text}",'.encode())
        handle.write(b"0]")
    tracemalloc.start()
    try:
        report = redact_tree(path, redactor)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(f.line, f.kind) for f in report.findings] == [(1, "huggingface_token")]
    assert peak < 8 * (1 << 20), f"peak {peak / (1 << 20):.1f} MiB for a 12 MiB file"
    assert token.text.encode() not in path.read_bytes()


# ------------------------------------------------------------------------------------------
# The real CLI in a subprocess.

def run_cli(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in credential_variable_names(os.environ)}
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "rlkeep", "redact", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)


def test_cli_check_redact_check(tmp_path: Path) -> None:
    tree = Tree(tmp_path / "repo")
    secrets = [p.secret for p in tree.p.values()] + [tree.header_secret.text]

    check = run_cli([str(tree.root), "--check"])
    assert check.returncode == 1, check.stderr
    report = json.loads(check.stdout)
    assert {(f["path"], f["line"], f["kind"]) for f in report["findings"]} == Tree.EXPECTED
    assert report["files_scanned"] == 10
    assert "credential-shaped text remains" in check.stderr

    redact = run_cli([str(tree.root)])
    assert redact.returncode == 0, redact.stderr
    assert {(f["path"], f["line"], f["kind"]) for f in json.loads(redact.stdout)["findings"]} == Tree.EXPECTED

    clean = run_cli([str(tree.root), "--check"])
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["findings"] == []

    for result in (check, redact, clean):
        for secret in secrets:
            assert secret not in result.stdout and secret not in result.stderr


def test_cli_redacts_the_exact_environment_value(tmp_path: Path) -> None:
    value = opaque_value(random.Random(77))
    assert Redactor().find_in_text(value) == []  # matches no pattern: only the literal rule finds it
    root = tmp_path / "run"
    root.mkdir()
    (root / "launch.log").write_text(f"iris job run -- huggingface-cli upload --pass {value}\n"
                                     f'{json.dumps({"argv": ["--pass", value]})}\n')
    check = run_cli([str(root), "--check"], {"HF_TOKEN": value})
    assert check.returncode == 1
    assert json.loads(check.stdout)["findings"] == [
        {"kind": ENVIRONMENT_KIND, "path": "launch.log", "line": 1},
        {"kind": ENVIRONMENT_KIND, "path": "launch.log", "line": 2},
    ]
    assert value not in check.stdout + check.stderr
    assert run_cli([str(root)], {"HF_TOKEN": value}).returncode == 0
    assert value not in (root / "launch.log").read_text()
    assert run_cli([str(root), "--check"], {"HF_TOKEN": value}).returncode == 0


def test_cli_missing_root_is_an_operator_error(tmp_path: Path) -> None:
    result = run_cli([str(tmp_path / "nope"), "--check"])
    assert result.returncode == 1
    assert result.stderr.startswith("rlkeep: ") and "no such file or directory" in result.stderr


# ------------------------------------------------------------------------------------------
# Bare `sk-` keys (OpenAI-compatible providers and proxies): both sides of the rule.

def _sk(length: int, alphabet: str, seed: int) -> str:
    rng = random.Random(seed)
    while True:
        run = "".join(rng.choice(alphabet) for _ in range(length))
        if alphabet in (string.ascii_letters, string.digits) or (any(c.isdigit() for c in run) and any(c.isalpha() for c in run)):
            return "s" + "k-" + run


@pytest.mark.parametrize("key", [
    _sk(32, string.ascii_letters + string.digits, 1),  # the shortest that counts
    _sk(32, "0123456789abcdef", 2),  # 32 lower-case hex (DeepSeek-style)
    _sk(200, string.ascii_letters + string.digits, 3),
    "s" + "k-or-v1-" + _sk(64, "0123456789abcdef", 4)[3:],  # a provider segment before the run
])
def test_bare_sk_key_is_found_without_a_keyword(key: str, redactor: Redactor) -> None:
    for text in (f"proxy up; {key} works", json.dumps({"msg": f"log:\n{key}\n"}), f"curl -u {key}: http://gw/v1"):
        redacted, findings = redactor.redact_text(text)
        assert kinds_of(findings) == ["openai_compatible_key"], text
        assert key not in redacted and key[3:] not in redacted


@pytest.mark.parametrize("text", [
    _sk(31, string.ascii_letters + string.digits, 5),  # one character short
    _sk(40, string.ascii_letters, 6),  # letters only
    _sk(40, string.digits, 7),  # digits only
    "ri" + _sk(40, string.ascii_letters + string.digits, 8),  # `risk-...`: `sk-` inside a word
    _sk(40, string.ascii_letters + string.digits, 9) + "_v2",  # the run goes on past the key shape
    "s" + "k-llama-3-8b-instruct-" + "a" * 40,  # a slug, not a key
])
def test_sk_lookalikes_are_not_found(text: str, redactor: Redactor) -> None:
    assert redactor.find_in_text(f"note: {text} end") == []
