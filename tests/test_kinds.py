"""Every run kind the archive runbook covers (rl, sft, datagen, eval) through the real pipeline.

The runs come from rlkeep_dev.example.kinds; the stores are the real S3 server (SeaweedFS) or a
file:// tree; the SLURM commands are the real SlurmCli running stand-in `scontrol`, `sacct` and
`scancel` executables that print real-format output (tests/data/slurm/ holds the samples).
"""
from __future__ import annotations

import json
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from rlkeep.archive import parse_manifest
from rlkeep.errors import RecordError
from rlkeep_dev.example.kinds import write_datagen_run, write_eval_run, write_sft_run
from rlkeep.kinds import KINDS, spec_for
from rlkeep.records import load_record
from rlkeep.pipeline import STEPS, kind_has, steps_for_kind, verify_sentinels
from rlkeep.scheduler import (SlurmCli, entry_from_sacct, entry_from_scontrol, parse_scontrol_line,
                              stop_pending_slurm)
from rlkeep.storage import open_store, upload_tree
from tests.conftest import run_snakemake, write_record
from tests.support.hub import hub_env, hub_server  # noqa: F401 - fixture

SLURM_DATA = Path(__file__).parent / "data" / "slurm"


# --------------------------------------------------------------------------- the kind table


def test_every_kind_names_real_steps_and_rl_runs_them_all() -> None:
    names = [step.name for step in STEPS]
    for kind in KINDS:
        assert set(steps_for_kind(kind)) <= set(names), kind
        assert {"capture_chain", "sync_logs", "archive", "verify_archive", "reclaim"} <= set(steps_for_kind(kind))
    assert list(steps_for_kind("rl")) == names
    assert not {"sync_traces", "metric_surface", "trial_table", "export_model", "publish_model",
                "publish_traces"} & set(steps_for_kind("sft"))
    assert kind_has("rl", "export_model") and not kind_has("sft", "export_model")
    assert spec_for("eval").trace_tree == "eval_jobs" and spec_for("eval").trial_depth == 2
    assert spec_for("sft").expected_archive_trees == ("logs/",)
    assert verify_sentinels("datagen") == ("traces", "archive", "restore")
    # rl: the uploaded model, the traces, the card that links them (after both), the archive
    assert verify_sentinels("rl") == ("model_upload", "traces", "model", "archive", "restore")
    assert names.index("link_model_card") > max(names.index("publish_model"), names.index("publish_traces"))
    assert spec_for("eval").trial_of("tb/trial__abc/agent/trajectory.json") == ("tb/trial__abc", "agent/trajectory.json")
    assert spec_for("eval").trial_of("tb/result.json") is None


def record_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "records" / f"{data['job']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


BASE = {"job": "k", "user": "demo", "scheduler": "none", "chain": ["/demo/k"], "store": "file:///data/k"}


def test_kind_defaults_to_rl_and_sets_the_layout(tmp_path: Path) -> None:
    rl = load_record(record_file(tmp_path, {**BASE, "checkpoint": {"interval": 5}}))
    assert rl.kind == "rl" and rl.layout["traces"] == "trace_jobs"
    ev = load_record(record_file(tmp_path, {**BASE, "kind": "eval"}))
    assert ev.kind == "eval" and ev.store_url("traces") == "file:///data/k/eval_jobs"
    sft = load_record(record_file(tmp_path, {**BASE, "kind": "sft", "scheduler": "slurm", "chain": ["4815101", "4815170_3"]}))
    assert "traces" not in sft.layout and sft.attempts == ["4815101", "4815170_3"] and sft.checkpoint_interval is None


@pytest.mark.parametrize(("changes", "field", "expected"), [
    ({"kind": "pretrain"}, "field 'kind'", "one of: rl, sft, datagen, eval"),
    ({"kind": "sft", "scheduler": "slurm", "chain": ["/demo/k"]}, "field 'chain[0]'", "SLURM job id like 12345"),
    ({"kind": "sft", "chain": ["4815101"]}, "field 'chain[0]'", "Iris job id like /demo/<job>"),
    ({"kind": "sft", "checkpoint": {"interval": 5}}, "field 'checkpoint' does not apply to a sft run", "expected no checkpoint"),
    ({"kind": "datagen", "publish": {"model": "o/m", "traces": "o/t"}}, "field 'publish.model' does not apply",
     "expected only publish.traces"),
    ({"kind": "sft", "layout": {"traces": "x"}}, "field 'layout.traces' does not apply", "no trace tree"),
    ({}, "field 'checkpoint' is missing", "checkpoint.interval for kind rl"),
    ({"checkpoint": {"interval": 5}, "publish": {"traces": "o/t"}}, "field 'publish.model' is missing", "org/name"),
    ({"kind": "eval", "archive": {"dest": "hf://models/o/n"}}, "field 'archive.dest'", "hf://datasets/<org>/<name>"),
])
def test_bad_kind_records_fail_naming_file_field_and_expectation(tmp_path: Path, changes: dict, field: str,
                                                                 expected: str) -> None:
    path = record_file(tmp_path, {**BASE, **changes})
    with pytest.raises(RecordError) as caught:
        load_record(path)
    message = str(caught.value)
    assert str(path) in message and field in message and expected in message, message


