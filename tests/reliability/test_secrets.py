"""No secret leaves the machine: a credential of every kind the redactor knows is planted in every
artifact type of a generated run before it reaches the store (trainer log, Ray log, resolved config
YAML, trace trajectory, result.json, trial.log, model config.json, tokenizer_config.json). After a full
run, every byte the Hub server holds and every byte of the archive destination (the tgz decompressed,
parquet shards read back as text) is scanned: no planted value, and nothing `rlkeep.redaction` would
flag. The pipeline's own credentials (S3 secret, Hub token) appear in no log, sentinel, report or error.

Two plants sit inside containers only (issue 29): a gzip-rotated Ray worker log
(ray/<attempt>/session_latest/logs/worker-1.out.gz) and a trial folder's outputs.zip. Archive members
that are containers are opened again here (they must still open), and no planted value may be
there in any form (plain, percent-encoded, JSON-escaped, base64).

The same run carries broken text: a trajectory with invalid UTF-8 bytes and one with a lone surrogate
escape; both are repaired (U+FFFD), counted in the export manifest, and their trials are in the dataset.
"""
from __future__ import annotations

import base64
import gzip
import io
import json
import random
import zipfile
from pathlib import Path
from urllib.parse import quote

import pyarrow.parquet as pq
import yaml

from rlkeep_dev.example import iris_state, write_example_run
from rlkeep.redaction import Redactor, available_engines
from rlkeep.storage import open_store, upload_tree
from tests.conftest import run_snakemake, write_record
from tests.reliability import figures_log
from tests.reliability.support import (
    JOB, N_TRIALS, Scenario, archive_destination_files, hub_bytes, output_problems, publish_overrides, read_json,
)
from tests.support.hub import hub_server  # noqa: F401 - fixture
from tests.support.secrets_corpus import KINDS, Planted, plant

ARTIFACTS = ("trainer log", "ray log", "resolved config", "trajectory", "result.json", "trial.log", "model config.json",
             "tokenizer_config.json", "gzipped worker log", "outputs.zip")


def trials_with_rows(root: Path) -> list[Path]:
    """Trial folders that become dataset rows (a result.json and a trajectory)."""
    return [trial for trial in sorted((root / "trace_jobs").iterdir())
            if (trial / "result.json").is_file() and (trial / "agent" / "trajectory.json").is_file()]


def add_to_json(path: Path, values: dict[str, str]) -> None:
    document = json.loads(path.read_text())
    document.update(values)
    path.write_text(json.dumps(document, indent=2))


def append_lines(path: Path, texts: list[str], prefix: str = "") -> None:
    with open(path, "a", encoding="utf-8") as handle:
        for text in texts:
            for line in text.splitlines():
                handle.write(f"{prefix}{line}\n")


def plant_everywhere(root: Path, rng: random.Random) -> tuple[dict[tuple[str, str], Planted], list[str]]:
    """Every kind in every artifact type of the run under `root`; returns what was planted and the
    trainer log lines to add to the Iris stand-in's log of the first attempt."""
    planted = {(artifact, kind): plant(kind, rng) for artifact in ARTIFACTS for kind in KINDS}

    def texts(artifact: str) -> dict[str, str]:
        return {kind: planted[(artifact, kind)].text for kind in KINDS}

    trainer_lines = [f"(TaskRunner pid=2150) debug {kind}: {line}" for kind, text in texts("trainer log").items()
                     for line in text.splitlines()]
    for out in sorted((root / "logs").glob("*.out")):
        append_lines(out, trainer_lines)
    for raylet in sorted((root / "ray").glob("*/session_*/logs/raylet.out")):
        append_lines(raylet, [f"[2026-03-30 17:02:00,000 I 2150] env dump {kind}: {text}"
                              for kind, text in texts("ray log").items()])
    for config in sorted((root / "config").glob("*/resolved_config.yaml")):
        with open(config, "a", encoding="utf-8") as handle:
            handle.write(yaml.safe_dump({"planted_env": texts("resolved config")}, width=10_000))
    session = sorted((root / "ray").glob("*/session_*/logs"))[0].parent
    worker_log = session.parent / "session_latest" / "logs" / "worker-1.out.gz"
    worker_log.parent.mkdir(parents=True)
    worker_log.write_bytes(gzip.compress("".join(f"(pid=2150) env {kind}: {text}\n"
                                                 for kind, text in texts("gzipped worker log").items()).encode(), mtime=0))
    trial = trials_with_rows(root)[0]
    with zipfile.ZipFile(trial / "outputs.zip", "w", zipfile.ZIP_DEFLATED) as outputs:
        outputs.writestr("outputs/agent.log", "\n".join(texts("outputs.zip").values()) + "\n")
        outputs.writestr("outputs/answer.txt", "42\n")
    trajectory = trial / "agent" / "trajectory.json"
    document = json.loads(trajectory.read_text())
    first = document["steps"][0]
    first["message"] += "\n\nEnvironment for the task:\n" + "\n".join(texts("trajectory").values())
    trajectory.write_text(json.dumps(document, indent=2))
    add_to_json(trial / "result.json", {"planted_notes": texts("result.json")})
    append_lines(trial / "trial.log", [f"2026-03-30 23:01:26,000 - harbor.trial.trial - DEBUG - {kind}: {text}"
                                      for kind, text in texts("trial.log").items()])
    for config in sorted(root.glob("exports/*/policy/config.json")) + sorted(root.glob("ckpts/*/policy/huggingface/config.json")):
        add_to_json(config, {f"planted_{kind}": text for kind, text in texts("model config.json").items()})
    for config in sorted(root.glob("exports/*/policy/tokenizer_config.json")) + \
            sorted(root.glob("ckpts/*/policy/huggingface/tokenizer_config.json")):
        add_to_json(config, {f"planted_{kind}": text for kind, text in texts("tokenizer_config.json").items()})
    return planted, trainer_lines


