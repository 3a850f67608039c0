"""Hostile and broken input: each fails with a clear error naming the file and the field, member or
line, and nothing is half-published (the Hub repo absent or unchanged, no verify sentinel).

Records (malformed, shell metacharacters, spaces, '..', absolute paths), a store key with '../', a
trace tar whose members escape the tree or are links, truncated and lying safetensors in the selected
export, an empty trainer log, a trace tree under the coverage gate, and a 300 MB result.json (streamed
to disk, read back one small column at a time; about 20-40 s, so in the regular suite). Broken UTF-8 in
trajectories and the remotely edited model card are in test_secrets.py and test_hub_faults.py.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from rlkeep.errors import RecordError
from rlkeep.records import load_record
from rlkeep.storage import open_store
from tests.conftest import run_snakemake
from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, hub_head, read_json, run_logged, seed, sha256_file, snakemake_command, tar_bytes,
)
from tests.support.hub import hub_server  # noqa: F401 - fixture

GOOD = {
    "job": JOB, "user": "demo", "scheduler": "iris", "cluster": "cw-test",
    "chain": ["/demo/rl-demo", "/demo/rl-demo-r1"], "store": "s3://runs/iris/rl-demo",
    "checkpoint": {"interval": 20, "rule": {"kind": "latest"}},
}


def with_change(path: str, value: object) -> dict:
    """GOOD with one dotted field set (value None: removed)."""
    record = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    node = record
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return record


CANARY = "rlkeep-canary-was-run"
# (case, record (dict) or raw file text (str), what the message must name besides the file)
RECORD_CORPUS = [
    ("yaml syntax error", "job: rl-demo\nchain: [/demo/rl-demo\nstore: s3://runs/x\n", "line 3"),
    ("not a mapping", "- job\n- rl-demo\n", "mapping"),
    ("empty file", "", "mapping"),
    ("missing store", with_change("store", None), "'store'"),
    ("unknown key", {**GOOD, "stroe": "s3://runs/x"}, "'stroe'"),
    ("interval not a number", with_change("checkpoint.interval", "twenty"), "'checkpoint.interval'"),
    ("job differs from the file name", with_change("job", "rl-demo-2"), "'job'"),
    ("job with an absolute path", with_change("job", "/tmp/rl-demo"), "'job'"),
    ("job with '..'", with_change("job", "../rl-demo"), "'job'"),
    ("job with shell metacharacters", with_change("job", f"rl-demo;touch {CANARY}"), "'job'"),
    ("chain id with shell metacharacters", with_change("chain", [f"/demo/rl-demo;touch {CANARY}"]), "'chain[0]'"),
    ("chain id with command substitution", with_change("chain", [f"/demo/$(touch {CANARY})"]), "'chain[0]'"),
    ("chain id with a space", with_change("chain", ["/demo/rl demo"]), "'chain[0]'"),
    ("chain id with '..'", with_change("chain", ["/demo/../../etc/passwd"]), "'chain[0]'"),
    ("chain id not absolute", with_change("chain", ["demo/rl-demo"]), "'chain[0]'"),
    ("chain id twice", with_change("chain", ["/demo/rl-demo", "/demo/rl-demo"]), "'chain'"),
    ("cluster with shell metacharacters", with_change("cluster", "cw-test && reboot"), "'cluster'"),
    ("layout path with '..'", with_change("layout.traces", "../other-run/trace_jobs"), "'layout.traces'"),
    ("layout path absolute", with_change("layout.traces", "/etc"), "'layout.traces'"),
    ("store with a space", with_change("store", "s3://runs/iris/rl demo"), "'store'"),
    ("store not a URL", with_change("store", "/data/runs/rl-demo"), "'store'"),
    ("publish repo with shell metacharacters", {**GOOD, "publish": {"model": "demo/x; rm -rf ~", "traces": "demo/t"}},
     "'publish.model'"),
    ("base model with command substitution", {**GOOD, "base_model": "$(whoami)/model"}, "'base_model'"),
    ("tracker URL not http", {**GOOD, "tracker_url": "javascript:alert(1)"}, "'tracker_url'"),
    ("unknown selection rule", with_change("checkpoint.rule.kind", "best"), "'checkpoint.rule.kind'"),
    ("registration authorized without a registry", {**GOOD, "register": {"authorized": True}}, "'register.url'"),
]


def write_raw_record(data_root: Path, content: dict | str, name: str = JOB) -> Path:
    path = data_root / "records" / f"{name}.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    return path


@pytest.mark.parametrize("case,content,names", RECORD_CORPUS, ids=[case for case, _, _ in RECORD_CORPUS])
def test_bad_record_is_refused_naming_the_file_and_the_field(tmp_path: Path, case: str, content: dict | str,
                                                             names: str) -> None:
    path = tmp_path / f"{JOB}.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    with pytest.raises(RecordError) as error:
        load_record(path)
    message = str(error.value)
    figures_log.record("bad_input", case=f"record: {case}")
    assert str(path) in message, message
    assert names in message, message


def test_bad_record_bytes_are_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / f"{JOB}.yaml"
    path.write_bytes(yaml.safe_dump(GOOD).encode() + b"tracker_url: \xff\xfe\n")
    with pytest.raises(RecordError, match="not UTF-8") as error:
        load_record(path)
    figures_log.record("bad_input", case="record: not UTF-8")
    assert str(path) in str(error.value)


PIPELINE_RECORDS = ["chain id with shell metacharacters", "chain id with command substitution", "layout path with '..'",
                    "yaml syntax error", "store with a space"]


@pytest.mark.parametrize("case", PIPELINE_RECORDS)
def test_the_pipeline_refuses_a_bad_record_before_any_work(data_root: Path, iris, hub_server, case: str) -> None:
    _, content, names = next(item for item in RECORD_CORPUS if item[0] == case)
    path = write_raw_record(data_root, content)
    result = run_snakemake(data_root, f"{JOB}/DONE", env={"HF_ENDPOINT": hub_server.url, "HF_TOKEN": hub_server.token})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"records/{JOB}.yaml" in output and names in output, output[-3000:]
    assert "Traceback (most recent call last)" not in output  # a message, not a crash
    # Before any work: no job folder, no Iris call, no Hub repo, nothing run through a shell.
    assert not (data_root / JOB).exists()
    assert iris.calls() == []
    assert not list(hub_server.root.glob("repos/*/*/*"))
    assert not any(Path(p).exists() for p in (data_root / CANARY, Path.cwd() / CANARY, Path("/") / CANARY))


def test_a_record_file_named_with_shell_metacharacters_is_refused_naming_it(data_root: Path, iris) -> None:
    """The campaign target refuses it alone (issue 28): named in planning and in campaign/refused.json."""
    bad = "rl;demo"
    path = data_root / "records" / f"{bad}.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "job": bad, "store": "s3://runs/iris/x"}))
    result = run_snakemake(data_root)
    output = result.stdout + result.stderr
    assert not (data_root / bad).exists() and iris.calls() == []
    assert f"  records/{bad}.yaml: field 'job'" in result.stderr, output[-2000:]
    refused = json.loads((data_root / "campaign" / "refused.json").read_text())["refused"]
    assert [entry["file"] for entry in refused] == [f"records/{bad}.yaml"] and "'job'" in refused[0]["error"]


# --------------------------------------------------------------------------- the store


def test_a_store_key_escaping_the_tree_is_refused_naming_it(data_root: Path, bucket: str, iris, hub_server,
                                                             tmp_path: Path, monkeypatch) -> None:
    """SeaweedFS refuses '..' in keys; AWS S3 (and moto, started here) keep them as they are."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        scenario = seed(data_root, bucket, iris, hub_server, n_trials=12)
        evil = "trace_jobs/codecontests-1__evil/../../../../escaped.json"  # rlkeep's own client refuses to write it
        client.put_object(Bucket=bucket, Key=f"iris/{JOB}/{evil}", Body=b'{"pwned": true}')
        result = run_logged(scenario, f"{JOB}/DONE", AWS_ENDPOINT_URL_S3=endpoint)
    finally:
        server.stop()
    figures_log.record("bad_input", case="store key with ../")
    assert result.returncode != 0
    status = read_json(scenario.job_dir / "STATUS.json")
    for step in ("sync_traces", "sync_logs"):
        reason = status["steps"][step].get("reason", "")
        assert step in status["blocked"], (step, status)
        assert repr(evil.removeprefix("trace_jobs/")) in reason or repr(evil) in reason, (step, reason)
    assert not list(tmp_path.rglob("escaped.json")) and not (data_root.parent.parent / "escaped.json").exists()
    assert not (scenario.job_dir / "sync" / "trace_jobs.tar").exists()
    assert_nothing_published(scenario)


