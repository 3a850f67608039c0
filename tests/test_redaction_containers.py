"""Redaction fails closed (issue 29): inside gzip, bzip2, xz, zstd, tar, zip, parquet and arrow,
nested; every encoded form of a secret; what cannot be read fails the check; bombs are refused.

Containers are written by their own libraries (gzip, bz2, lzma, zstandard, tarfile, zipfile,
pyarrow) and read back by them after redaction: the members must still open."""
from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import random
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import zstandard

from rlkeep.errors import RlkeepError
from rlkeep.redaction import NO_TEXT_KINDS, Redactor, available_engines, credential_variable_names, redact_tar, redact_tree
from rlkeep.redaction.containers import Walker
from rlkeep.redaction.streams import MIN_JUDGED
from tests.support.memory import exit_facts, exit_facts_script
from tests.support.secrets_corpus import Planted, plant
from tests.support.zipcrypto import encrypted_zip

REPO = Path(__file__).resolve().parents[1]


# `rlkeep redact` run in this interpreter, reporting the peak RSS of its own address space (VmHWM)
# at exit. Not the child's ru_maxrss: Linux carries the forking process's peak over exec, and an
# xdist worker is several hundred MB by the time it starts the child.
PEAK_OF_OWN_MEMORY = exit_facts_script("rlkeep")