# --------------------------------------------------------------------------- SLURM output parsing


def test_scontrol_one_line_output_becomes_a_chain_entry() -> None:
    fields = parse_scontrol_line((SLURM_DATA / "scontrol_completed.txt").read_text())
    assert fields["AllocNode:Sid"] == "login1:2514098" and fields["CPUs/Task"] == "72"
    assert fields["Command"] == "/scratch/bfeuer/experiments/sft-qwen3-8b/launch.sbatch --config configs/sft.yaml"
    assert fields["ReqTRES"] == "cpu=288,mem=400G,node=4,billing=288" and fields["Power"] == ""
    done = entry_from_scontrol("4815162", (SLURM_DATA / "scontrol_completed.txt").read_text())
    assert done["state"] == "completed" and done["exit_code"] == 0 and done["user"] == "bfeuer"
    assert done["submitted_ms"] == 1774689242000  # 2026-03-28T09:14:02Z
    assert done["finished_ms"] - done["started_ms"] == (5 * 3600 + 12 * 60 + 9) * 1000  # RunTime=05:12:09
    assert done["stdout"] == "/scratch/bfeuer/experiments/sft-qwen3-8b/logs/4815162.out"
    failed = entry_from_scontrol("4815101", (SLURM_DATA / "scontrol_failed.txt").read_text())
    assert (failed["state"], failed["exit_signal"], failed["error"], failed["restarts"]) == ("node_fail", 9, "NodeDown", 2)
    assert failed["stdout"].endswith("/logs/sft-qwen3-8b-4815101.out")  # %x-%j expanded
    pending = entry_from_scontrol("4815170_3", (SLURM_DATA / "scontrol_pending_array.txt").read_text())
    assert pending["state"] == "pending" and pending["started_ms"] is None and pending["finished_ms"] is None
    assert pending["stdout"].endswith("/logs/4815170_3.out")  # %A_%a expanded


def test_sacct_parsable_output_becomes_a_chain_entry() -> None:
    cancelled = entry_from_sacct("4815090", (SLURM_DATA / "sacct_cancelled.txt").read_text())
    assert cancelled["state"] == "cancelled" and cancelled["scheduler_state"] == "CANCELLED by 1001"
    assert cancelled["exit_signal"] == 15 and cancelled["summary_format"] == "sacct"
    array = (SLURM_DATA / "sacct_array.txt").read_text()
    assert entry_from_sacct("4815170_4", array)["state"] == "completed"
    assert entry_from_sacct("4815170_3", array)["state"] == "timeout"
    assert entry_from_sacct("4815170", array) is None


STANDIN = '''#!{python}
import json, os, sys
from pathlib import Path
state = Path(os.environ["SLURM_STANDIN_DIR"])
name, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(state / "calls.jsonl", "a") as calls:
    calls.write(json.dumps({{"argv": [name, *args], "tz": os.environ.get("TZ")}}) + "\\n")
if name == "scontrol":
    job = state / "scontrol" / args[2]
    if not job.is_file():
        sys.stderr.write("slurm_load_jobs error: Invalid job id specified\\n")
        sys.exit(1)
    print(job.read_text().strip())
elif name == "sacct":
    job = state / "sacct" / args[1]
    if job.is_file():
        print(job.read_text().strip())
elif name == "scancel":
    job = state / "scontrol" / args[0]
    job.write_text(job.read_text().replace("JobState=PENDING", "JobState=CANCELLED"))
'''