def break_text(root: Path) -> list[str]:
    """Invalid UTF-8 bytes in one trajectory, a lone surrogate escape in another; returns the trials."""
    invalid, surrogate = trials_with_rows(root)[1:3]
    path = invalid / "agent" / "trajectory.json"
    data = path.read_bytes()
    marker = b'"message": "'
    at = data.index(marker) + len(marker)
    path.write_bytes(data[:at] + b"bytes \xff\xfe\xc0\xaf from a binary file: " + data[at:])
    path = surrogate / "agent" / "trajectory.json"
    text = path.read_text()
    at = text.index('"message": "') + len('"message": "')
    path.write_text(text[:at] + "half an emoji \\ud83d then text: " + text[at:])
    return [invalid.name, surrogate.name]


def opened(name: str, data: bytes) -> list[tuple[str, bytes]]:
    """An archive member that is a container, opened (it must open): its members as (name, bytes)."""
    if name.endswith(".gz"):
        return [(f"{name}::{name.rsplit('/', 1)[-1][:-3]}", gzip.decompress(data))]
    if name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return [(f"{name}::{member}", archive.read(member)) for member in archive.namelist()]
    return []


def forms(value: str) -> list[bytes]:
    """A value as a reader could turn it back: plain, percent-encoded, JSON-escaped, base64 (its middle)."""
    return [value.encode(), quote(value, safe="").encode(), json.dumps(value).replace("/", "\\u002f").encode(),
            base64.b64encode(value.encode())[4:-4]]


def readable_text(name: str, data: bytes) -> bytes:
    """What a reader of this blob sees: parquet shards as their cell text, anything else as is."""
    if name.endswith(".parquet") or data[:4] == b"PAR1":
        table = pq.read_table(io.BytesIO(data))
        return json.dumps(table.to_pylist(), ensure_ascii=False).encode("utf-8")
    return data


