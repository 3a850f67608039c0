"""rlkeep restore: an archive at its destination (file://, the real S3 server) back to a folder or a
store prefix, every file checked against the MANIFEST; partial, truncated and tampered archives
name what is missing or wrong and restore the rest; existing files are never replaced unasked."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from rlkeep.archive import parse_manifest, upload_archive
from rlkeep.errors import RlkeepError
from rlkeep.restore import (LocalTarget, StoreTarget, location_from_job_dir, location_from_url, read_manifest,
                            restore_archive)
from rlkeep.storage import open_store
from tests.test_archive import build, expected_members

JOB = "rl-demo"
REPO = Path(__file__).resolve().parents[1]


def kept_members(manifest: Path) -> dict[str, str]:
    """member -> sha256 of every kept MANIFEST line."""
    _, entries = parse_manifest(manifest.read_text(), str(manifest))
    return {e.member: e.sha256 for e in entries if e.reason is None}


def tree_digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def uploaded(tmp_path: Path, dest: str) -> tuple[Path, Path]:
    _, tgz, manifest = build(tmp_path)
    upload_archive(tgz, manifest, dest, JOB)
    return tgz, manifest


def rewrite_tgz(tgz: bytes, edit) -> bytes:
    """The same archive with its members passed through edit(name, data) -> data or None (dropped)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as source, \
            gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info in source:
            data = source.extractfile(info).read()
            data = edit(info.name, data)
            if data is None:
                continue
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkeep", "restore", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("store", ["file", "s3"])
def test_restore_from_the_destination_alone_gives_every_kept_file(tmp_path: Path, store: str, request) -> None:
    dest = (tmp_path / "dest").as_uri() if store == "file" else f"s3://{request.getfixturevalue('bucket')}/archives"
    _, manifest = uploaded(tmp_path / "run", dest)
    result = run_cli(JOB, "--from", dest, "--to", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    restored = tree_digests(tmp_path / "out")
    assert restored.pop("MANIFEST") == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert restored == kept_members(manifest)
    for name, (data, reason) in expected_members().items():  # the bytes the run had, skipped ones absent
        assert (name in restored) == (reason is None)
        if reason is None:
            assert (tmp_path / "out" / name).read_bytes() == data
    evidence = json.loads(result.stdout)
    assert evidence["status"] == "completed" and evidence["restored_files"] == len(restored)
    assert evidence["missing"] == [] and evidence["corrupt"] == []


def test_restore_never_replaces_existing_files_unless_asked(tmp_path: Path) -> None:
    dest = (tmp_path / "dest").as_uri()
    _, manifest = uploaded(tmp_path / "run", dest)
    out = tmp_path / "out"
    (out / "logs" / "store").mkdir(parents=True)
    name = next(m for m in kept_members(manifest) if m.startswith("logs/"))
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(b"mine")
    refused = run_cli(JOB, "--from", dest, "--to", str(out), cwd=tmp_path)
    assert refused.returncode == 1 and name in refused.stderr and "--overwrite" in refused.stderr
    assert (out / name).read_bytes() == b"mine" and not (out / "MANIFEST").exists()  # nothing written
    # the remedy the message gives: the same command with --overwrite
    again = run_cli(JOB, "--from", dest, "--to", str(out), "--overwrite", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert hashlib.sha256((out / name).read_bytes()).hexdigest() == kept_members(manifest)[name]


def test_a_member_deleted_at_the_destination_is_named_and_the_rest_restored(tmp_path: Path, bucket: str) -> None:
    dest = f"s3://{bucket}/archives"
    _, manifest = uploaded(tmp_path / "run", dest)
    store = open_store(f"{dest}/{JOB}")
    victim = sorted(m for m in kept_members(manifest) if m.startswith("trace_jobs/"))[0]
    tgz = store.read_bytes(f"{JOB}_archive.tgz")
    store.put_bytes(f"{JOB}_archive.tgz", rewrite_tgz(tgz, lambda name, data: None if name == victim else data))
    result = run_cli(JOB, "--from", dest, "--to", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 1
    assert victim in result.stderr and "missing from the archive" in result.stderr
    restored = tree_digests(tmp_path / "out")
    restored.pop("MANIFEST")
    assert restored == {m: d for m, d in kept_members(manifest).items() if m != victim}
    assert json.loads(result.stdout)["missing"] == [victim]


def test_a_truncated_archive_keeps_what_came_before_and_names_the_rest(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _, manifest = uploaded(tmp_path / "run", dest.as_uri())
    tgz = dest / JOB / f"{JOB}_archive.tgz"
    tgz.write_bytes(tgz.read_bytes()[: tgz.stat().st_size * 2 // 3])
    result = run_cli(JOB, "--from", dest.as_uri(), "--to", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 1 and "ended early" in result.stderr
    evidence = json.loads(result.stdout)
    kept = kept_members(manifest)
    assert evidence["missing"] and evidence["restored_files"] + len(evidence["missing"]) == len(kept)
    assert evidence["missing"][0] in result.stderr
    restored = tree_digests(tmp_path / "out")
    restored.pop("MANIFEST")
    assert restored and all(kept[name] == digest for name, digest in restored.items())
    assert not list((tmp_path / "out").rglob("*.rlkeep-part"))  # no half-written file under any name


def test_a_changed_member_is_named_and_left_out(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _, manifest = uploaded(tmp_path / "run", dest.as_uri())
    tgz = dest / JOB / f"{JOB}_archive.tgz"
    victim = sorted(m for m in kept_members(manifest) if m.endswith("result.json"))[0]
    tgz.write_bytes(rewrite_tgz(tgz.read_bytes(), lambda name, data: data[:-1] + b"X" if name == victim else data))
    with pytest.raises(RlkeepError):
        raise_if_problems(restore_archive(location_from_url(dest.as_uri(), JOB), LocalTarget(tmp_path / "out")))
    restored = restore_archive(location_from_url(dest.as_uri(), JOB), LocalTarget(tmp_path / "again"))
    assert [line.split(":")[0] for line in restored.extraction.corrupt] == [victim]
    assert any(victim in problem and "the MANIFEST says" in problem for problem in restored.problems)
    assert not (tmp_path / "again" / victim).exists()


def raise_if_problems(restored) -> None:
    if restored.problems:
        raise RlkeepError(restored.message())


def test_without_the_manifest_object_the_archive_describes_itself(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _, manifest = uploaded(tmp_path / "run", dest.as_uri())
    (dest / JOB / "MANIFEST").unlink()
    location = location_from_url(dest.as_uri(), JOB)
    text, where = read_manifest(location)
    assert text == manifest.read_bytes() and "member MANIFEST" in where
    restored = restore_archive(location, LocalTarget(tmp_path / "out"))
    assert restored.problems == [] and len(restored.extraction.restored) == len(kept_members(manifest))


def test_restore_into_a_store_prefix_refuses_existing_objects(tmp_path: Path, bucket: str) -> None:
    dest = (tmp_path / "dest").as_uri()
    _, manifest = uploaded(tmp_path / "run", dest)
    to = f"s3://{bucket}/restored/{JOB}"
    target = StoreTarget(to)
    restored = restore_archive(location_from_url(dest, JOB), target)
    target.close()
    assert restored.problems == []
    store = open_store(to)
    listed = {info.key for info in store.list()}
    assert listed == set(kept_members(manifest)) | {"MANIFEST"}
    name = sorted(listed - {"MANIFEST"})[0]
    assert hashlib.sha256(store.read_bytes(name)).hexdigest() == kept_members(manifest)[name]
    refused = run_cli(JOB, "--from", dest, "--to", to, cwd=tmp_path)
    assert refused.returncode == 1 and "already holds" in refused.stderr


def test_where_the_archive_is_comes_from_the_verify_sentinel(tmp_path: Path) -> None:
    job_dir = tmp_path / JOB
    (job_dir / "verify").mkdir(parents=True)
    with pytest.raises(RlkeepError, match=r"verify/archive.json: missing.*--from"):
        location_from_job_dir(job_dir, JOB)
    sentinel = {"status": "completed", "local": {"tgz": str(job_dir / "archive" / f"{JOB}_archive.tgz"), "sha256": "a" * 64},
                "remote": {"dest": "hf://datasets/org/archives/rl-demo", "commit": "c" * 40}}
    (job_dir / "verify" / "archive.json").write_text(json.dumps(sentinel))
    location = location_from_job_dir(job_dir, JOB)
    assert (location.base, location.revision, location.sha256) == ("hf://datasets/org/archives/rl-demo", "c" * 40, "a" * 64)
    sentinel["remote"] = "not_applicable: the record names no archive.dest"
    (job_dir / "verify" / "archive.json").write_text(json.dumps(sentinel))
    assert location_from_job_dir(job_dir, JOB).base == (job_dir / "archive").as_uri()
    with pytest.raises(RlkeepError, match="--from 'http://x': expected s3://"):
        location_from_url("http://x", JOB)


def test_without_a_data_root_the_message_says_to_name_the_destination_and_that_works(tmp_path: Path) -> None:
    dest = (tmp_path / "dest").as_uri()
    _, manifest = uploaded(tmp_path / "run", dest)
    here = tmp_path / "elsewhere"
    here.mkdir()
    refused = run_cli(JOB, cwd=here)
    assert refused.returncode == 1 and f"rlkeep restore {JOB} --from <archive.dest URL>" in refused.stderr
    followed = run_cli(JOB, "--from", dest, cwd=here)  # the same command with the destination named
    assert followed.returncode == 0, followed.stderr
    assert (here / f"{JOB}-restored" / "MANIFEST").read_bytes() == manifest.read_bytes()


def test_the_rehearsal_writes_only_what_it_compares_and_still_names_a_changed_member(tmp_path: Path) -> None:
    """The rehearsal's target writes the trainer logs only, hands each result.json to its
    reader once its digest is checked, and holds every other member to its MANIFEST digest as it
    streams past, never written."""
    from rlkeep.restore.rehearsal import is_result_member
    from rlkeep.restore.step import compared_member
    from rlkeep.restore.targets import ComparingTarget

    dest = tmp_path / "dest"
    _, manifest = uploaded(tmp_path / "run", dest.as_uri())
    read: dict[str, bytes] = {}

    def target(root: Path) -> ComparingTarget:
        return ComparingTarget(root, compared_member, reads=lambda m: is_result_member(m, "trace_jobs"),
                               read=lambda member, data: read.__setitem__(member, data))

    restored = restore_archive(location_from_url(dest.as_uri(), JOB), target(tmp_path / "scratch"))
    assert restored.problems == []
    assert sorted(restored.extraction.restored) == sorted(kept_members(manifest))
    written = sorted(tree_digests(tmp_path / "scratch"))
    assert written == sorted([m for m in kept_members(manifest) if compared_member(m)] + ["MANIFEST"])
    assert any(m.startswith("logs/attempts/") for m in written) and not any(m.startswith("trace_jobs/") for m in written)
    results = sorted(m for m in kept_members(manifest) if m.endswith("/result.json"))
    assert sorted(read) == results and all(hashlib.sha256(read[m]).hexdigest() == kept_members(manifest)[m]
                                           for m in results)

    tgz = dest / JOB / f"{JOB}_archive.tgz"
    victims = [sorted(m for m in kept_members(manifest) if m.endswith("trajectory.json"))[0], results[0]]
    tgz.write_bytes(rewrite_tgz(tgz.read_bytes(), lambda name, data: data[:-1] + b"X" if name in victims else data))
    read.clear()
    again = restore_archive(location_from_url(dest.as_uri(), JOB), target(tmp_path / "again"))
    assert sorted(line.split(":")[0] for line in again.extraction.corrupt) == sorted(victims)
    assert results[0] not in read  # a changed result.json never reaches the comparison


def test_job_files_are_compared_by_the_manifest_digest_or_by_their_restored_copy(tmp_path: Path) -> None:
    """A job file whose local bytes are not the archived ones is named, whether the MANIFEST carries
    its digest (nothing written) or, in one written before digests, by the copy restored to scratch."""
    from rlkeep.archive.manifest import ManifestEntry
    from rlkeep.restore.rehearsal import differing_job_files
    from rlkeep.restore.step import written_member

    local = tmp_path / "chain.json"
    local.write_bytes(b'{"attempts": ["a"]}')
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    member = "rlkeep/chain.json"
    entries = {member: ManifestEntry(member, local.stat().st_size, None, digest)}
    tree = tmp_path / "tree"
    assert differing_job_files(tree, entries, [(member, local)]) == []
    assert not written_member(entries)(member)
    local.write_bytes(b'{"attempts": ["b"]}')
    assert differing_job_files(tree, entries, [(member, local)]) == [f"{member}: restored bytes differ from {local}"]
    assert differing_job_files(tree, {}, [(member, local)])[0].startswith(f"{member}: not kept in the archive")

    undigested = {member: ManifestEntry(member, local.stat().st_size, None, None)}
    assert written_member(undigested)(member)  # written to scratch so that it can be compared
    assert differing_job_files(tree, undigested, [(member, local)]) == [
        f"{member}: not restored (the archive was built with {local})"]
    (tree / "rlkeep").mkdir(parents=True)
    (tree / member).write_bytes(b'{"attempts": ["a"]}')
    assert differing_job_files(tree, undigested, [(member, local)]) == [f"{member}: restored bytes differ from {local}"]
    (tree / member).write_bytes(local.read_bytes())
    assert differing_job_files(tree, undigested, [(member, local)]) == []


def test_a_refusal_into_a_full_folder_names_the_count_and_the_first_few_paths(tmp_path: Path) -> None:
    """Not one line listing every file it would replace (issue 54): the count, three paths, how many more."""
    dest = (tmp_path / "dest").as_uri()
    _, manifest = uploaded(tmp_path / "run", dest)
    out = tmp_path / "out"
    assert run_cli(JOB, "--from", dest, "--to", str(out), cwd=tmp_path).returncode == 0
    before = tree_digests(out)
    names = ["MANIFEST", *kept_members(manifest)]  # what the restore would write, in the order it checks
    assert len(names) > 4
    refused = run_cli(JOB, "--from", dest, "--to", str(out), cwd=tmp_path)
    assert refused.returncode == 1 and tree_digests(out) == before  # nothing written
    [message] = [line for line in refused.stderr.splitlines() if "already holds" in line]
    assert f"already holds {len(names)} of the archive's files ({', '.join(names[:3])} and {len(names) - 3} more)" \
        in message
    assert names[3] not in refused.stderr and "--overwrite" in message
