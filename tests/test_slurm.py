"""The pipeline through a real SLURM cluster (one node on 127.0.0.1) with profiles/slurm.

The cluster is Debian's slurm-wlm, started by tests/support/slurm_cluster.py; if its packages
are missing the test installs them with apt-get (as root), and skips only when it cannot.
The executor is snakemake-executor-plugin-slurm; every rule except the local ones is an
sbatch job whose own Snakemake runs it on the node, reading and writing the shared data root.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_snakemake, seed_example
from tests.support.slurm_cluster import SlurmCluster, install_slurm

JOB = "rl-demo"
PROFILE = REPO / "profiles" / "slurm" / "profile.yaml"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.fail("snakemake-executor-plugin-slurm is not installed (pip install snakemake-executor-plugin-slurm==2.8.0)")
    reason = install_slurm()
    if reason:
        pytest.skip(f"no SLURM cluster for this test: {reason}")
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def slurm_arguments(cluster: SlurmCluster) -> tuple[str, ...]:
    return (
        "--executor", "slurm",
        # this cluster has no accounting daemon: squeue is the status source (MinJobAge 300 s
        # keeps finished jobs visible to it); a 1 s first poll keeps a 17-job run short (after a
        # poll that finds nothing finished, the plugin waits 10 s longer each time)
        "--slurm-status-command", "squeue",
        "--slurm-init-seconds-before-status-checks", "1",
        "--slurm-keep-successful-logs",
        "--default-resources", f"slurm_partition={cluster.partition}", "slurm_account=rlkeep",
    )


def slurm_jobs(cluster: SlurmCluster) -> list[dict[str, str]]:
    """Every job the cluster still remembers: id, name, state, memory, time limit, cpus and comment
    (the rule, per the plugin)."""
    result = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%j|%T|%m|%l|%C|%k"],
                            capture_output=True, text=True, env={**os.environ, **cluster.env()}, check=True)
    rows = [line.split("|", 6) for line in result.stdout.splitlines() if line.strip()]
    return [dict(zip(("id", "name", "state", "memory", "time_limit", "cpus", "comment"), row)) for row in rows]


def rule_names() -> set[str]:
    result = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--list-rules"],
                            capture_output=True, text=True, cwd=REPO, check=True)
    return {line.strip() for line in result.stdout.splitlines() if line.strip()}


def declared_resources() -> dict[str, dict[str, str]]:
    """Each rule's `resources:` as the Snakefile and rules/*.smk declare them (name -> value as written)."""
    found = {}
    for smk in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        for block in re.split(r"(?m)^(?=rule \w+:)", smk.read_text()):
            rule = re.match(r"rule (\w+):", block)
            section = re.search(r"(?m)^    resources:\n((?:        .*\n)+)", block)
            if rule:
                found[rule.group(1)] = dict(re.findall(r"(\w+)=([^,\s]+)", section.group(1))) if section else {}
    return found


def test_every_rule_declares_memory_and_time_for_slurm() -> None:
    declared = declared_resources()
    assert set(declared) == rule_names()
    unsized = sorted(rule for rule, resources in declared.items()
                     if rule != "all" and not {"mem_mb", "runtime"} <= set(resources))
    assert unsized == [], f"rules without mem_mb/runtime in rules/*.smk: {unsized}"
    # CPUs only as a cluster request: a rule's `threads:` would hold cores of a local run
    assert not [smk.name for smk in (REPO / "rules").glob("*.smk") if re.search(r"(?m)^    threads:", smk.read_text())]
    assert {rule for rule, resources in declared.items() if resources.get("cpus_per_task") == "2"} == {
        "sync_traces", "archive", "export_model", "stage_traces"}
    profile = yaml.safe_load(PROFILE.read_text())
    assert "set-resources" not in profile and "set-threads" not in profile  # the rules' own sizes apply
    assert profile["resources"]["net_io"] >= 1 and profile["set-resource-scopes"]["net_io"] == "global"
    assert "config" not in profile  # a profile never grants authority


def test_example_job_runs_to_done_through_slurm(data_root: Path, bucket: str, iris, slurm: SlurmCluster) -> None:
    seed_example(data_root, bucket, iris, n_trials=12)
    before = {job["id"] for job in slurm_jobs(slurm)}

    result = run_snakemake(data_root, f"{JOB}/DONE", profile="slurm", extra=slurm_arguments(slurm),
                           env=slurm.env(), timeout=900)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:] + "\n" + slurm.logs()

    done = json.loads((data_root / JOB / "DONE").read_text())
    assert done["job"] == JOB
    assert set(done["steps"].values()) <= {"completed", "not_applicable"}
    assert done["steps"]["export_model"] == "completed" and done["steps"]["sync_traces"] == "completed"
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")]  # no reclaim authority: what is left
    assert iris.stop_calls() == [iris.exact_stop("/demo/rl-demo-r1")]

    # every rule job went through SLURM and finished there
    ours = [job for job in slurm_jobs(slurm) if job["id"] not in before]
    submitted = {line.split()[-1].rstrip(":") for line in log.splitlines() if line.strip().startswith("rule ")}
    local = {line.split()[-1].rstrip(":") for line in log.splitlines() if line.strip().startswith("localrule ")}
    assert len(ours) >= len(submitted) >= 8, (ours, submitted)
    assert local <= {"all", "capture_chain", "stop_retries", "select_checkpoint", "register", "done"}, local
    assert {job["state"] for job in ours} == {"COMPLETED"}
    # each job asked SLURM for what its rule declares (rules/export.smk: cpus_per_task=2, 16000 MB, 240 min)
    export = [job for job in ours if "export_model" in job["comment"] + job["name"]]
    assert [(job["memory"], job["time_limit"], job["cpus"]) for job in export] == [("16000M", "4:00:00", "2")], ours
    assert "has been submitted with SLURM jobid" in log
    slurm_logs = list((data_root / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert any("rule_export_model" in str(path) for path in slurm_logs), slurm_logs

    again = run_snakemake(data_root, f"{JOB}/DONE", profile="slurm", extra=slurm_arguments(slurm), env=slurm.env())
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
