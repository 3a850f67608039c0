"""Archive: one deterministic tgz of everything informative, its MANIFEST, local and remote verification."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from rlkeep.archive import (
    DEFAULT_LARGE_THRESHOLD,
    archive_rule,
    build_archive,
    job_files,
    parse_manifest,
    summary_from_chain,
    upload_archive,
    verify_archive,
    verify_uploaded_archive,
)
from rlkeep.errors import RlkeepError
from rlkeep.records import validate_record_data
from rlkeep.storage import open_store

THRESHOLD = 4096
SUMMARY = {"run": "rl-demo", "kind": "rl", "cluster": "cw-test", "jobs": ["/demo/rl-demo", "/demo/rl-demo-r1"],
           "first_submitted": "2026-01-02T03:04:05Z", "last_finished": "2026-01-05T06:07:08Z",
           "tracker": "https://wandb.ai/team/project/runs/abc123"}

# member inside its source tar -> (content, expected skip reason or None)
LOGS = {
    "attempts/rl-demo/trainer.log": (b"step 1 reward 0.1\n" * 50, None),
    "attempts/rl-demo-r1/trainer.log": (b"step 2 reward 0.3\n" * 50, None),
    "store/launch/command.sh": (b"python -m skyrl.train --config run.yaml\n", None),
    "store/launch/run.yaml": (b"trainer:\n  lr: 1e-6\n", None),
    "store/ray/session/logs/raylet.out": (b"raylet started\n", None),
    "store/ckpts/global_step_20/trainer_state.json": (b'{"step": 20}', "checkpoint"),
    "store/ckpts/latest_ckpt_global_step.txt": (b"20", None),
    "store/exports/global_step_20/policy/model.safetensors": (b"\x00" * 64, "weights"),
    "store/debug/core.4711": (b"\x7fELF" + b"\x00" * 100, "core_dump"),
    "store/debug/core": (b"\x7fELF" * 10, "core_dump"),
    "store/debug/java_pid1.hprof": (b"JAVA PROFILE", "core_dump"),
    "store/tools/core.py": (b"def main():\n    pass\n", None),
    "store/tools/__pycache__/core.cpython-311.pyc": (b"\x00" * 32, "cache"),
    "store/.venv/lib/site.py": (b"# venv\n", "cache"),
    "store/weights/optim.pt": (b"\x00" * 48, "weights"),
    "store/weights/pytorch_model.bin": (b"\x00" * 48, "weights"),
}
TRACES = {
    "task-b__0002/result.json": (b'{"reward": 1}', None),
    "task-b__0002/agent/trajectory.json": (os.urandom(THRESHOLD * 3), None),  # raw transcripts: always kept
    "task-b__0002/agent/terminus_2.pane": (b"$ " * THRESHOLD, "large_terminal_recording"),
    "task-b__0002/agent/recording.cast": (b"[0.1, \"o\", \"x\"]\n" * 600, "large_terminal_recording"),
    "task-a__0001/result.json": (b'{"reward": 0}', None),
    "task-a__0001/agent/terminus_2.pane": (b"$ ls\n", None),  # small panes are kept
    "task-a__0001/agent/recording.cast": (b"[0.1, \"o\", \"ls\"]\n", None),
    "task-a__0001/verifier/reward.txt": (b"0\n", None),
    "task-a__0001/trial.log": (b"trial started\n", None),
}


def write_tar(path: Path, members: dict[str, tuple[bytes, str | None]], *, order: list[str] | None = None) -> Path:
    """A sync-like tar, members in the given order (deliberately not sorted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in order or list(members):
            data = members[name][0]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


def job_tree(root: Path) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    sync = root / "rl-demo" / "sync"
    logs = write_tar(sync / "logs.tar", LOGS)
    traces = write_tar(sync / "trace_jobs.tar", TRACES)
    for name, text in {"chain.json": '{"attempts": []}', "retries.json": '{"status": "not_applicable"}',
                       "sync/logs.manifest.json": "{}", "sync/trace_jobs.manifest.json": "{}",
                       "metrics/metrics.csv": "step,attempt,reward\n1,rl-demo,0.1\n",
                       "metrics/report.md": "# report\n", "metrics/reward.png": "PNG"}.items():
        path = root / "rl-demo" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    record = root / "records" / "rl-demo.yaml"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("job: rl-demo\n")
    return [("logs", logs), ("trace_jobs", traces)], job_files(root / "rl-demo", record)


def build(root: Path, out: Path | None = None, **overrides) -> tuple[dict, Path, Path]:
    sources, extra = job_tree(root)
    out = out or root / "rl-demo" / "archive"
    kwargs = {"sources": sources, "extra_files": extra, "summary": SUMMARY, "large_threshold": THRESHOLD, **overrides}
    evidence = build_archive(out / "rl-demo_archive.tgz", out / "MANIFEST", **kwargs)
    return evidence, out / "rl-demo_archive.tgz", out / "MANIFEST"


def expected_members() -> dict[str, tuple[bytes, str | None]]:
    expected = {f"logs/{k}": v for k, v in LOGS.items()}
    expected.update({f"trace_jobs/{k}": v for k, v in TRACES.items()})
    return expected


# --------------------------------------------------------------------------- the skip rule


@pytest.mark.parametrize(("member", "size", "reason"), [
    ("logs/store/ckpts/global_step_40/model_world_size_2_rank_0.pt", 10, "weights"),
    ("logs/store/exports/global_step_40/policy/config.json", 10, "checkpoint"),
    ("logs/store/ckpts/latest_ckpt_global_step.txt", 2, None),
    ("logs/store/model/model-00001-of-00002.safetensors", 1, "weights"),
    ("logs/store/model/pytorch_model.bin", 1, "weights"),
    ("logs/store/core", 1, "core_dump"),
    ("logs/store/core.12345", 1, "core_dump"),
    ("logs/store/core.python.12345", 1, "core_dump"),
    ("logs/store/heap.hprof", 1, "core_dump"),
    ("trace_jobs/t1/repo/src/core.py", 1, None),
    ("trace_jobs/t1/repo/core/config.json", 1, None),
    ("trace_jobs/t1/agent/terminus_2.pane", DEFAULT_LARGE_THRESHOLD + 1, "large_terminal_recording"),
    ("trace_jobs/t1/agent/terminus_2.pane", DEFAULT_LARGE_THRESHOLD, None),
    ("trace_jobs/t1/agent/recording.cast", DEFAULT_LARGE_THRESHOLD + 1, "large_terminal_recording"),
    ("trace_jobs/t1/agent/recording.cast", 100, None),
    ("trace_jobs/t1/agent/trajectory.json", 10 * DEFAULT_LARGE_THRESHOLD, None),
    ("logs/store/vllm.log", 10 * DEFAULT_LARGE_THRESHOLD, None),
    ("logs/store/x/__pycache__/m.cpython-311.pyc", 1, "cache"),
    ("logs/store/.venv/bin/python", 1, "cache"),
    ("logs/store/.cache/pip/wheels/a.whl", 1, "cache"),
    ("logs/store/wandb/run-abc/files/output.log", 1, None),
])
def test_archive_rule_skips_only_the_non_informative_and_large(member: str, size: int, reason: str | None) -> None:
    assert archive_rule(member, size, large_threshold=DEFAULT_LARGE_THRESHOLD) == reason


# --------------------------------------------------------------------------- build


def test_build_keeps_everything_informative_and_lists_every_artifact(tmp_path: Path) -> None:
    evidence, tgz, manifest = build(tmp_path)
    expected = expected_members()
    kept = {name: data for name, (data, reason) in expected.items() if reason is None}
    skipped = {name: (data, reason) for name, (data, reason) in expected.items() if reason is not None}

    with tarfile.open(tgz, "r:gz") as tar:
        infos = tar.getmembers()
        names = [info.name for info in infos]
        assert names[0] == "MANIFEST"
        body = tar.extractfile("MANIFEST")
        assert body is not None and body.read() == manifest.read_bytes()
        assert names[1:] == sorted(names[1:], key=str.encode)  # sorted member order
        for info in infos:
            assert (info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode) == (0, 0, 0, "", "", 0o644)
        contents = {}
        for info in infos[1:]:
            handle = tar.extractfile(info)
            assert handle is not None
            contents[info.name] = handle.read()
    rlkeep_members = {n for n in contents if n.startswith("rlkeep/")}
    assert {n: d for n, d in contents.items() if not n.startswith("rlkeep/")} == kept
    assert rlkeep_members == {"rlkeep/chain.json", "rlkeep/retries.json", "rlkeep/sync/logs.manifest.json",
                              "rlkeep/sync/trace_jobs.manifest.json", "rlkeep/metrics/metrics.csv",
                              "rlkeep/metrics/report.md", "rlkeep/metrics/reward.png", "rlkeep/records/rl-demo.yaml"}
    assert contents["rlkeep/metrics/metrics.csv"] == (tmp_path / "rl-demo/metrics/metrics.csv").read_bytes()

    lines = manifest.read_text().splitlines()
    kept_bytes = sum(len(d) for d in kept.values()) + sum(len(contents[n]) for n in rlkeep_members)
    assert lines[0] == (
        "run=rl-demo kind=rl cluster=cw-test jobs=/demo/rl-demo,/demo/rl-demo-r1 "
        "dates=2026-01-02T03:04:05Z..2026-01-05T06:07:08Z "
        f"kept={len(kept) + len(rlkeep_members)}files,{kept_bytes}bytes "
        f"skipped={len(skipped)}files,{sum(len(d) for d, _ in skipped.values())}bytes "
        "tracker=https://wandb.ai/team/project/runs/abc123"
    )
    listed = {}
    for line in lines[1:]:
        fields = line.split("\t")
        listed[fields[2]] = fields
    assert {n for n, f in listed.items() if f[0] == "kept"} == set(kept) | rlkeep_members
    for name, (data, reason) in skipped.items():
        assert listed[name] == ["skipped", str(len(data)), name, reason]
    for name, data in kept.items():  # each kept line carries the sha256 of the bytes archived
        assert listed[name] == ["kept", str(len(data)), name, hashlib.sha256(data).hexdigest()]
    for name in rlkeep_members:
        assert listed[name][3] == hashlib.sha256(contents[name]).hexdigest()

    assert evidence["kept_files"] == len(kept) + len(rlkeep_members) and evidence["kept_bytes"] == kept_bytes
    assert evidence["skipped_files"] == len(skipped)
    assert evidence["skipped_by_reason"]["weights"]["files"] == 3
    assert evidence["trees"] == ["logs/", "rlkeep/", "trace_jobs/"]
    assert evidence["sha256"] == hashlib.sha256(tgz.read_bytes()).hexdigest()
    assert evidence["tgz_bytes"] == tgz.stat().st_size
    listing = subprocess.run(["tar", "tzf", str(tgz)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "trace_jobs/task-a__0001/agent/recording.cast" in listing
    assert "logs/store/exports/global_step_20/policy/model.safetensors" not in listing
    assert not list(tgz.parent.glob(".*part"))


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    _, first, first_manifest = build(tmp_path / "a")
    os.utime(tmp_path / "a" / "rl-demo" / "chain.json", (1, 1))
    _, second, second_manifest = build(tmp_path / "b", out=tmp_path / "elsewhere")
    assert first.read_bytes() == second.read_bytes()
    assert first_manifest.read_bytes() == second_manifest.read_bytes()
    header = first.read_bytes()[:10]
    assert header[:2] == b"\x1f\x8b" and header[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
    assert header[3] & 0x08 == 0  # no FNAME field
    with gzip.open(first) as gz:
        assert gz.read(512)[:8] == b"MANIFEST"


def test_unsorted_sources_are_streamed_in_sorted_order(tmp_path: Path) -> None:
    _, sorted_tgz, _ = build(tmp_path / "sorted")
    sources, extra = job_tree(tmp_path / "shuffled")
    write_tar(sources[1][1], TRACES, order=sorted(TRACES, reverse=True))
    out = tmp_path / "shuffled" / "out"
    build_archive(out / "a.tgz", out / "MANIFEST", sources=sources, extra_files=extra, summary=SUMMARY,
                  large_threshold=THRESHOLD)
    assert (out / "a.tgz").read_bytes() == sorted_tgz.read_bytes()


def test_threshold_is_a_parameter(tmp_path: Path) -> None:
    evidence, _, manifest = build(tmp_path, large_threshold=10 << 20)
    assert "large_terminal_recording" not in evidence["skipped_by_reason"]
    assert "kept\t" in manifest.read_text() and "terminus_2.pane\tlarge" not in manifest.read_text()


def test_summary_from_record_and_chain() -> None:
    record = validate_record_data(
        {"job": "rl-demo", "user": "demo", "scheduler": "iris", "cluster": "cw-test",
         "chain": ["/demo/rl-demo", "/demo/rl-demo-r1"], "store": "s3://bucket/iris/rl-demo",
         "checkpoint": {"interval": 20}, "tracker_url": "https://wandb.ai/t/p/runs/x"},
        Path("records/rl-demo.yaml"))
    chain = {"attempts": [{"id": "/demo/rl-demo", "submitted_ms": 1_767_225_600_000, "finished_ms": 1_767_229_200_000},
                          {"id": "/demo/rl-demo-r1", "submitted_ms": 1_767_230_000_000, "finished_ms": 1_767_312_000_000}]}
    summary = summary_from_chain(record, chain)
    assert summary["jobs"] == ["/demo/rl-demo", "/demo/rl-demo-r1"]
    assert summary["first_submitted"] == "2026-01-01T00:00:00Z"
    assert summary["last_finished"] == "2026-01-02T00:00:00Z"
    assert summary["tracker"] == "https://wandb.ai/t/p/runs/x" and summary["cluster"] == "cw-test"
    with pytest.raises(RlkeepError, match="chain.json: field 'attempts'"):
        summary_from_chain(record, {"attempts": []})


def test_bad_inputs_fail_clearly_and_write_nothing(tmp_path: Path) -> None:
    sources, extra = job_tree(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(RlkeepError, match="unsafe name"):
        evil = write_tar(tmp_path / "evil.tar", {"../../etc/passwd": (b"x", None)})
        build_archive(out / "a.tgz", out / "MANIFEST", sources=[("logs", evil)], extra_files=[], summary=SUMMARY)
    with pytest.raises(RlkeepError, match=r"missing.tar: sync tar for archive tree trace_jobs/ does not exist"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=[("trace_jobs", tmp_path / "missing.tar")],
                      extra_files=[], summary=SUMMARY)
    not_a_tar = tmp_path / "junk.tar"
    not_a_tar.write_bytes(b"this is not a tar" * 100)
    with pytest.raises(RlkeepError, match="junk.tar: not a readable tar"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=[("logs", not_a_tar)], extra_files=[], summary=SUMMARY)
    with pytest.raises(RlkeepError, match="field 'run' is missing"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=sources, extra_files=extra, summary={"jobs": ["x"]})
    with pytest.raises(RlkeepError, match="field 'cluster' is 'two words'"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=sources, extra_files=extra,
                      summary={**SUMMARY, "cluster": "two words"})
    with pytest.raises(RlkeepError, match="no-such.csv: job file for archive member rlkeep/x.csv does not exist"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=sources,
                      extra_files=[("x.csv", tmp_path / "no-such.csv")], summary=SUMMARY)
    with pytest.raises(RlkeepError, match="expected one of logs, trace_jobs"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=[("weights", sources[0][1])], extra_files=[], summary=SUMMARY)
    assert not out.exists() or not any(out.iterdir())


def test_a_truncated_source_tar_leaves_no_output(tmp_path: Path) -> None:
    sources, extra = job_tree(tmp_path)
    data = sources[1][1].read_bytes()
    sources[1][1].write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    with pytest.raises(RlkeepError, match="trace_jobs.tar"):
        build_archive(out / "a.tgz", out / "MANIFEST", sources=sources, extra_files=extra, summary=SUMMARY,
                      large_threshold=THRESHOLD)
    assert not out.exists() or not any(out.iterdir())


# --------------------------------------------------------------------------- verify


def test_verify_accepts_a_good_archive(tmp_path: Path) -> None:
    evidence, tgz, manifest = build(tmp_path)
    result = verify_archive(tgz, manifest, expected_trees=["logs/", "trace_jobs/", "rlkeep"])
    assert result["sha256"] == evidence["sha256"]
    assert result["kept_files"] == evidence["kept_files"]
    assert result["members"] == evidence["kept_files"] + 1  # + the embedded MANIFEST
    assert result["trees"] == ["logs/", "rlkeep/", "trace_jobs/"]
    assert result["summary"].startswith("run=rl-demo kind=rl ")


def rewrite_manifest(manifest: Path, edit) -> None:
    """Edit the MANIFEST lines and keep the summary counts consistent (a plausible but wrong MANIFEST)."""
    parse_manifest(manifest.read_text(), str(manifest))  # it parses before the edit
    lines = manifest.read_text().splitlines()
    body = edit(lines[1:])
    kept = [l.split("\t") for l in body if l.startswith("kept\t")]
    skipped = [l.split("\t") for l in body if l.startswith("skipped\t")]
    head = lines[0].split(" ")
    head = [f"kept={len(kept)}files,{sum(int(f[1]) for f in kept)}bytes" if t.startswith("kept=") else
            f"skipped={len(skipped)}files,{sum(int(f[1]) for f in skipped)}bytes" if t.startswith("skipped=") else t
            for t in head]
    manifest.write_text("\n".join([" ".join(head), *body]) + "\n")


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda body: body + ["kept\t5\tlogs/store/never-archived.txt"], "kept member logs/store/never-archived.txt is missing"),
    (lambda body: ["\t".join(["skipped", *l.split("\t")[1:3], "weights"]) if "result.json" in l else l for l in body],
     r"skipped member trace_jobs/task-\S+/result.json \(weights\) is in the archive"),
    (lambda body: [l.replace("kept\t2\t", "kept\t3\t") for l in body], "has 2 bytes in the archive, MANIFEST says 3"),
    (lambda body: [l for l in body if "trial.log" not in l], "is not listed as kept in the MANIFEST"),
])
def test_verify_names_every_disagreement(tmp_path: Path, edit, problem: str) -> None:
    _, tgz, manifest = build(tmp_path)
    rewrite_manifest(manifest, edit)
    with pytest.raises(RlkeepError, match=problem):
        verify_archive(tgz, manifest, expected_trees=["logs/", "trace_jobs/"])


def test_verify_rejects_truncated_missing_trees_and_inconsistent_summaries(tmp_path: Path) -> None:
    _, tgz, manifest = build(tmp_path)
    with pytest.raises(RlkeepError, match="expected tree wandb/ is not in the archive"):
        verify_archive(tgz, manifest, expected_trees=["logs/", "wandb/"])
    text = manifest.read_text()
    manifest.write_text(text.replace("kept=", "kept=1", 1))
    with pytest.raises(RlkeepError, match="MANIFEST summary kept="):
        verify_archive(tgz, manifest, expected_trees=["logs/"])
    manifest.write_text(text)
    manifest.write_text(text + "maybe\t12\n")
    with pytest.raises(RlkeepError, match=rf"{manifest}: line \d+: 'maybe\\t12'"):
        verify_archive(tgz, manifest, expected_trees=["logs/"])
    manifest.write_text(text)
    data = tgz.read_bytes()
    tgz.write_bytes(data[: len(data) - 200])
    with pytest.raises(RlkeepError, match="not a readable gzip tar"):
        verify_archive(tgz, manifest, expected_trees=["logs/"])
    tgz.write_bytes(b"")
    with pytest.raises(RlkeepError, match="empty|not a readable"):
        verify_archive(tgz, manifest, expected_trees=["logs/"])


def test_verify_rejects_an_archive_of_only_one_tree(tmp_path: Path) -> None:
    sources, extra = job_tree(tmp_path)
    out = tmp_path / "out"
    build_archive(out / "a.tgz", out / "MANIFEST", sources=sources[:1], extra_files=extra, summary=SUMMARY)
    with pytest.raises(RlkeepError, match="expected tree trace_jobs/ is not in the archive"):
        verify_archive(out / "a.tgz", out / "MANIFEST", expected_trees=["logs/", "trace_jobs/"])


def test_member_names_with_tabs_survive_the_manifest(tmp_path: Path) -> None:
    odd = {"t1/notes\twith tab.txt": (b"a", None), "t1/two\nlines.txt": (b"bc", None)}
    tar = write_tar(tmp_path / "trace_jobs.tar", odd)
    out = tmp_path / "out"
    build_archive(out / "a.tgz", out / "MANIFEST", sources=[("trace_jobs", tar)], extra_files=[], summary=SUMMARY)
    assert len(out.joinpath("MANIFEST").read_text().splitlines()) == 3
    _, entries = parse_manifest(out.joinpath("MANIFEST").read_text(), "MANIFEST")
    assert {e.member for e in entries} == {f"trace_jobs/{name}" for name in odd}
    verify_archive(out / "a.tgz", out / "MANIFEST", expected_trees=["trace_jobs/"])


# --------------------------------------------------------------------------- upload (real S3 server)


def test_upload_verifies_remotely_by_size_and_fresh_sha256(tmp_path: Path, bucket: str) -> None:
    evidence, tgz, manifest = build(tmp_path)
    result = upload_archive(tgz, manifest, f"s3://{bucket}/archives/", "rl-demo")
    assert result["status"] == "completed" and result["dest"] == f"s3://{bucket}/archives/rl-demo"
    by_key = {o["key"]: o for o in result["objects"]}
    assert by_key["rl-demo_archive.tgz"]["sha256"] == evidence["sha256"]
    assert by_key["rl-demo_archive.tgz"]["size"] == tgz.stat().st_size
    assert by_key["MANIFEST"]["sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    remote = open_store(f"s3://{bucket}/archives/rl-demo")
    assert remote.read_bytes("rl-demo_archive.tgz") == tgz.read_bytes()
    assert sorted(i.key for i in remote.list()) == ["MANIFEST", "rl-demo_archive.tgz"]


def test_a_remote_that_differs_is_never_reported_verified(tmp_path: Path, bucket: str, monkeypatch) -> None:
    monkeypatch.setenv("RLKEEP_STORE_CONSISTENCY_WAIT", "1")  # a difference that stays fails after this bound
    _, tgz, manifest = build(tmp_path)
    dest = f"s3://{bucket}/archives"
    upload_archive(tgz, manifest, dest, "rl-demo")
    remote = open_store(f"{dest}/rl-demo")
    original = manifest.read_bytes()
    remote.put_bytes("MANIFEST", original[:-2] + b"X\n")  # another writer: same size, other content
    with pytest.raises(RlkeepError, match=r"rl-demo/MANIFEST: a fresh read gave \d+ bytes with sha256 .*not verified"):
        verify_uploaded_archive(tgz, manifest, dest, "rl-demo")
    remote.put_bytes("MANIFEST", original[:-10])
    with pytest.raises(RlkeepError, match=r"rl-demo/MANIFEST: listed with \d+ bytes, the local file has \d+"):
        verify_uploaded_archive(tgz, manifest, dest, "rl-demo")
    remote.delete(["rl-demo_archive.tgz"])
    with pytest.raises(RlkeepError, match="rl-demo_archive.tgz: not in the listing of its folder.*not verified"):
        verify_uploaded_archive(tgz, manifest, dest, "rl-demo")


def test_upload_to_a_file_destination(tmp_path: Path) -> None:
    _, tgz, manifest = build(tmp_path)
    result = upload_archive(tgz, manifest, f"file://{tmp_path}/dest", "rl-demo")
    assert (tmp_path / "dest/rl-demo/rl-demo_archive.tgz").read_bytes() == tgz.read_bytes()
    assert {o["key"] for o in result["objects"]} == {"rl-demo_archive.tgz", "MANIFEST"}


# --------------------------------------------------------------------------- cross-region copy (real S3 server)


def archive_step_context(root: Path, bucket: str, *, store_region: str | None, archive_region: str | None,
                         config: dict | None = None):
    from rlkeep.context import StepContext

    _, tgz, manifest = build(root)
    archive = {"dest": f"s3://{bucket}/archives"} | ({"region": archive_region} if archive_region else {})
    data = {"job": "rl-demo", "user": "demo", "scheduler": "iris", "cluster": "cw-test", "chain": ["/demo/rl-demo"],
            "store": f"s3://{bucket}/iris/rl-demo", "checkpoint": {"interval": 20}, "archive": archive}
    if store_region:
        data["store_region"] = store_region
    record = validate_record_data(data, root / "records" / "rl-demo.yaml")
    return StepContext(job="rl-demo", record=record, data_root=root, inputs={"tgz": tgz, "manifest": manifest},
                       outputs={"verify": root / "rl-demo" / "verify" / "archive.json"},
                       settings={"dest": archive["dest"]}, config={"policy": {"max_transfer_bytes": 0}, **(config or {})})


def test_a_cross_region_archive_copy_is_refused_without_the_allowance(tmp_path: Path, bucket: str) -> None:
    from rlkeep.archive import verify_archive_step
    from rlkeep.jsonio import read_json

    ctx = archive_step_context(tmp_path, bucket, store_region="us-east-02a", archive_region="eu-west-1")
    for config in ({}, {"allow_transfer": "another-job"}):
        ctx.config.update(config)
        with pytest.raises(RlkeepError, match=r"archive upload to s3://.*crosses regions \(us-east-02a -> eu-west-1\): "
                                              r"source region from record field store_region, destination region "
                                              r"from record field archive.region; nothing was transferred\. .*"
                                              r"--config allow_transfer=rl-demo"):
            verify_archive_step(ctx)
        assert list(open_store(f"s3://{bucket}/archives").list()) == []
        assert not ctx.outputs["verify"].exists()

    ctx.config["allow_transfer"] = "rl-demo"
    verify_archive_step(ctx)
    sentinel = read_json(ctx.outputs["verify"])
    assert sentinel["transfer"]["source_region"] == {"region": "us-east-02a", "source": "record field store_region"}
    assert sentinel["transfer"]["dest_region"] == {"region": "eu-west-1", "source": "record field archive.region"}
    assert sentinel["transfer"]["cross_region"] is True
    assert sentinel["transfer"]["allowed_by"] == "--config allow_transfer=rl-demo"
    assert sorted(i.key for i in open_store(f"s3://{bucket}/archives").list()) == [
        "rl-demo/MANIFEST", "rl-demo/rl-demo_archive.tgz"]


def test_a_same_region_archive_copy_needs_no_allowance(tmp_path: Path, bucket: str) -> None:
    from rlkeep.archive import verify_archive_step
    from rlkeep.jsonio import read_json

    ctx = archive_step_context(tmp_path, bucket, store_region="us-east-02a", archive_region="us-east-02a")
    verify_archive_step(ctx)
    transfer = read_json(ctx.outputs["verify"])["transfer"]
    assert transfer["cross_region"] is False and transfer["regions_compared"] is True and transfer["allowed_by"] is None


def test_an_unknown_region_is_said_in_the_log_never_assumed(tmp_path: Path, bucket: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """SeaweedFS answers GetBucketLocation empty: the destination region is unknown, not us-east-1."""
    from rlkeep.archive import verify_archive_step
    from rlkeep.jsonio import read_json

    ctx = archive_step_context(tmp_path, bucket, store_region="eu-west-1", archive_region=None)
    with caplog.at_level("INFO", logger="rlkeep"):
        verify_archive_step(ctx)
    transfer = read_json(ctx.outputs["verify"])["transfer"]
    assert transfer["regions_compared"] is False and transfer["cross_region"] is None
    assert transfer["dest_region"] == {"region": None, "source": f"the record declares no archive.region and "
                                                                 f"GetBucketLocation of bucket {bucket} answered empty"}
    assert (f"archive upload to s3://{bucket}/archives: regions not compared: destination region unknown "
            f"(the record declares no archive.region and GetBucketLocation of bucket {bucket} answered empty)") in caplog.text


def test_region_sources_in_order_record_then_bucket_location_then_unknown() -> None:
    from rlkeep.regions import Region, compare, declared_or_asked

    asked: list[str] = []

    def ask(url: str) -> tuple[str | None, str]:
        asked.append(url)
        return "eu-west-1", "GetBucketLocation of bucket b"

    assert declared_or_asked("s3://b/p", "us-east-02a", "store_region", ask=ask) == Region("us-east-02a", "record field store_region")
    assert asked == []  # a declared region is never second-guessed
    assert declared_or_asked("s3://b/p", None, "store_region", ask=ask) == Region("eu-west-1", "GetBucketLocation of bucket b")
    assert declared_or_asked("file:///srv/archive", None, "archive.region", ask=ask).name is None
    assert declared_or_asked("hf://datasets/org/name", None, "archive.region", ask=ask).source == (
        "the record declares no archive.region and the Hub reports no storage region")
    assert asked == ["s3://b/p"]
    assert compare(Region("us-east-1", "x"), Region("US-EAST-1", "y")) is False
    assert compare(Region("us-east-1", "x"), Region(None, "y")) is None


def test_record_region_fields_are_validated_naming_the_field(tmp_path: Path) -> None:
    base = {"job": "rl-demo", "user": "demo", "scheduler": "none", "chain": ["/demo/rl-demo"],
            "store": "s3://bucket/iris/rl-demo", "checkpoint": {"interval": 20}}
    path = tmp_path / "rl-demo.yaml"
    with pytest.raises(RlkeepError, match=r"rl-demo.yaml: field 'store_region' is \"us east\"; expected the store bucket's region"):
        validate_record_data({**base, "store_region": "us east"}, path)
    with pytest.raises(RlkeepError, match=r"field 'archive.region' is 7; expected the archive destination's region"):
        validate_record_data({**base, "archive": {"dest": "s3://bkt/a", "region": 7}}, path)
    record = validate_record_data({**base, "store_region": "us-east-02a",
                                   "archive": {"dest": "s3://bkt/a", "region": "eu-west-1"}}, path)
    assert record.store_region == "us-east-02a" and record.archive == {"dest": "s3://bkt/a", "region": "eu-west-1"}


def test_pipeline_refuses_a_cross_region_archive_destination_until_allowed(tmp_path: Path, bucket: str, iris) -> None:
    import json

    from tests.conftest import run_snakemake, seed_example

    data_root = tmp_path / "data"
    (data_root / "records").mkdir(parents=True)
    dest = f"s3://{bucket}/archives"
    seed_example(data_root, bucket, iris, n_trials=12, record_overrides={
        "store_region": "us-east-02a", "archive": {"dest": dest, "region": "eu-west-1"}})
    result = run_snakemake(data_root, "rl-demo/verify/archive.json")
    assert result.returncode != 0
    assert list(open_store(dest).list()) == []  # nothing reached the destination
    assert (data_root / "rl-demo/archive/MANIFEST").is_file()  # the local archive is built all the same
    status = json.loads((data_root / "rl-demo/STATUS.json").read_text())
    assert status["steps"]["verify_archive"]["status"] == "blocked"
    assert "crosses regions (us-east-02a -> eu-west-1)" in status["steps"]["verify_archive"]["reason"]
    assert "--config allow_transfer=rl-demo" in status["steps"]["verify_archive"]["reason"]

    result = run_snakemake(data_root, "rl-demo/verify/archive.json", config=("allow_transfer=another-job",))
    assert result.returncode != 0 and list(open_store(dest).list()) == []

    result = run_snakemake(data_root, "rl-demo/verify/archive.json", config=("allow_transfer=rl-demo",))
    assert result.returncode == 0, result.stderr
    sentinel = json.loads((data_root / "rl-demo/verify/archive.json").read_text())
    assert sentinel["transfer"]["cross_region"] is True
    assert sentinel["transfer"]["allowed_by"] == "--config allow_transfer=rl-demo"
    assert {sentinel["transfer"]["source_region"]["source"], sentinel["transfer"]["dest_region"]["source"]} == {
        "record field store_region", "record field archive.region"}
    assert sorted(i.key for i in open_store(dest).list()) == ["rl-demo/MANIFEST", "rl-demo/rl-demo_archive.tgz"]


def test_manifest_lines_without_a_digest_still_parse_and_a_bad_digest_is_named() -> None:
    head = "run=x kind=rl cluster=c jobs=a dates=none..none kept=2files,3bytes skipped=0files,0bytes tracker=none"
    digest = hashlib.sha256(b"ab").hexdigest()
    _, entries = parse_manifest(f"{head}\nkept\t2\tlogs/a\t{digest}\nkept\t1\tlogs/b\n", "MANIFEST")
    assert [(e.member, e.sha256) for e in entries] == [("logs/a", digest), ("logs/b", None)]
    with pytest.raises(RlkeepError, match=r"MANIFEST: line 2: .*expected kept<TAB>size<TAB>member\[<TAB>sha256\]"):
        parse_manifest(f"{head}\nkept\t2\tlogs/a\tnot-a-digest\n", "MANIFEST")


def test_members_are_redacted_as_they_stream_in_with_the_bytes_of_a_redacted_copy(tmp_path: Path, monkeypatch) -> None:
    """The archive step redacts each member on its way into the archive (one temp file at a time)
    and gives the bytes the archive of a whole redacted copy of the tar would have."""
    from rlkeep.archive.step import archive_sync_tars
    from rlkeep.redaction import redact_tar, redactor_from_environment
    from rlkeep.redaction.walk import TarRedaction
    from tests.support.growth_tree import trace_objects

    objects = trace_objects(60)
    traces = write_tar(tmp_path / "sync" / "trace_jobs.tar", {k: (v, None) for k, v in objects.items()})
    logs = write_tar(tmp_path / "sync" / "logs.tar", {k: v for k, v in LOGS.items() if v[1] is None})
    redact_tar(traces, tmp_path / "redacted.tar", redactor_from_environment(), work_dir=tmp_path / "scratch")
    build_archive(tmp_path / "copy" / "a.tgz", tmp_path / "copy" / "MANIFEST",
                  sources=[("logs", logs), ("trace_jobs", tmp_path / "redacted.tar")], extra_files=[],
                  summary=SUMMARY, large_threshold=THRESHOLD)

    work = tmp_path / "work"
    held: list[int] = []
    redacted = TarRedaction.redacted

    def measured(self, body, member, size):  # what the work folder holds while a member is rewritten
        spool = redacted(self, body, member, size)
        held.append(sum(p.stat().st_size for p in work.rglob("*") if p.is_file()))
        return spool

    monkeypatch.setattr(TarRedaction, "redacted", measured)
    evidence = archive_sync_tars(tmp_path / "stream" / "a.tgz", tmp_path / "stream" / "MANIFEST",
                                 trees=[("logs", logs), ("trace_jobs", traces)], extra_files=[], summary=SUMMARY,
                                 large_threshold=THRESHOLD, work=work)
    assert (tmp_path / "stream" / "a.tgz").read_bytes() == (tmp_path / "copy" / "a.tgz").read_bytes()
    assert (tmp_path / "stream" / "MANIFEST").read_bytes() == (tmp_path / "copy" / "MANIFEST").read_bytes()
    assert evidence["kept_files"] == len(objects) + sum(1 for v in LOGS.values() if v[1] is None)
    assert held and max(held) <= max(len(data) for data in objects.values()) + 64, held  # one member, redacted
    assert [p for p in work.rglob("*") if p.is_file()] == []