def assert_nothing_published(scenario, repos: tuple[str, ...] = ("model", "traces")) -> None:
    for name in repos:
        repo_type = "model" if name == "model" else "dataset"
        head, files = hub_head(scenario.hub, scenario.record["publish"][name], repo_type)
        assert set(files) <= {".gitattributes"}, (name, sorted(files))
        assert not (scenario.job_dir / "verify" / f"{name}.json").exists()


# --------------------------------------------------------------------------- a hostile trace tar


TAR_MEMBERS = [
    ("parent-directory escape", "codecontests-1__evil/../../../escaped.txt", b"escaped", "'..'"),
    ("absolute path", "/tmp/rlkeep-escaped.txt", b"escaped", "absolute"),
    ("symbolic link", "codecontests-1__evil/agent/trajectory.json", ("symlink", "/etc/passwd"), "link"),
    ("hard link", "codecontests-1__evil/result.json", ("hardlink", "/etc/passwd"), "link"),
]


def test_trace_tar_members_escaping_the_tree_or_links_are_refused(data_root: Path, bucket: str, iris,
                                                                    hub_server) -> None:
    scenario = seed(data_root, bucket, iris, hub_server, n_trials=12)
    job_dir = scenario.job_dir
    synced = run_logged(scenario, f"{JOB}/sync/trace_jobs.manifest.json", f"{JOB}/sync/logs.manifest.json")
    assert synced.returncode == 0, synced.stderr[-3000:]
    tar_path = job_dir / "sync" / "trace_jobs.tar"
    manifest_path = job_dir / "sync" / "trace_jobs.manifest.json"
    original = tar_path.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(original)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    for case, name, content, named in TAR_MEMBERS:
        # A tar that passed for a sync: its manifest's sha256 and size describe it (as a copied-in tar's would).
        crafted = tar_bytes({**members, name: content})
        tar_path.write_bytes(crafted)
        manifest = read_json(manifest_path)
        manifest.update(sha256=hashlib.sha256(crafted).hexdigest(), tar_bytes=len(crafted))
        manifest_path.write_text(json.dumps(manifest))
        result = run_logged(scenario, f"{JOB}/verify/traces.json", f"{JOB}/archive/MANIFEST")
        figures_log.record("bad_input", case=f"trace tar: {case}")
        assert result.returncode != 0, case
        status = read_json(job_dir / "STATUS.json")
        reason = status["steps"]["publish_traces"].get("reason") or read_log_reason(job_dir, "stage_traces")
        assert f"{JOB}/sync/trace_jobs.tar" in reason and repr(name) in reason and named in reason, (case, reason)
        assert not (job_dir / "stage" / "traces").exists(), case
        archive = job_dir / "archive" / f"{JOB}_archive.tgz"
        if archive.exists():  # the archive may record the member as skipped, never keep a link or an escape
            assert archive_is_safe(archive), case
            kept = [line for line in (job_dir / "archive" / "MANIFEST").read_text().splitlines()
                    if line.startswith("kept") and "__evil" in line]
            assert kept == [], (case, kept)
        assert not Path("/tmp/rlkeep-escaped.txt").exists()
        assert not list(data_root.parent.rglob("escaped.txt")), case
    assert_nothing_published(scenario, ("traces",))