def test_no_planted_secret_reaches_the_hub_or_the_archive(data_root: Path, bucket: str, iris, hub_server) -> None:
    rng = random.Random(20261129)
    run = write_example_run(data_root.parent / f"example-{JOB}", job=JOB, user="demo", n_trials=N_TRIALS,
                            large_result_mb=0.5, large_pane_mb=0.3)
    planted, trainer_lines = plant_everywhere(run.root, rng)
    broken_trials = break_text(run.root)
    store_url = f"s3://{bucket}/iris/{JOB}"
    upload_tree(run.root, open_store(store_url))
    record = run.record(store_url=store_url, scheduler="iris", cluster="cw-test")
    record.update(publish_overrides(bucket, data_root))
    write_record(data_root, record)
    state = iris_state(run)
    state["jobs"][run.chain[0]]["log_lines"].extend(trainer_lines)
    iris.write_state(state)
    scenario = Scenario(data_root, bucket, iris, run, record, hub_server)

    result = run_snakemake(data_root, f"{JOB}/DONE", env=scenario.env())
    assert result.returncode == 0, result.stderr[-5000:]
    done = read_json(scenario.job_dir / "DONE")
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")] and output_problems(scenario.job_dir) == []

    secrets = [(f"{artifact}/{kind}", p.secret) for (artifact, kind), p in planted.items()]
    secrets += [(f"example/{s['kind']}", s["value"]) for s in run.planted_secrets]
    destinations = [(f"hub:{repo}/{path}", readable_text(path, data)) for repo, path, data in hub_bytes(hub_server)]
    destinations += [(f"archive:{name}", data) for name, data in archive_destination_files(bucket)]
    destinations += [inner for name, data in list(destinations) for inner in opened(name, data)]
    leaked = [(label, where) for label, value in secrets for where, data in destinations
              if any(form in data for form in forms(value))]
    redactor = Redactor()
    flagged = [(where, kind) for where, data in destinations
               if not where.endswith((".safetensors", ".png", ".gz", ".zip", ".tgz"))
               for _, kind in redactor.redact_bytes(data)[1]]
    figures_log.record("secrets", planted=len(planted), kinds=len(KINDS), artifact_types=len(ARTIFACTS),
                       example_secrets=len(run.planted_secrets), leaked=len(leaked), flagged=len(flagged),
                       destinations_scanned=len(destinations))
    assert leaked == [], leaked[:10]
    assert flagged == [], flagged[:10]
    # The planted text did reach the places it should have been redacted in (not vacuously absent).
    redacted_at = {where for where, data in destinations if b"<redacted:" in data}
    for expected in ("training_logs/trainer/", "/config.json", "/tokenizer_config.json", "data/train-"):
        assert any(expected in where and where.startswith("hub:") for where in redacted_at), expected
    assert any(":trace_jobs/" in where and where.endswith("trial.log") for where, _ in destinations)
    for inside in ("session_latest/logs/worker-1.out.gz::worker-1.out", "/outputs.zip::outputs/agent.log"):
        assert any(where.endswith(inside) and b"<redacted:" in data for where, data in destinations), inside
    assert any(where.endswith("/outputs.zip::outputs/answer.txt") and data == b"42\n" for where, data in destinations)

    # Broken text was repaired, counted, and its trials kept.
    manifest = read_json(scenario.job_dir / "stage" / "traces" / "trace_export_manifest.json")
    assert manifest["repairs"].get("invalid_utf8_file", 0) >= 1 and manifest["repairs"].get("lone_surrogate", 0) >= 1
    rows = [row for path in sorted((scenario.job_dir / "stage" / "traces" / "data").glob("*.parquet"))
            for row in pq.read_table(path).to_pylist()]
    names = {row.get("trial_name") for row in rows}
    assert set(broken_trials) <= names
    assert any("\ufffd" in json.dumps(row, ensure_ascii=False) for row in rows if row.get("trial_name") in broken_trials)
    figures_log.record("bad_input", case="trajectory with invalid UTF-8")
    figures_log.record("bad_input", case="trajectory with a lone surrogate")

    # The pipeline's own credentials: in no log, sentinel, report, error or destination.
    credentials = [scenario.s3_secret.encode(), hub_server.token.encode()]
    local = [p for p in data_root.rglob("*") if p.is_file()]
    for path in local:
        content = path.read_bytes()
        assert not any(c in content for c in credentials), f"a credential appears in {path}"
    for where, data in destinations:
        assert not any(c in data for c in credentials), f"a credential reached {where}"
    assert not any(c in (result.stdout + result.stderr).encode() for c in credentials)


def test_a_keyword_in_front_of_a_secret_does_not_hide_it() -> None:
    """Found by the run above: `secret: client_secret = <value>` was left as it was, because the match
    at the first `secret` (value `client_secret`, rejected) swallowed the one at `client_secret`."""
    for engine in available_engines():
        for text in ("secret: client_secret = Abc123def456xyz", '"planted_secret": "client_secret = Abc123def456xyz"',
                     "token password: passwd=Abc123def456xyz"):
            redacted, findings = Redactor(engine=engine).redact_text(text)
            assert "Abc123def456xyz" not in redacted and findings, (engine, text, redacted)