def slurm_standin(root: Path, scontrol: dict[str, str], sacct: dict[str, str]) -> dict[str, str]:
    """Stand-in SLURM commands on a PATH prefix, serving the given real-format outputs."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("scontrol", "sacct", "scancel"):
        path = bin_dir / name
        path.write_text(STANDIN.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    for folder, outputs in (("scontrol", scontrol), ("sacct", sacct)):
        (root / folder).mkdir()
        for job_id, text in outputs.items():
            (root / folder / job_id).write_text(text)
    (root / "calls.jsonl").touch()
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_STANDIN_DIR": str(root)}


def slurm_calls(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "calls.jsonl").read_text().splitlines()]


def test_slurm_cli_falls_back_to_sacct_then_unknown_and_cancels_exact_pending_ids(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    env = slurm_standin(tmp_path, {"4815170_3": (SLURM_DATA / "scontrol_pending_array.txt").read_text(),
                                   "4815162": (SLURM_DATA / "scontrol_completed.txt").read_text()},
                        {"4815090": (SLURM_DATA / "sacct_cancelled.txt").read_text()})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    slurm = SlurmCli()
    assert slurm.show("4815090")["summary_format"] == "sacct"
    gone = slurm.show("999")
    assert gone["state"] == "unknown" and "Invalid job id specified" in gone["reason"] and "sacct has no record" in gone["reason"]
    chain = [slurm.show(job_id) for job_id in ("4815090", "4815162", "4815170_3")]
    with pytest.raises(Exception, match="belongs to bfeuer"):
        stop_pending_slurm(slurm, chain, "someoneelse")
    stopped = stop_pending_slurm(slurm, chain, "bfeuer")
    assert [(s["id"], s["state_before"], s["state_after"]) for s in stopped] == [("4815170_3", "pending", "cancelled")]
    calls = slurm_calls(tmp_path)
    assert [c["argv"] for c in calls if c["argv"][0] == "scancel"] == [["scancel", "4815170_3"]]
    assert ["sacct", "-j", "999", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,Submit,Start,End"] in [c["argv"] for c in calls]
    assert {c["tz"] for c in calls} == {"UTC"}


# --------------------------------------------------------------------------- the pipeline per kind


def manifest_of(data_root: Path, job: str) -> tuple[dict[str, str], dict[str, str | None]]:
    summary, entries = parse_manifest((data_root / job / "archive" / "MANIFEST").read_text(), "MANIFEST")
    return summary, {entry.member: entry.reason for entry in entries}


def done_of(data_root: Path, job: str) -> dict:
    return json.loads((data_root / job / "DONE").read_text())


def ran_rules(result) -> set[str]:
    return {line.split()[-1].rstrip(":") for line in (result.stdout + result.stderr).splitlines()
            if line.strip().startswith(("rule ", "localrule "))}


def test_sft_on_a_file_store_with_slurm_reaches_done_and_reclaims_under_authority(tmp_path: Path, data_root: Path) -> None:
    job = "sft-demo"
    run = write_sft_run(tmp_path / "cluster" / "experiments" / job, job=job)
    first, second = run.chain
    env = slurm_standin(tmp_path / "slurm", {second: run.scontrol_lines[second]},  # the first is forgotten by
                        {first: f"{first}|NODE_FAIL|0:9|2026-03-30T17:00:00|2026-03-30T17:06:40|2026-03-30T17:24:39\n"})
    record = run.record(store_url=f"file://{run.root}", cluster="tacc-vista",
                        archive={"dest": f"file://{tmp_path / 'archives'}"})
    write_record(data_root, record)

    plan = run_snakemake(data_root, f"{job}/DONE", extra=("-n",), env=env)
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = plan.stdout + plan.stderr
    for absent in ("sync_traces", "metric_surface", "trial_table", "list_checkpoints", "export_model",
                   "publish_model", "link_model_card", "stage_traces", "register"):
        assert f"rule {absent}:" not in planned and f"\n{absent} " not in planned, absent

    result = run_snakemake(data_root, f"{job}/DONE", env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    done = done_of(data_root, job)
    assert done["kind"] == "sft"
    assert done["steps"]["sync_traces"] == "not_applicable" and done["steps"]["export_model"] == "not_applicable"
    assert done["steps"]["archive"] == "completed" and done["steps"]["verify_archive"] == "completed"
    assert done["artifacts"]["weights"] == "not_applicable"
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")]
    assert done["chain"] == [first, second]
    chain = json.loads((data_root / job / "chain.json").read_text())["attempts"]
    assert [(a["state"], a["summary_format"]) for a in chain] == [("node_fail", "sacct"), ("completed", "scontrol")]

    logs = json.loads((data_root / job / "sync" / "logs.manifest.json").read_text())["attempts"]
    assert logs[0]["source"] == f"file://{run.root}/logs/{first}.out"  # sacct knows no StdOut: the store copy
    assert logs[1]["source"] == f"{run.root}/logs/{second}.out"  # scontrol's StdOut on the shared filesystem

    summary, members = manifest_of(data_root, job)
    assert summary["kind"] == "sft" and summary["cluster"] == "tacc-vista" and summary["jobs"] == f"{first},{second}"
    for kept in (f"logs/store/logs/{first}.out", f"logs/store/logs/{second}.err", "logs/store/trainer_log.jsonl",
                 "logs/store/configs/sft.yaml", "logs/store/wandb/debug.log", f"logs/attempts/{second}/trainer.log"):
        assert members.get(kept, "absent") is None, kept
    assert not any(name.startswith(("trace_jobs/", "eval_jobs/")) for name in members)
    skipped = json.loads((data_root / job / "sync" / "logs.manifest.json").read_text())["objects_skipped"]
    assert {s["key"]: s["reason"] for s in skipped} == {
        f"checkpoint-{step}/{name}": "excluded_weights" for step in (20, 40)
        for name in ("model.safetensors", "optimizer.pt", "training_args.bin")}
    assert json.loads((data_root / job / "verify" / "archive.json").read_text())["local"]["expected_trees"] == ["logs/"]
    assert (tmp_path / "archives" / job / f"{job}_archive.tgz").is_file()

    before = run.files()
    granted = run_snakemake(data_root, f"{job}/DONE", env=env, config=(f"reclaim_authorized={job}",))
    assert granted.returncode == 0, granted.stderr[-3000:]
    reclaim = json.loads((data_root / job / "reclaim.json").read_text())
    assert reclaim["status"] == "completed" and reclaim["kept_unpublished_weights"] == 6
    left = run.files()
    weights = {key for key in before if key.endswith((".safetensors", ".pt", ".bin"))}
    assert set(left) == weights  # only the unpublished weights stay; their archived json sidecars went
    assert reclaim["deleted_keys"] == len(before) - len(left)
    assert done_of(data_root, job)["reclaimed"]["keys"] == reclaim["deleted_keys"]


def test_datagen_publishes_its_traces_and_archives_to_a_hub_dataset(tmp_path: Path, data_root: Path, bucket: str,
                                                                    hub_server) -> None:
    job = "datagen-demo"
    run = write_datagen_run(tmp_path / "run", job=job)
    store_url = f"s3://{bucket}/harbor/{job}"
    upload_tree(run.root, open_store(store_url))
    record = run.record(store_url=store_url, publish={"traces": f"demo/{job}-traces", "private": True},
                        archive={"dest": "hf://datasets/demo/run-archives"})
    write_record(data_root, record)
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_server.url, token=hub_server.token)
    api.create_repo("demo/run-archives", repo_type="dataset", private=True)
    api.upload_file(path_or_fileobj=b"older archive", path_in_repo="older-job/MANIFEST",
                    repo_id="demo/run-archives", repo_type="dataset")
    env = {k: v for k, v in hub_env(hub_server.url, hub_server.token).items() if k.startswith("HF_")}

    result = run_snakemake(data_root, f"{job}/DONE", env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert not {"export_model", "metric_surface", "publish_model", "link_model_card", "register"} & ran_rules(result)
    done = done_of(data_root, job)
    assert done["kind"] == "datagen"
    assert done["steps"]["publish_traces"] == "completed" and done["steps"]["publish_model"] == "not_applicable"
    assert done["destinations"]["traces"] == f"demo/{job}-traces" and done["destinations"]["model"] is None
    assert done["verification"] == {"model_upload": "not_applicable", "model": "not_applicable", "traces": "completed",
                                    "archive": "completed", "restore": "completed"}
    assert done["steps"]["link_model_card"] == "not_applicable"
    traces = json.loads((data_root / job / "sync" / "trace_jobs.manifest.json").read_text())
    assert traces["trials_started"] == run.trials_started and traces["trials_completed"] == run.trials_completed

    summary, members = manifest_of(data_root, job)
    assert summary["kind"] == "datagen"
    trial = next(name.split("/")[1] for name in members if name.endswith("/result.json"))
    for kept in (f"trace_jobs/{trial}/result.json", f"trace_jobs/{trial}/agent/trajectory.json",
                 f"trace_jobs/{trial}/trial.log", f"logs/store/logs/{job}.out", f"logs/attempts/{job}/trainer.log"):
        assert members.get(kept, "absent") is None, kept

    remote = json.loads((data_root / job / "verify" / "archive.json").read_text())["remote"]
    assert remote["dest"] == f"hf://datasets/demo/run-archives/{job}"
    files = set(api.list_repo_files("demo/run-archives", repo_type="dataset"))
    assert {f"{job}/{job}_archive.tgz", f"{job}/MANIFEST", "older-job/MANIFEST"} <= files  # nothing else deleted
    local_tgz = data_root / job / "archive" / f"{job}_archive.tgz"
    assert {o["path_in_repo"]: o["size"] for o in remote["objects"]}[f"{job}/{job}_archive.tgz"] == local_tgz.stat().st_size


def test_eval_keeps_its_two_level_tree_and_skips_only_large_recordings(tmp_path: Path, data_root: Path,
                                                                       bucket: str) -> None:
    job = "eval-demo"
    run = write_eval_run(tmp_path / "run", job=job, name="terminal-bench", large_pane_mb=0.3)
    store_url = f"s3://{bucket}/evals/{job}"
    upload_tree(run.root, open_store(store_url))
    write_record(data_root, run.record(store_url=store_url, archive={"dest": f"s3://{bucket}/archives"}))
    threshold = 100_000

    override = tmp_path / "archive-threshold.yaml"  # --config would pass the number as a string
    override.write_text(f"archive:\n  large_terminal_bytes: {threshold}\n")
    result = run_snakemake(data_root, f"{job}/DONE", extra=("--configfile", str(override)))
    assert result.returncode == 0, result.stderr[-4000:]
    done = done_of(data_root, job)
    assert done["kind"] == "eval"
    assert [(w["step"], w["status"]) for w in done["remaining_work"]] == [("reclaim", "awaiting_authority")]
    assert {name for name, status in done["steps"].items() if status == "not_applicable"} >= {
        "list_checkpoints", "metric_surface", "trial_table", "select_checkpoint", "export_model", "publish_model",
        "publish_traces", "link_model_card", "register"}
    traces = json.loads((data_root / job / "sync" / "trace_jobs.manifest.json").read_text())
    assert traces["source"] == f"{store_url}/eval_jobs" and traces["trial_depth"] == 2
    assert traces["trials_started"] == run.trials_started and traces["trials_completed"] == run.trials_completed

    summary, members = manifest_of(data_root, job)
    assert summary["kind"] == "eval"
    files = run.files()
    recordings = {key: size for key, size in files.items() if key.endswith((".pane", "recording.cast"))}
    large = {key for key, size in recordings.items() if size > threshold}
    small = set(recordings) - large
    assert large and small and any(key.endswith("recording.cast") for key in large)
    for key in large:
        assert members[key] == "large_terminal_recording", key
    for key in small:
        assert members[key] is None, key
    complete = next(key.rsplit("/", 1)[0] for key in files if key.endswith("/manifest.json"))
    for name in ("result.json", "config.json", "agent/trajectory.json", "verifier/reward.txt", "manifest.json",
                 "lock.json", "trial.log"):
        if f"{complete}/{name}" in files:
            assert members[f"{complete}/{name}"] is None, name
    assert members["eval_jobs/terminal-bench/result.json"] is None
    assert members["logs/store/vllm.log"] is None and members["logs/store/job.log"] is None
    verify = json.loads((data_root / job / "verify" / "archive.json").read_text())
    assert verify["local"]["expected_trees"] == ["logs/", "eval_jobs/"]
    with tarfile.open(data_root / job / "archive" / f"{job}_archive.tgz") as tgz:
        assert not any(name.startswith("trace_jobs/") for name in tgz.getnames())
    assert open_store(f"s3://{bucket}/archives").exists(f"{job}/MANIFEST")


def test_a_record_of_an_unknown_kind_stops_before_any_work(data_root: Path) -> None:
    write_record(data_root, {**BASE, "job": "odd", "kind": "pretrain", "checkpoint": {"interval": 5}})
    result = run_snakemake(data_root, "odd/DONE")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "records/odd.yaml: field 'kind' is \"pretrain\"; expected one of: rl, sft, datagen, eval" in out
    assert not (data_root / "odd").exists()