def run_cli(args: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """`rlkeep redact` in a child; also the peak RSS in KiB of the child's own memory."""
    env = {k: v for k, v in os.environ.items() if k not in credential_variable_names(os.environ)}
    with tempfile.TemporaryDirectory() as scratch:
        peak_file = Path(scratch) / "peak"
        result = subprocess.run([sys.executable, "-c", PEAK_OF_OWN_MEMORY, str(peak_file), "redact", *args],
                                capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
        return result, exit_facts(peak_file)["peak_kb"]


class Creds:
    """A fake AWS key pair and an hf_ token, and the text of a log line holding them."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.key_id: Planted = plant("aws_access_key_id", rng)
        self.secret_key: Planted = plant("aws_secret_access_key", rng)
        self.hf: Planted = plant("huggingface_token", rng)
        self.values = [self.key_id.secret, self.secret_key.secret, self.hf.secret]

    def text(self) -> bytes:
        return (f"2026-03-30 boot\naws_access_key_id = {self.key_id.secret}\n{self.secret_key.text}\n"
                f"HF_TOKEN={self.hf.secret}\n2026-03-30 done\n").encode()

    def forms(self) -> list[bytes]:
        """Every form of each value a reader could turn back into it."""
        found = []
        for value in self.values:
            found += [value.encode(), quote(value, safe="").encode(), json.dumps(value).replace("/", "\\u002f").encode(),
                      base64.b64encode(value.encode())[4:-4]]
        return found


def leaks(data: bytes, creds: Creds) -> list[bytes]:
    return [form for form in creds.forms() if form in data]


def tar_bytes(members: list[tuple[str, bytes]], mtime: int = 1_774_900_000) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, 0o640
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_bytes(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name, (2026, 3, 30, 12, 0, 0)), data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def tar_members(data: bytes) -> list[tuple[str, int, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, m.mtime, tar.extractfile(m).read()) for m in tar if m.isfile()]  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------
# Done when (1): a gzip and a tar, each with a key pair and a token.

def test_gzip_and_tar_fail_the_check_naming_files_and_members_then_redact_makes_it_pass(tmp_path: Path) -> None:
    creds = Creds(1)
    root = tmp_path / "folder"
    root.mkdir()
    (root / "creds.log.gz").write_bytes(gzip.compress(creds.text(), mtime=1_774_900_000))
    (root / "logs.tar").write_bytes(tar_bytes([("run/notes.txt", b"nothing here\n"), ("run/creds.env", creds.text())]))

    check, _ = run_cli([str(root), "--check"])
    assert check.returncode == 1, check.stderr
    found = {(f["path"], f.get("member"), f["kind"]) for f in json.loads(check.stdout)["findings"]}
    for path, member in (("creds.log.gz", "creds.log"), ("logs.tar", "run/creds.env")):
        assert {(path, member, kind) for kind in ("aws_access_key_id", "aws_secret_access_key",
                                                  "huggingface_token")} <= found
    assert not leaks((check.stdout + check.stderr).encode(), creds)

    redact, _ = run_cli([str(root)])
    assert redact.returncode == 0, redact.stderr
    clean, _ = run_cli([str(root), "--check"])
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["findings"] == [] and json.loads(clean.stdout)["unreadable"] == []

    text = gzip.decompress((root / "creds.log.gz").read_bytes())
    assert not leaks(text, creds) and text.count(b"\n") == 5 and b"<redacted:huggingface_token>" in text
    assert (root / "creds.log.gz").read_bytes()[4:8] == (1_774_900_000).to_bytes(4, "little")  # header time kept
    members = tar_members((root / "logs.tar").read_bytes())
    assert [(name, mtime) for name, mtime, _ in members] == [("run/notes.txt", 1_774_900_000),
                                                             ("run/creds.env", 1_774_900_000)]
    assert members[0][2] == b"nothing here\n" and not leaks(members[1][2], creds)


# ------------------------------------------------------------------------------------------
# Every compression, nested: a compressed tar holding a zip (with a .env) and a compressed log.

COMPRESSORS = {
    "gzip": (".gz", lambda data: gzip.compress(data, mtime=0), gzip.decompress),
    "bzip2": (".bz2", bz2.compress, bz2.decompress),
    "xz": (".xz", lzma.compress, lzma.decompress),
    "zstd": (".zst", lambda data: zstandard.ZstdCompressor().compress(data),
             lambda data: zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()),
}


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_nested_containers_are_read_and_rewritten_deterministically(tmp_path: Path, compression: str) -> None:
    suffix, compress, decompress = COMPRESSORS[compression]
    creds = Creds(2)
    outputs = zip_bytes([("outputs/answer.txt", b"42\n"), ("outputs/.env", f"HF_TOKEN={creds.hf.secret}\n".encode()),
                         ("outputs/credentials", creds.text())])
    inner = tar_bytes([("trial/clean.log", b"step 1\n"), ("trial/outputs.zip", outputs),
                       (f"trial/worker-1.out{suffix}", compress(creds.text()))])
    root = tmp_path / "run"
    root.mkdir()
    (root / f"trial.tar{suffix}").write_bytes(compress(inner))

    report = redact_tree(root, Redactor(), check=True)
    members = {f.member for f in report.findings}
    assert members == {"trial.tar::trial/outputs.zip::outputs/.env", "trial.tar::trial/outputs.zip::outputs/credentials",
                       f"trial.tar::trial/worker-1.out{suffix}::worker-1.out"}
    assert report.unreadable == []

    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / f"trial.tar{suffix}").write_bytes((root / f"trial.tar{suffix}").read_bytes())
    assert redact_tree(root, Redactor()).files_rewritten == [f"trial.tar{suffix}"]
    redact_tree(twin, Redactor())
    rewritten = (root / f"trial.tar{suffix}").read_bytes()
    assert rewritten == (twin / f"trial.tar{suffix}").read_bytes()  # deterministic bytes
    assert redact_tree(root, Redactor(), check=True).findings == []

    members_after = tar_members(decompress(rewritten))
    assert [name for name, _, _ in members_after] == ["trial/clean.log", "trial/outputs.zip", f"trial/worker-1.out{suffix}"]
    assert members_after[0][2] == b"step 1\n"
    with zipfile.ZipFile(io.BytesIO(members_after[1][2])) as archive:
        assert archive.namelist() == ["outputs/answer.txt", "outputs/.env", "outputs/credentials"]
        assert archive.read("outputs/answer.txt") == b"42\n"
        assert archive.getinfo("outputs/.env").date_time == (2026, 3, 30, 12, 0, 0)
        assert not any(leaks(archive.read(name), creds) for name in archive.namelist())
    log = decompress(members_after[2][2])
    assert not leaks(log, creds) and log.startswith(b"2026-03-30 boot\n")


# ------------------------------------------------------------------------------------------
# Done when (3): parquet (and arrow) string cells and metadata.

def _table(token: str) -> pa.Table:
    turns = pa.array([[{"from": "human", "value": "hi"}, {"from": "gpt", "value": f"use {token}"}], None],
                     pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())])))
    schema = pa.schema([pa.field("trial", pa.string()), pa.field("reward", pa.float64()),
                        pa.field("conversations", turns.type, metadata={b"note": b"plain"})],
                       metadata={b"run": f"pushed by {token}".encode()})
    return pa.Table.from_arrays([pa.array([f"t1 {token}", "t2"]), pa.array([1.0, 0.0]), turns], schema=schema)


@pytest.mark.parametrize("form", ["parquet", "arrow-file", "arrow-stream"])
def test_a_token_in_a_string_column_fails_the_check_and_is_redacted_in_place(tmp_path: Path, form: str) -> None:
    token = plant("huggingface_token", random.Random(3)).secret
    root = tmp_path / "shards"
    root.mkdir()
    path = root / ("train-00000-of-00001.parquet" if form == "parquet" else "data-00000-of-00001.arrow")
    table = _table(token)
    if form == "parquet":
        pq.write_table(table, path, row_group_size=1, compression="zstd")
    else:
        with (ipc.new_file if form == "arrow-file" else ipc.new_stream)(path, table.schema) as writer:
            writer.write_table(table)

    check, _ = run_cli([str(root), "--check"])
    assert check.returncode == 1, check.stderr
    members = {f["member"] for f in json.loads(check.stdout)["findings"]}
    assert members == {"column trial", "column conversations.value", "metadata run"}
    assert token not in check.stdout + check.stderr

    assert run_cli([str(root)])[0].returncode == 0
    assert run_cli([str(root), "--check"])[0].returncode == 0
    if form == "parquet":
        again = pq.read_table(path)
        assert pq.ParquetFile(path).num_row_groups == 2
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    else:
        with open(path, "rb") as handle:
            again = (ipc.open_file(handle) if form == "arrow-file" else ipc.open_stream(handle)).read_all()
    assert again.schema.field("conversations").metadata == {b"note": b"plain"}
    assert again.schema.metadata == {b"run": b"pushed by <redacted:huggingface_token>"}
    rows = again.to_pylist()
    assert rows[0]["trial"] == "t1 <redacted:huggingface_token>" and rows[1]["conversations"] is None
    assert rows[0]["conversations"][1] == {"from": "gpt", "value": "use <redacted:huggingface_token>"}
    assert again.column("reward").to_pylist() == [1.0, 0.0]
    assert token.encode() not in path.read_bytes()


# ------------------------------------------------------------------------------------------
# Done when (4): an encrypted zip stops staging; a bomb is refused in bounded time and memory.

def test_an_encrypted_zip_fails_the_check_and_stops_the_archive_naming_it(tmp_path: Path) -> None:
    creds = Creds(4)
    locked = encrypted_zip({"outputs/creds.txt": creds.text()}, b"hunter22")
    with zipfile.ZipFile(io.BytesIO(locked)) as archive:  # a real encrypted zip: the password opens it
        assert archive.read("outputs/creds.txt", pwd=b"hunter22") == creds.text()
    root = tmp_path / "trial"
    root.mkdir()
    (root / "outputs.zip").write_bytes(locked)
    check, _ = run_cli([str(root), "--check"])
    assert check.returncode == 1
    assert json.loads(check.stdout)["unreadable"] == [
        {"path": "outputs.zip", "reason": "encrypted zip (member outputs/creds.txt); rlkeep cannot read or redact it"}]
    assert "could not be read" in check.stderr

    sync_tar = tmp_path / "trace_jobs.tar"
    sync_tar.write_bytes(tar_bytes([("trial-1/result.json", f'{{"key": "{creds.hf.secret}"}}'.encode()),
                                    ("trial-1/outputs.zip", locked)]))
    dest = tmp_path / "out" / "trace_jobs.redacted.tar"
    with pytest.raises(RlkeepError, match=r"member trial-1/outputs\.zip: encrypted zip"):
        redact_tar(sync_tar, dest, Redactor(), work_dir=tmp_path / "scratch")
    assert not dest.exists() and not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True

    # the archive scans each member in its digest pass: the zip stops it there, before a byte is written
    from rlkeep.archive.step import archive_sync_tars
    archive = tmp_path / "archive"
    summary = {"run": "r", "kind": "rl", "cluster": "c", "jobs": ["/u/r"], "first_submitted": None,
               "last_finished": None, "tracker": None}
    with pytest.raises(RlkeepError, match=r"trace_jobs\.tar: member trial-1/outputs\.zip: encrypted zip .*nothing "
                                          r"from this tree is archived"):
        archive_sync_tars(archive / "r_archive.tgz", archive / "MANIFEST", trees=[("trace_jobs", sync_tar)],
                          extra_files=[], summary=summary, large_threshold=1 << 20, work=tmp_path / "work")
    assert not archive.exists() or not list(archive.iterdir())
    assert [p for p in (tmp_path / "work").rglob("*") if p.is_file()] == []
    # as the message says: the zip removed at the source, the tar synced again, and the archive goes on
    sync_tar.write_bytes(tar_bytes([("trial-1/result.json", f'{{"key": "{creds.hf.secret}"}}'.encode())]))
    evidence = archive_sync_tars(archive / "r_archive.tgz", archive / "MANIFEST", trees=[("trace_jobs", sync_tar)],
                                 extra_files=[], summary=summary, large_threshold=1 << 20, work=tmp_path / "work")
    assert evidence["status"] == "completed" and evidence["kept_files"] == 1
    with tarfile.open(archive / "r_archive.tgz") as done:
        kept = done.extractfile("trace_jobs/trial-1/result.json").read()  # type: ignore[union-attr]
    assert creds.hf.secret.encode() not in kept and b"<redacted:" in kept


def _gzip_bomb(path: Path, expanded: int, filler: bytes) -> None:
    """Concatenated gzip members of one repeated byte: `expanded` bytes from ~expanded/1000 on disk."""
    block = gzip.compress(filler * (64 << 20), compresslevel=9, mtime=0)
    with open(path, "wb") as handle:
        for _ in range(expanded // (64 << 20)):
            handle.write(block)


@pytest.mark.parametrize(("filler", "reason"), [(b"\0", "not scanned: binary (NUL bytes)"),
                                                 (b" ", "expands more than 250:1")])
def test_a_ten_gigabyte_gzip_bomb_is_refused_reading_a_bounded_amount(tmp_path: Path, filler: bytes,
                                                                      reason: str) -> None:
    """Zeros are binary after the first bytes and read no further; spaces are text, read until the
    ratio is judged (64 MiB), then refused. Either way: bounded work, bounded memory, exit 1."""
    root = tmp_path / "logs"
    root.mkdir()
    bomb = root / "worker-1.out.gz"
    _gzip_bomb(bomb, 10 << 30, filler)
    assert bomb.stat().st_size < 16 << 20
    check, peak_kib = run_cli([str(root), "--check"])
    assert check.returncode == 1
    [entry] = json.loads(check.stdout)["unreadable"]
    assert entry["path"] == "worker-1.out.gz::worker-1.out" and reason in entry["reason"]
    assert peak_kib < 400 << 10, f"peak RSS {peak_kib} KiB"

    walker = Walker(Redactor())
    with open(bomb, "rb") as handle:
        walker.process(handle, bomb.name, "", None)
    assert walker.budget.decompressed <= MIN_JUDGED + (2 << 20)  # stopped at the first judgement
    if filler == b" ":
        tar = root / "bomb.tar"
        tar.write_bytes(tar_bytes([("logs/worker-1.out.gz", bomb.read_bytes())]))
        with pytest.raises(RlkeepError, match=r"member logs/worker-1\.out\.gz::worker-1\.out: .*a bomb"):
            redact_tar(tar, tmp_path / "x.tar", Redactor(), work_dir=tmp_path / "scratch")


def test_zip_bombs_and_deep_nesting_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.log", bytes(128 << 20))
    (root / "bomb.zip").write_bytes(buffer.getvalue())
    nested = b"deep\n"
    for _ in range(8):
        nested = gzip.compress(nested, mtime=0)
    (root / "deep.gz").write_bytes(nested)
    report = redact_tree(root, Redactor(), check=True)
    reasons = dict(report.unreadable)
    assert "expands more than 250:1" in reasons["bomb.zip::zeros.log"]
    assert any("nested deeper than" in reason for path, reason in report.unreadable if path.startswith("deep.gz"))


# ------------------------------------------------------------------------------------------
# Fail closed: only a short, explicit list of kinds may go unread.

def test_only_kinds_that_carry_no_text_may_go_unread(tmp_path: Path) -> None:
    assert NO_TEXT_KINDS == ("png", "jpeg", "gif", "webp", "numpy")
    root = tmp_path / "model"
    root.mkdir()
    (root / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"
    (root / "w.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(16))
    clean, _ = run_cli([str(root), "--check"])
    assert clean.returncode == 0, clean.stderr
    assert {entry["path"] for entry in json.loads(clean.stdout)["files_skipped"]} == {"plot.png", "w.npy"}

    (root / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(64))
    (root / "truncated.log.gz").write_bytes(gzip.compress(b"x" * 10_000)[:40])
    failed, _ = run_cli([str(root), "--check"])
    assert failed.returncode == 1
    unreadable = {entry["path"]: entry["reason"] for entry in json.loads(failed.stdout)["unreadable"]}
    assert unreadable["tool"] == "not scanned: binary (elf)"
    assert "gzip stream is corrupt or truncated" in unreadable["truncated.log.gz::truncated.log"]


def test_a_pickle_is_scanned_as_bytes_and_a_finding_in_it_stops_redaction(tmp_path: Path) -> None:
    """HF Trainer's training_args.bin is a pickle that may hold `hub_token`: its strings are plain
    bytes, so it is read (not unreadable); rlkeep cannot rewrite it, so redaction stops naming it."""
    token = plant("huggingface_token", random.Random(8)).secret
    root = tmp_path / "export"
    root.mkdir()
    (root / "clean.pt").write_bytes(pickle.dumps({"learning_rate": 1e-6}, protocol=4))
    (root / "training_args.bin").write_bytes(pickle.dumps({"hub_token": token, "learning_rate": 1e-6}, protocol=4))
    check, _ = run_cli([str(root), "--check"])
    report = json.loads(check.stdout)
    assert check.returncode == 1 and report["unreadable"] == [] and report["files_scanned"] == 2
    assert [(f["path"], f["kind"]) for f in report["findings"]] == [("training_args.bin", "huggingface_token")]
    before = (root / "training_args.bin").read_bytes()
    with pytest.raises(RlkeepError, match=r"training_args\.bin: credential-shaped text inside a pickle file"):
        redact_tree(root, Redactor())
    assert (root / "training_args.bin").read_bytes() == before


# ------------------------------------------------------------------------------------------
# Every form of a secret.

def _forms(creds: Creds) -> dict[str, str]:
    ini = f"[default]\naws_access_key_id = {creds.key_id.secret}\n{creds.secret_key.text}\n"
    return {
        "base64 token": "token blob: " + base64.b64encode(creds.hf.secret.encode()).decode() + " end",
        "base64 .env": json.dumps({"env": base64.b64encode(f"HF_TOKEN={creds.hf.secret}\n".encode()).decode()}),
        "base64 wrapped credentials": json.dumps({"file": base64.encodebytes(ini.encode()).decode()}),
        "url-encoded": "GET /?q=" + quote(ini, safe=""),
        "url-encoded secret": "aws_secret_access_key=" + quote(creds.secret_key.secret, safe=""),
        "json-escaped": json.dumps({"credentials": ini}).replace("/", "\\u002f").replace("_", "\\u005f"),
        "wrapped in a json string": json.dumps({"obs": "$ env\nHF_TOKEN=" + creds.hf.secret[:21] + "\n"
                                                + creds.hf.secret[21:] + "\n$ "}),
        "wrapped key id": json.dumps({"obs": "id " + creds.key_id.secret[:9] + "\r\n" + creds.key_id.secret[9:]}),
        "wrapped raw": "export HF_TOKEN=" + creds.hf.secret[:30] + "\n" + creds.hf.secret[30:] + "\nnext\n",
    }


@pytest.mark.parametrize("engine", available_engines())
def test_every_form_of_a_secret_is_found_and_gone_after_redaction(engine: str) -> None:
    creds = Creds(5)
    redactor = Redactor(engine=engine)
    for name, text in _forms(creds).items():
        redacted, found = redactor.redact_text(text)
        assert found, name
        pieces = [creds.hf.secret[:21], creds.hf.secret[21:], creds.hf.secret[30:], creds.key_id.secret[9:]]
        assert not leaks(redacted.encode(), creds) and not any(p in redacted for p in pieces), (name, redacted)
        assert redactor.find_in_text(redacted) == [], name  # idempotent


def test_a_terminal_line_that_merely_ends_a_token_does_not_swallow_the_next_line() -> None:
    token = plant("slack_token", random.Random(6)).secret
    redacted, _ = Redactor().redact_text(f"slack {token}\nbye\n")
    assert redacted == "slack <redacted:slack_token>\nbye\n"


@pytest.mark.parametrize("shift", [-300, -40, -7, 0, 9, 200])
def test_encoded_forms_across_a_window_edge_stream_as_they_redact_in_memory(shift: int) -> None:
    creds = Creds(7)
    forms = "\n".join(_forms(creds).values()) + "\n"
    filler = b"".join(b"step %06d loss=0.25 reward=1.0 path=/runs/a/b\n" % i for i in range(40_000))
    from rlkeep.redaction.common import CHUNK_SIZE

    cut = filler.rfind(b"\n", 0, CHUNK_SIZE - 64 * 1024 + shift) + 1  # near where the first window commits
    data = filler[:cut] + forms.encode() + filler[cut:] + forms.encode()
    redactor = Redactor()
    expected, found = redactor.redact_bytes(data)
    pieces: list[bytes] = []

    class Collect:
        def emit(self, original: memoryview, redacted: memoryview | None) -> None:
            pieces.append(bytes(original if redacted is None else redacted))

        def finish(self) -> bool:
            return True

        def abort(self) -> None:
            pass

    streamed = redactor.redact_stream(io.BytesIO(data).read, Collect())
    assert b"".join(pieces) == expected and streamed == found
    assert not leaks(expected, creds)


_ONE_REDACTOR = Redactor()  # built once: a Redactor compiles its prefilter


@settings(max_examples=300, deadline=None)
@given(dirty=st.frozensets(st.text(alphabet=":ab/", max_size=12), max_size=6), where=st.text(alphabet=":ab/", max_size=12))
def test_a_member_is_dirty_exactly_when_it_had_a_finding_or_holds_one(dirty: frozenset[str], where: str) -> None:
    walker = Walker(_ONE_REDACTOR, dirty=dirty)
    assert walker.is_dirty(where) == (where in dirty or any(path.startswith(where + "::") for path in dirty))