def archive_is_safe(tgz: Path) -> bool:
    with tarfile.open(tgz) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not (member.isfile() or member.isdir()) or member.name.startswith("/") or ".." in parts:
                return False
    return True


def read_log_reason(job_dir: Path, step: str) -> str:
    text = (job_dir / "logs" / f"{step}.log").read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.startswith("rlkeep: ")]
    return lines[-1] if lines else text[-2000:]


# --------------------------------------------------------------------------- the selected export


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def lying(data: bytes) -> bytes:
    """Same size, but the header says a tensor has another shape than its byte range holds."""
    length = int.from_bytes(data[:8], "little")
    header = data[8:8 + length]
    for match in re.finditer(rb'"shape":\s*\[(\d+)', header):
        number = match.group(1)
        bigger = str(int(number) + 1).encode()
        if len(bigger) == len(number):
            start, end = match.span(1)
            return data[:8] + header[:start] + bigger + header[end:] + data[8 + length:]
    raise AssertionError("no shape to change in the safetensors header")


def test_truncated_and_lying_safetensors_in_the_selected_export_are_refused(data_root: Path, bucket: str, iris,
                                                                            hub_server) -> None:
    scenario = seed(data_root, bucket, iris, hub_server, n_trials=12)
    job_dir = scenario.job_dir
    store = open_store(scenario.record["store"])
    weights = sorted(key for key in scenario.store_keys() if key.startswith("exports/") and key.endswith(".safetensors"))
    originals = {key: store.read_bytes(key) for key in weights}
    for case, damage in (("truncated", truncated), ("lying header", lying)):
        for key, data in originals.items():
            store.put_bytes(key, damage(data))
        result = run_logged(scenario, f"{JOB}/verify/model_upload.json")
        figures_log.record("bad_input", case=f"safetensors: {case}")
        assert result.returncode != 0, case
        reason = read_json(job_dir / "STATUS.json")["steps"]["export_model"].get("reason", "")
        assert "model.safetensors" in reason, (case, reason)
        assert not (job_dir / "export.json").exists() and not (job_dir / "model").exists()
        assert_nothing_published(scenario, ("model",))
    # The source is repaired: the rerun must read it again, not reuse the copy that was refused.
    for key, data in originals.items():
        store.put_bytes(key, data)
    repaired = run_logged(scenario, f"{JOB}/verify/model_upload.json")
    assert repaired.returncode == 0, read_json(job_dir / "STATUS.json")["steps"]["export_model"]
    export = read_json(job_dir / "export.json")
    assert {f["path"] for f in export["files"]} >= {"model.safetensors", "config.json"}


