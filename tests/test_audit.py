"""`rlkeep audit` on one finished run (S3 = SeaweedFS, the Hub dev server, a sqlite registry), built
once for this module: each test damages one destination or one local file as an operator, a bucket
policy or a Hub cleanup would, checks that the audit names it (exit 1, verify/audit.json, STATUS.json
and the pages), follows the repair the audit prints and sees the next audit pass. The run is whole
again after every test. An audit of the intact run sends no write request to either server.
"""
from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlkeep.audit import (Finding, archive_findings, card_link_findings, history_finding, read_data_chosen,
                          registry_findings)
from rlkeep.storage import open_store
from rlkeep_dev.devserver.hub import HubServer
from tests.conftest import REPO, IrisStandin, run_snakemake, seed_example
from tests.support.faultproxy import FaultProxy
from tests.support.hub import new_token, running_hub
from tests.support.publishing import env_for, publish_overrides

JOB = "rl-demo"
SNAKEMAKE = shlex.join([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                        "--profile", str(REPO / "profiles" / "local")])
WRITES = {"PUT", "POST", "DELETE", "PATCH"}


@dataclass
class FinishedRun:
    data_root: Path
    bucket: str
    hub: HubServer
    env: dict[str, str]
    done: bytes

    @property
    def job_dir(self) -> Path:
        return self.data_root / JOB

    def audit(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rlkeep", "audit", "--invocation", SNAKEMAKE, *args],
                              cwd=self.data_root, capture_output=True, text=True, timeout=600,
                              env={**os.environ, **self.env, **(env or {})})

    def follow(self, command: str) -> subprocess.CompletedProcess[str]:
        """Run a command rlkeep printed, as an operator pastes it in the data root."""
        result = subprocess.run(command, shell=True, cwd=self.data_root, capture_output=True, text=True, timeout=600,
                                env={**os.environ, **self.env})
        assert result.returncode == 0, (command, result.stderr[-4000:])
        return result

    def status(self) -> dict:
        subprocess.run([sys.executable, "-m", "rlkeep", "campaign", "--invocation", SNAKEMAKE], cwd=self.data_root,
                       check=True, capture_output=True, env={**os.environ, **self.env})
        return json.loads((self.job_dir / "STATUS.json").read_text())


@pytest.fixture(scope="module")
def run(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FinishedRun]:
    root = tmp_path_factory.mktemp("audit")
    bucket = f"audit-{os.getpid()}"
    s3_server.create_bucket(bucket)
    data_root = root / "data"
    (data_root / "records").mkdir(parents=True)
    iris = IrisStandin(root / "iris")
    with running_hub(root / "hub", token=new_token()) as hub:
        env = {**env_for(hub), **iris.env()}
        seed_example(data_root, bucket, iris, record_overrides=publish_overrides(bucket, data_root))
        result = run_snakemake(data_root, f"{JOB}/DONE", env=env)
        assert result.returncode == 0, result.stderr[-4000:]
        yield FinishedRun(data_root, bucket, hub, env, (data_root / JOB / "DONE").read_bytes())


def repairs(output: str) -> list[str]:
    """The repair commands of the audit's finding lines, each once, in order."""
    found: list[str] = []
    for line in output.splitlines():
        if "; repair: " in line:
            command = line.split("; repair: ", 1)[1]
            if command not in found:
                found.append(command)
    return found


def audit_names(run: FinishedRun, *subjects: str, read_data: bool = True) -> list[str]:
    """Audit, check it names each subject (exit 1, audit.json, STATUS.json and both pages); its repairs."""
    result = run.audit(*(["--read-data"] if read_data else []))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for subject in subjects:
        assert any(subject in line for line in lines), (subject, result.stdout)
    written = json.loads((run.job_dir / "verify" / "audit.json").read_text())
    assert written["status"] == "drift" and len(written["findings"]) == len(lines)
    assert "audit [1/1] rl-demo: drift" in result.stderr  # the progress line
    status = run.status()
    assert status["audit"]["status"] == "drift"
    page = (run.data_root / "campaign" / f"{JOB}.html").read_text()
    index = (run.data_root / "campaign" / "index.html").read_text()
    assert "drift found" in page and all(subject.split(": ")[0].split(" ")[-1] in page for subject in subjects)
    assert 'data-state="blocked"' in index and "audit:" in index
    return repairs(result.stdout)


