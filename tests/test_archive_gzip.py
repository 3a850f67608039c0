"""The archive's gzip: zlib-ng in fixed blocks across threads, the same bytes for the same inputs,
read by GNU tar and Python; archives from the earlier writer (Python's gzip) still verify and restore."""
from __future__ import annotations

import gzip
import hashlib
import io
import random
import subprocess
import tarfile
import zlib
from pathlib import Path

import pytest

from rlkeep.archive import build as archive_build
from rlkeep.archive import upload_archive, verify_archive
from rlkeep.errors import RlkeepError
from rlkeep.restore import LocalTarget, location_from_url, restore_archive
from tests.test_archive import build, expected_members

JOB = "rl-demo"
SMALL_BLOCK = 4096  # the test archive is ~40 KB of tar: many blocks, so block boundaries matter


def kept_contents() -> dict[str, bytes]:
    return {name: data for name, (data, reason) in expected_members().items() if reason is None}


def test_the_same_bytes_across_runs_and_whatever_the_write_sizes(tmp_path: Path, monkeypatch) -> None:
    assert archive_build.GZIP_THREADS == 2  # fixed, not the machine's core count: it shapes the bytes
    monkeypatch.setattr(archive_build, "GZIP_BLOCK", SMALL_BLOCK)
    archives = [build(tmp_path / str(run))[1].read_bytes() for run in range(3)]
    assert len(gzip.decompress(archives[0])) > 4 * SMALL_BLOCK
    assert all(archive == archives[0] for archive in archives[1:])
    header = archives[0][:10]
    assert header[:4] == b"\x1f\x8b\x08\x00" and header[4:8] == b"\x00\x00\x00\x00"  # no FNAME, mtime 0
    members, rest = [], archives[0]
    while rest:
        member = zlib.decompressobj(wbits=31)
        members.append(member.decompress(rest))
        assert member.eof
        rest = member.unused_data
    # the whole tar in one member; gzip_ng_threaded's close adds an empty one (readers join members)
    assert members == [gzip.decompress(archives[0]), b""]

    data = random.Random(52).randbytes(5 * SMALL_BLOCK + 123) + b"trace line\n" * 3000
    outputs = []
    for pieces in ([len(data)], [1, 7, SMALL_BLOCK, 3 * SMALL_BLOCK - 1, 10**6]):
        sink = io.BytesIO()
        with archive_build._gzip_writer(sink, threads=2, block=SMALL_BLOCK) as gz:
            start = 0
            for size in pieces:
                gz.write(data[start:start + size])
                start += size
        outputs.append(sink.getvalue())
    assert outputs[0] == outputs[1] and gzip.decompress(outputs[0]) == data


def test_gnu_tar_and_python_read_the_archive(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(archive_build, "GZIP_BLOCK", SMALL_BLOCK)
    monkeypatch.setattr(archive_build, "GZIP_THREADS", 2)
    _, tgz, _ = build(tmp_path / "run")
    expected = kept_contents()
    listed = subprocess.run(["tar", "-tzf", str(tgz)], check=True, capture_output=True, text=True).stdout.split()
    assert set(expected) <= set(listed) and "MANIFEST" in listed
    out = tmp_path / "gnu"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(tgz), "-C", str(out)], check=True)
    assert {name: (out / name).read_bytes() for name in expected} == expected
    with tarfile.open(tgz, "r:gz") as tar:
        read = {info.name: tar.extractfile(info).read() for info in tar if info.isfile()}
    assert {name: read[name] for name in expected} == expected


def old_writer_tgz(tgz: Path) -> bytes:
    """The same tar stream as main's writer compressed it: Python's gzip, level 6, mtime 0, no name."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        gz.write(gzip.decompress(tgz.read_bytes()))
    return out.getvalue()


def test_an_archive_from_the_earlier_writer_verifies_and_restores(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(archive_build, "GZIP_BLOCK", SMALL_BLOCK)
    _, tgz, manifest = build(tmp_path / "run")
    old = old_writer_tgz(tgz)
    assert old != tgz.read_bytes()
    tgz.write_bytes(old)
    result = verify_archive(tgz, manifest, expected_trees=["logs/", "trace_jobs/", "rlkeep"])
    assert result["sha256"] == hashlib.sha256(old).hexdigest()
    dest = tmp_path / "dest"
    upload_archive(tgz, manifest, dest.as_uri(), JOB)
    assert (dest / JOB / f"{JOB}_archive.tgz").read_bytes() == old
    restored = restore_archive(location_from_url(dest.as_uri(), JOB), LocalTarget(tmp_path / "out"))
    assert restored.problems == []
    assert {name: (tmp_path / "out" / name).read_bytes() for name in kept_contents()} == kept_contents()


@pytest.mark.parametrize("broken", ["truncated", "flipped"])
def test_a_damaged_block_is_still_refused(tmp_path: Path, monkeypatch, broken: str) -> None:
    monkeypatch.setattr(archive_build, "GZIP_BLOCK", SMALL_BLOCK)
    _, tgz, manifest = build(tmp_path / "run")
    data = bytearray(tgz.read_bytes())
    if broken == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    tgz.write_bytes(bytes(data))
    with pytest.raises(RlkeepError, match="rl-demo_archive.tgz"):
        verify_archive(tgz, manifest, expected_trees=["logs/", "trace_jobs/", "rlkeep"])