# --------------------------------------------------------------------------- logs


def test_an_empty_trainer_log_is_preserved_and_named_not_refused(data_root: Path, bucket: str, iris) -> None:
    """Issue 16: an attempt whose pod never wrote a line is data. Its empty log goes into logs.tar as
    it is, the manifest names it with its state and says the empty answer is not proven complete."""
    scenario = seed(data_root, bucket, iris, publish=False, n_trials=12)
    state = iris.state()
    state["jobs"]["/demo/rl-demo"]["log_lines"] = []
    iris.write_state(state)
    # an empty CLI answer alone proves nothing (a job that never started logs nothing): the store's copy is empty too
    open_store(scenario.record["store"]).put_bytes("logs/rl-demo.out", b"")
    result = run_logged(scenario, f"{JOB}/sync/logs.manifest.json")
    figures_log.record("bad_input", case="empty trainer log")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = read_json(scenario.job_dir / "sync" / "logs.manifest.json")
    first = next(a for a in manifest["attempts"] if a["attempt"] == "rl-demo")
    assert first["bytes"] == 0 and first["member"] == "attempts/rl-demo/trainer.log" and first["state"]
    assert first["completeness"]["status"] == "unproven" and "empty too" in first["completeness"]["why"]
    with tarfile.open(scenario.job_dir / "sync" / "logs.tar") as tar:
        assert tar.getmember("attempts/rl-demo/trainer.log").size == 0
    assert not list((scenario.job_dir / "sync").glob(".*.part"))


# --------------------------------------------------------------------------- the trace tree under the coverage gate