def audit_passes(run: FinishedRun) -> None:
    result = run.audit("--read-data")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((run.job_dir / "verify" / "audit.json").read_text())["status"] == "ok"
    assert run.status()["audit"]["status"] == "ok"
    assert 'data-state="done"' in (run.data_root / "campaign" / "index.html").read_text()


def test_an_intact_run_passes_and_the_audit_writes_to_no_destination(run: FinishedRun) -> None:
    run.hub.clear_requests()
    with FaultProxy(os.environ["AWS_ENDPOINT_URL_S3"]) as proxy:
        result = run.audit("--read-data", "--json", env={"AWS_ENDPOINT_URL_S3": proxy.endpoint})
    assert result.returncode == 0, result.stdout + result.stderr
    [audited] = json.loads(result.stdout)
    assert audited["status"] == "ok" and audited["findings"] == [] and audited["read_data"] is True
    checked = "\n".join(audited["checked"])
    for what in ("archive s3://", "full read with sha256", "model demo/rl-demo", "links demo/rl-demo-traces",
                 "traces demo/rl-demo-traces", "registry sqlite://", "local metrics/metrics.csv", "local model/"):
        assert what in checked, what
    s3_methods = {method for method, _, _ in proxy.log}
    assert s3_methods and not s3_methods & WRITES, proxy.log
    assert {"GET", "HEAD"} >= s3_methods
    hub_requests = run.hub.requests()
    assert hub_requests and not [r for r in hub_requests if r["method"] in WRITES], hub_requests
    assert json.loads((run.job_dir / "verify" / "audit.json").read_text())["status"] == "ok"
    assert (run.job_dir / "DONE").read_bytes() == run.done


def test_the_audit_checks_the_hub_from_a_plain_shell_with_only_the_readme_variables(run: FinishedRun) -> None:
    """Issue 53: no HF_HUB_DISABLE_XET (nor any other HF_HUB_* variable) is needed to audit."""
    kept = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "XDG_CONFIG_HOME"}
    readme = {"HF_TOKEN", "HF_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"}
    plain = {key: value for key, value in {**os.environ, **run.env}.items()
             if key in kept | readme or not (key.startswith(("HF_", "AWS_", "RLKEEP_")) or key in os.environ)}
    assert "HF_HUB_DISABLE_XET" not in plain and readme <= set(plain)
    result = subprocess.run([sys.executable, "-m", "rlkeep", "audit", "--invocation", SNAKEMAKE, "--json"],
                            cwd=run.data_root, capture_output=True, text=True, timeout=600, env=plain)
    assert result.returncode == 0, result.stdout + result.stderr
    [audited] = json.loads(result.stdout)
    checked = "\n".join(audited["checked"])
    assert audited["status"] == "ok" and "model demo/rl-demo" in checked and "traces demo/rl-demo-traces" in checked


def test_a_deleted_and_a_truncated_archive_object_are_named_and_uploaded_again(run: FinishedRun) -> None:
    store = open_store(f"s3://{run.bucket}/archives/{JOB}")
    tgz = f"{JOB}_archive.tgz"
    store.put_bytes(tgz, store.read_bytes(tgz)[:1000])
    store.delete(["MANIFEST"])
    commands = audit_names(run, f"archives/{JOB}/MANIFEST: missing from the listing",
                           f"archives/{JOB}/{tgz}: listed with 1000 bytes")
    assert commands == [f"{SNAKEMAKE} {JOB}/DONE --forcerun verify_archive"]
    run.follow(commands[0])
    audit_passes(run)


def test_a_model_file_rewritten_on_the_hub_is_named_and_published_again(run: FinishedRun) -> None:
    run.hub.edit_file(f"demo/{JOB}", "config.json", b'{"rewritten": "by someone"}\n')
    commands = audit_names(run, f"model demo/{JOB}/config.json")
    assert commands == [f"{SNAKEMAKE} {JOB}/DONE --forcerun publish_model"]
    run.follow(commands[0])
    audit_passes(run)