def test_a_trace_tree_under_the_coverage_gate_is_named_in_status_json(data_root: Path, bucket: str, iris,
                                                                      hub_server) -> None:
    scenario = seed(data_root, bucket, iris, hub_server)
    store = open_store(scenario.record["store"])
    trajectories = sorted(k for k in scenario.store_keys() if k.endswith("agent/trajectory.json"))
    store.delete(trajectories[: len(trajectories) // 2])
    result = run_logged(scenario, f"{JOB}/verify/traces.json")
    figures_log.record("bad_input", case="trace tree under the coverage gate")
    assert result.returncode != 0
    assert "coverage" in read_log_reason(scenario.job_dir, "stage_traces")
    assert_nothing_published(scenario, ("traces",))
    status = read_json(scenario.job_dir / "STATUS.json")
    assert "publish_traces" in status["blocked"], status
    assert "coverage" in status["steps"]["publish_traces"]["reason"]


# --------------------------------------------------------------------------- a 300 MB result.json


HUGE_MB = 300
# The trace export holds one result.json in memory, once, and decodes only the members it reads
# (measured 380 MB for the whole pipeline; before both, 980 MB). The bound catches a step that
# parses it whole, reads a tar member by join-and-slice, or holds several such files.
MEMORY_BOUND_KB = 2 * HUGE_MB * 1024


def write_huge_result(path: Path, megabytes: int) -> None:
    """A valid Harbor result.json whose agent output is `megabytes` MB, written 1 MB at a time."""
    head = json.dumps({"trial_name": "codecontests-1__huge", "task_name": "codecontests-1",
                       "verifier_result": {"rewards": {"reward": 1.0}}})[:-1]
    chunk = ("agent output line with nothing secret in it; " * 23)[:1023] + "\n"
    line = json.dumps(chunk)[1:-1]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(head + ', "agent_result": {"output": "')
        for _ in range(megabytes * 1024 * 1024 // len(line)):
            handle.write(line)
        handle.write('"}}')


def test_a_300_mb_result_json_goes_through_with_bounded_memory(data_root: Path, bucket: str, iris, hub_server,
                                                               tmp_path: Path) -> None:
    scenario = seed(data_root, bucket, iris, hub_server)
    huge = tmp_path / "result.json"
    write_huge_result(huge, HUGE_MB)
    key = "trace_jobs/codecontests-1__huge/result.json"
    open_store(scenario.record["store"]).put_file(key, huge)
    trajectory = next(k for k in scenario.store_keys() if k.endswith("agent/trajectory.json"))
    store = open_store(scenario.record["store"])
    store.put_bytes("trace_jobs/codecontests-1__huge/agent/trajectory.json", store.read_bytes(trajectory))
    started = time.monotonic()
    peak_kb, result = run_measuring_memory(scenario, f"{JOB}/DONE")
    figures_log.record("bad_input", case=f"result.json of {HUGE_MB} MB", peak_rss_mb=peak_kb // 1024,
                       seconds=round(time.monotonic() - started, 1))
    output = result.stdout + result.stderr
    assert "Traceback (most recent call last)" not in output
    assert peak_kb < MEMORY_BOUND_KB, f"a pipeline process peaked at {peak_kb // 1024} MB"
    manifest = read_json(scenario.job_dir / "sync" / "trace_jobs.manifest.json")
    synced = {o["key"]: o for o in manifest["objects"]}
    assert synced["codecontests-1__huge/result.json"]["sha256"] == sha256_file(huge)
    if result.returncode != 0:  # refusing is fine if it says which file and why
        status = read_json(scenario.job_dir / "STATUS.json")
        reasons = " ".join(status["steps"][s].get("reason", "") for s in status["blocked"])
        assert "result.json" in reasons, reasons
        return
    # Through: archived whole, and a row of the dataset (read one small column: memory stays bounded).
    archived = (scenario.job_dir / "archive" / "MANIFEST").read_text()
    assert f"kept\t{huge.stat().st_size}\ttrace_jobs/codecontests-1__huge/result.json" in archived
    import pyarrow.parquet as pq

    names = [name for path in sorted((scenario.job_dir / "stage" / "traces" / "data").glob("*.parquet"))
             for name in pq.read_table(path, columns=["trial_name"]).column("trial_name").to_pylist()]
    assert "codecontests-1__huge" in names


def run_measuring_memory(scenario, *targets: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run the pipeline under a small wrapper that reports the largest RSS of any process it waited for."""
    wrapper = ("import resource, subprocess, sys\n"
               "status = subprocess.call(sys.argv[1:])\n"
               "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
               "sys.exit(status)\n")
    command = [sys.executable, "-c", wrapper, *snakemake_command(*targets)]
    result = subprocess.run(command, cwd=scenario.data_root, capture_output=True, text=True, timeout=3600,
                            env={**os.environ, **scenario.env()})
    peak = int(re.findall(r"PEAK_RSS_KB (\d+)", result.stderr)[-1])
    return peak, result