def test_a_removed_card_link_is_named_and_linked_again(run: FinishedRun) -> None:
    card = (run.job_dir / "stage" / "model_card" / "README.md").read_text()
    assert "## Training Traces" in card
    run.hub.edit_file(f"demo/{JOB}", "README.md", card.replace("## Training Traces", "## Data").encode())
    commands = audit_names(run, f"demo/{JOB}/README.md: the card has no '## Training Traces' section")
    assert commands == [f"{SNAKEMAKE} {JOB}/DONE --forcerun link_model_card"]
    run.follow(commands[0])
    audit_passes(run)


def test_a_deleted_trace_shard_is_named_and_published_again(run: FinishedRun) -> None:
    from huggingface_hub import HfApi

    [shard] = json.loads((run.job_dir / "verify" / "traces.json").read_text())["shards"]
    HfApi(endpoint=run.hub.url, token=run.hub.token).delete_file(shard["path"], f"demo/{JOB}-traces",
                                                                 repo_type="dataset")
    commands = audit_names(run, f"traces demo/{JOB}-traces/{shard['path']}: missing from main")
    assert commands == [f"{SNAKEMAKE} {JOB}/DONE --forcerun publish_traces"]
    run.follow(commands[0])
    audit_passes(run)


def test_a_deleted_dataset_repo_is_named_and_published_again_with_done_naming_the_new_commit(run: FinishedRun) -> None:
    from huggingface_hub import HfApi

    HfApi(endpoint=run.hub.url, token=run.hub.token).delete_repo(f"demo/{JOB}-traces", repo_type="dataset")
    commands = audit_names(run, f"traces demo/{JOB}-traces: no such dataset repo", read_data=False)
    assert commands == [f"{SNAKEMAKE} {JOB}/DONE --forcerun publish_traces"]
    run.follow(commands[0])
    audit_passes(run)  # DONE was written again: its traces commit is the new repo's


def test_a_deleted_registry_row_is_named_and_registered_again(run: FinishedRun) -> None:
    with sqlite3.connect(run.data_root / "registry.db") as connection:
        connection.execute("DELETE FROM models WHERE hub_id = ?", [f"demo/{JOB}"])
    commands = audit_names(run, f"models/demo/{JOB}: no model row", read_data=False)
    assert commands == [f"{SNAKEMAKE} {JOB}/DONE --forcerun register"]
    run.follow(commands[0])
    audit_passes(run)


def test_a_destination_that_cannot_be_reached_is_named_not_taken_for_drift_or_proof(run: FinishedRun) -> None:
    result = run.audit(env={"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9", "RLKEEP_STORE_SLOWDOWN_WAIT": "1"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"{JOB}: archive not checked: s3://{run.bucket}/archives/{JOB}"), result.stdout
    written = json.loads((run.job_dir / "verify" / "audit.json").read_text())
    assert written["status"] == "unchecked" and written["findings"] == []
    assert [entry["destination"] for entry in written["unreached"]] == ["archive"]
    run.status()
    assert "some destinations not reached" in (run.data_root / "campaign" / f"{JOB}.html").read_text()
    audit_passes(run)


@pytest.mark.parametrize("lost", ["metrics/metrics.csv", "model", "verify/archive.json"])
def test_a_local_file_lost_after_done_is_named_and_brought_back_to_the_same_done(run: FinishedRun, lost: str) -> None:
    import shutil

    before = {path: (run.job_dir / path).read_bytes() for path in ("DONE", "metrics/metrics.csv", "export.json")}
    target = run.job_dir / lost
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    # Snakemake alone finds nothing to do: the consumers of the lost file are up to date
    dry = run_snakemake(run.data_root, f"{JOB}/DONE", extra=("-n",), env=run.env)
    assert "Nothing to be done" in dry.stdout + dry.stderr

    status = run.status()
    subject = "model/" if lost == "model" else lost
    assert len(status["blocked"]) == 1, status["remaining_work"]
    [step] = status["blocked"]
    assert status["steps"][step]["damaged"] == subject and status["done"] is True
    [item] = status["remaining_work"]
    command = item["command"]
    assert command == status["continue"] and command.startswith(f"{SNAKEMAKE} {JOB}/{lost}")
    index = (run.data_root / "campaign" / "index.html").read_text()
    assert 'data-state="blocked"' in index and 'data-state="done"' not in index and f"{subject}: " in index

    result = run.audit()
    assert result.returncode == 1 and f"local {subject}:" in result.stdout, result.stdout
    assert repairs(result.stdout) == [command]

    run.follow(command)
    assert target.exists()
    after = {path: (run.job_dir / path).read_bytes() for path in before}
    assert after == before  # the same DONE, the same metric surface and export
    dry = run_snakemake(run.data_root, f"{JOB}/DONE", extra=("-n",), env=run.env)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout  # nothing downstream reruns
    assert run.status()["blocked"] == []
    audit_passes(run)


# --------------------------------------------------------------------------- the pure checks


def test_archive_findings_name_each_view_that_disagrees() -> None:
    objects = [{"key": "a.tgz", "size": 10, "sha256": "aa"}, {"key": "MANIFEST", "size": 3, "sha256": "bb"},
               {"key": "gone", "size": 1, "sha256": "cc"}]
    found = archive_findings("j", objects, {"a.tgz": 10, "MANIFEST": 3}, {"a.tgz": 10, "MANIFEST": None},
                             {"a.tgz": (10, "ab")}, "s3://b/archives/j")
    problems = {f.subject.rsplit("/", 1)[1]: f.problem for f in found}
    assert problems == {"a.tgz": "a full read gave 10 bytes with sha256 ab, verified: 10 bytes with sha256 aa",
                        "MANIFEST": "a HEAD answers no such object, verified with 3",
                        "gone": "missing from the listing of its folder"}
    assert all(f.repair == "snakemake --profile iris j/DONE --forcerun verify_archive" for f in found)
    assert archive_findings("j", objects[:1], {"a.tgz": 10}, {"a.tgz": 10}, {"a.tgz": (10, "aa")}, "s3://b") == []


def test_history_card_and_registry_findings() -> None:
    assert history_finding("model", "o/m", "c1", "c2", ["c2", "c1"], "r", "publish_model") == []
    [lost] = history_finding("model", "o/m", "c0", "c2", ["c2", "c1"], "r", "publish_model")
    assert "no longer in the history of main" in lost.problem
    linked = "# m\n\n## Training Traces\n\nhttps://hub.example/datasets/o/t\n"
    assert card_link_findings("o/m", linked, "o/t", "r") == []
    assert "does not link the dataset o/t" in card_link_findings("o/m", linked.replace("o/t", "o/x"), "o/t", "r")[0].problem
    registration = {"model": "o/m", "job": "j", "owner": "u", "base_model": "b/m", "trace_dataset": "o/t"}
    assert registry_findings("j", registration, {**registration}, "sqlite:///r.db") == []
    [moved] = registry_findings("j", registration, {**registration, "owner": "v"}, "sqlite:///r.db")
    assert "owner is 'v', registered 'u'" in moved.problem
    assert Finding("local", "x", "missing", None).line("j").endswith("no command repairs it")


def test_read_data_fraction_chooses_a_stable_share_of_jobs() -> None:
    jobs = [f"job-{n}" for n in range(400)]
    chosen = [job for job in jobs if read_data_chosen(job, 0.25, "2026-01-01")]
    assert 60 < len(chosen) < 140
    assert chosen == [job for job in jobs if read_data_chosen(job, 0.25, "2026-01-01")]
    assert chosen != [job for job in jobs if read_data_chosen(job, 0.25, "2026-01-02")]
    assert all(read_data_chosen(job, 1.0, "d") for job in jobs[:5])
    assert not any(read_data_chosen(job, 0.0, "d") for job in jobs[:5])


def test_the_audit_grows_linearly_with_files_and_jobs() -> None:
    from tests.benchmarks.bench_audit import measure

    figures = measure(300, rounds=5)
    assert all(walk["ratio"] < 6 for walk in figures.values()), figures  # linear: 4; quadratic: 16
