"""The example-run generator: determinism, store layout, both log serializations, FSDP shards vs
HF export, planted secrets, the job record, the Iris state and the CLI."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from rlkeep.errors import RecordError, RlkeepError
from rlkeep_dev.example import ExampleRun, cli_main, iris_state, tree_digest, write_example_run
from rlkeep_dev.example.logs import console_block

SMALL = dict(n_trials=24, model_hidden=16, large_result_mb=0.3, large_pane_mb=0.12)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^\([^)]+\)\s*")
MIRROR = re.compile(r"WANDB_MIRROR\s+kind=(?P<kind>\S+)\s+step=(?P<step>\d+)\s+metrics=(?P<json>\{.*\})$")
CONTRACT_KEYS = {"job", "user", "scheduler", "cluster", "chain", "store", "layout", "tracker_url", "base_model",
                 "checkpoint", "publish", "register", "archive"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    return write_example_run(tmp_path_factory.mktemp("store") / "rl-demo", seed=7, **SMALL)


def _text(run: ExampleRun, relative: str) -> str:
    return (run.root / relative).read_text(encoding="utf-8")


def _mirror_records(text: str) -> list[tuple[str, int, dict]]:
    records = []
    for line in text.splitlines():
        match = MIRROR.search(ANSI.sub("", line))
        if match:
            records.append((match["kind"], int(match["step"]), json.loads(match["json"])))
    return records


def _console_blocks(text: str) -> dict[int, dict]:
    """`Step N: ` + pprint blocks, parsed the way a reader must: strip ANSI and Ray prefixes."""
    lines = [RAY_PREFIX.sub("", ANSI.sub("", line), count=1) for line in text.splitlines()]
    blocks: dict[int, dict] = {}
    index = 0
    while index < len(lines):
        match = re.search(r"Step (\d+): $", lines[index])
        if match:
            body = []
            index += 1
            while True:
                body.append(lines[index])
                if lines[index].endswith("}"):
                    break
                index += 1
            blocks[int(match[1])] = ast.literal_eval("\n".join(body))
        index += 1
    return blocks


def test_same_parameters_and_seed_give_a_byte_identical_tree(run: ExampleRun, tmp_path: Path) -> None:
    again = write_example_run(tmp_path / "again", seed=7, **SMALL)
    first, second = tree_digest(run.root), tree_digest(again.root)
    assert len(first) > 100
    assert first == second
    assert again.planted_secrets == run.planted_secrets
    other = write_example_run(tmp_path / "other", seed=8, **SMALL)
    assert tree_digest(other.root) != first


def test_store_layout_has_every_durable_artifact(run: ExampleRun) -> None:
    root = run.root
    slugs = [job_id.rsplit("/", 1)[1] for job_id in run.chain]
    assert run.chain == ["/demo/rl-demo", "/demo/rl-demo-r1"]
    for slug in slugs:
        assert (root / f"logs/{slug}.out").stat().st_size > 0
        assert (root / f"vllm/{slug}.log").stat().st_size > 0
        assert (root / f"metrics/{slug}.csv").read_text().startswith("_step,")
        session_logs = list((root / "ray" / slug).glob("session_*/logs"))
        assert len(session_logs) == 1
        names = {p.name for p in session_logs[0].iterdir()}
        assert {"raylet.out", "gcs_server.out"} <= names
        assert sum(n.startswith("worker-") and n.endswith(".out") for n in names) == 2
        assert sum(n.startswith("worker-") and n.endswith(".err") for n in names) == 2
        assert sum(n.startswith("python-core-worker-") and n.endswith(".log") for n in names) == 2
        config = yaml.safe_load((root / f"config/{slug}/resolved_config.yaml").read_text())
        trainer = config["trainer"]
        assert trainer["ckpt_interval"] == run.interval
        assert trainer["strategy"] == "fsdp" and trainer["logger"] == "wandb"
        assert trainer["ckpt_path"].endswith("/ckpts") and trainer["export_path"].endswith("/exports")
    wandb_files = list(root.glob("wandb/run-*/files"))
    assert len(wandb_files) == 1
    assert {p.name for p in wandb_files[0].iterdir()} == {"config.yaml", "output.log", "wandb-summary.json"}
    summary = json.loads((wandb_files[0] / "wandb-summary.json").read_text())
    assert summary["_step"] == run.final_step
    assert (root / "launch_command.txt").read_text().startswith("# submitted")
    assert (root / "core.12345").read_bytes()[:4] == b"\x7fELF"
    assert (root / "__pycache__/x.cpython-311.pyc").stat().st_size > 0


def test_checkpoints_latest_file_incomplete_trailing_dir_and_exports(run: ExampleRun) -> None:
    ckpts, exports = run.root / "ckpts", run.root / "exports"
    assert run.complete_ckpt_steps == [20, 40] and run.incomplete_ckpt_steps == [57] and run.final_step == 57
    assert (ckpts / "latest_ckpt_global_step.txt").read_bytes() == b"40"
    assert sorted(p.name for p in ckpts.glob("global_step_*")) == ["global_step_20", "global_step_40",
                                                                    "global_step_57"]
    for step in run.complete_ckpt_steps:
        policy = ckpts / f"global_step_{step}/policy"
        for kind in ("model", "optim", "extra_state"):
            for rank in (0, 1):
                assert (policy / f"{kind}_world_size_2_rank_{rank}.pt").is_file()
        assert json.loads((policy / "fsdp_config.json").read_text()) == {"fsdp_strategy": "fsdp", "world_size": 2}
        assert (policy / "fsdp_config.json").read_text().startswith('{\n    "fsdp_strategy"')
        assert {p.name for p in (policy / "huggingface").iterdir()} == {
            "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
        assert (ckpts / f"global_step_{step}/trainer_state.pt").is_file()
        assert (ckpts / f"global_step_{step}/data.pt").is_file()
    trailing = ckpts / "global_step_57"
    assert (trailing / "policy/model_world_size_2_rank_0.pt").is_file()
    assert not (trailing / "policy/model_world_size_2_rank_1.pt").exists()
    assert not (trailing / "trainer_state.pt").exists()
    assert run.export_steps == [20, 40]
    for step in run.export_steps:
        assert {p.name for p in (exports / f"global_step_{step}/policy").iterdir()} == {
            "model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
    leftovers = list(exports.glob("global_step_*/.tmp-hf-export-*"))
    assert len(leftovers) == 1
    assert (leftovers[0].parent / "policy").is_dir()
    assert not (leftovers[0] / "config.json").exists()


def test_fsdp_shards_concatenated_equal_the_export_of_the_same_step(run: ExampleRun) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    for step in run.export_steps:
        policy = run.root / f"ckpts/global_step_{step}/policy"
        shards = [torch.load(policy / f"model_world_size_2_rank_{r}.pt", weights_only=False) for r in (0, 1)]
        exported = load_file(run.root / f"exports/global_step_{step}/policy/model.safetensors")
        assert set(shards[0]) == set(shards[1]) == set(exported)
        assert {"model.embed_tokens.weight", "lm_head.weight", "model.layers.0.self_attn.q_proj.weight"} <= set(exported)
        for name, tensor in exported.items():
            merged = torch.cat([shards[0][name], shards[1][name]], dim=0)
            assert merged.dtype == tensor.dtype == torch.bfloat16
            assert torch.equal(merged, tensor), name
        config = json.loads((run.root / f"exports/global_step_{step}/policy/config.json").read_text())
        assert config["architectures"] == ["Qwen3ForCausalLM"]
        assert config["vocab_size"] == exported["model.embed_tokens.weight"].shape[0]
    first, second = (load_file(run.root / f"exports/global_step_{s}/policy/model.safetensors")
                     for s in run.export_steps)
    assert not torch.equal(first["lm_head.weight"], second["lm_head.weight"])


def test_attempt_one_uses_the_wandb_mirror_serialization(run: ExampleRun) -> None:
    text = _text(run, "logs/rl-demo.out")
    records = _mirror_records(text)
    train_steps = [step for kind, step, _ in records if kind == "train"]
    assert train_steps == run.steps_logged["rl-demo"] == list(range(1, 48))
    assert any(kind == "eval" for kind, _, _ in records)
    assert any(value != value for _, _, data in records for value in data.values())  # a NaN survived json
    assert "NaN" in text and "\x1b[" in text and "(skyrl_entrypoint pid=" in text
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| INFO     \| .*WANDB_MIRROR kind=train", text, re.M)
    for noise in ("Avg prompt throughput:", "Batch generation complete:", "Traceback (most recent call last):",
                  "(FSDPPolicyWorkerBase pid=", "(raylet)"):
        assert noise in text, noise
    assert "Step 1: \n" not in text


def test_attempt_two_uses_console_blocks_and_relogs_steps_after_the_resume(run: ExampleRun) -> None:
    text = _text(run, "logs/rl-demo-r1.out")
    assert "WANDB_MIRROR" not in text
    blocks = _console_blocks(text)
    assert sorted(blocks) == run.steps_logged["rl-demo-r1"] == list(range(41, 58))
    assert run.resumed_from == {"rl-demo-r1": 40}
    step_lines = [line for line in text.splitlines() if "Step " in line and line.endswith(": ")]
    assert len(step_lines) == len(blocks)
    assert all(line.startswith("(skyrl_entrypoint pid=") and "\x1b[1mStep " in line for line in step_lines)
    block_lines = [line for line in text.splitlines() if "'trainer/global_step'" in line]
    assert all(line.startswith("(skyrl_entrypoint pid=") and line.endswith("}\x1b[0m") for line in block_lines)
    block = blocks[45]
    assert isinstance(block["trainer/global_step"], int)
    assert re.fullmatch(r"\d+\.\d{4}", block["reward/avg_raw_reward"])
    assert block["policy/policy_lr"] == "0.0000"
    first = {step: data for kind, step, data in _mirror_records(_text(run, "logs/rl-demo.out")) if kind == "train"}
    relogged = sorted(set(first) & set(blocks))
    assert relogged == list(range(41, 48))
    assert any(f"{first[s]['reward/avg_raw_reward']:.4f}" != blocks[s]["reward/avg_raw_reward"] for s in relogged)


def test_console_block_matches_skyrl_console_logger_bytes() -> None:
    block = console_block(5, {"trainer/global_step": 5, "reward/avg_raw_reward": 0.32031, "policy/policy_lr": 1e-06})
    assert block == ("Step 5: \n{'policy/policy_lr': '0.0000',\n 'reward/avg_raw_reward': '0.3203',\n"
                     " 'trainer/global_step': 5}")


def test_every_planted_secret_is_where_the_ledger_says(run: ExampleRun) -> None:
    kinds = {entry["kind"] for entry in run.planted_secrets}
    assert kinds == {"huggingface_token", "wandb_key", "aws_access_key", "aws_secret_key", "presigned_url",
                     "iris_proxy_url", "github_token", "openai_key", "pem_private_key", "password"}
    for entry in run.planted_secrets:
        assert entry["value"] in _text(run, entry["path"]), entry["kind"]
    by_kind = {entry["kind"]: entry for entry in run.planted_secrets}
    assert re.fullmatch(r"hf_[A-Za-z0-9]{34}", by_kind["huggingface_token"]["value"])
    assert by_kind["huggingface_token"]["path"].startswith("config/")
    assert "X-Amz-Signature=" + by_kind["presigned_url"]["value"] in _text(run, by_kind["presigned_url"]["path"])
    assert "iris.oa.dev/proxy/t/" + by_kind["iris_proxy_url"]["value"] in _text(run, by_kind["iris_proxy_url"]["path"])
    assert by_kind["pem_private_key"]["path"].endswith("result.json")
    assert "PRIVATE KEY-----\\n" in _text(run, by_kind["pem_private_key"]["path"])  # escaped inside a JSON string
    assert "password=" + by_kind["password"]["value"] in _text(run, by_kind["password"]["path"])


def test_generator_source_holds_no_credential_shaped_literal(run: ExampleRun) -> None:
    package = Path(__import__("rlkeep_dev.example", fromlist=["x"]).__file__).parent
    source = "\n".join(p.read_text() for p in package.glob("*.py"))
    for pattern in (r"hf_[A-Za-z0-9]{34}", r"AKIA[A-Z0-9]{16}", r"gh[pousr]_[A-Za-z0-9]{36}", r"sk-proj-\w{20}",
                    r"BEGIN [A-Z ]*PRIVATE KEY", r"eyJ[A-Za-z0-9_-]{10,}"):
        assert not re.search(pattern, source), pattern
    for entry in run.planted_secrets:
        assert entry["value"] not in source


def test_trials_are_harbor_shaped(run: ExampleRun) -> None:
    trials = sorted((run.root / "trace_jobs").iterdir())
    assert len(trials) == run.trials_started == SMALL["n_trials"]
    with_result = [t for t in trials if (t / "result.json").is_file()]
    assert len(with_result) == run.trials_completed
    unfinished = [t for t in trials if not (t / "result.json").exists()]
    assert 1 <= len(unfinished) <= 2
    assert all((t / "config.json").is_file() and (t / "agent/trajectory.json").is_file() for t in unfinished)
    fields = ["id", "task_name", "trial_name", "trial_uri", "task_id", "source", "task_checksum", "config",
              "agent_info", "agent_result", "verifier_result", "exception_info", "started_at", "finished_at",
              "environment_setup", "agent_setup", "agent_execution", "verifier"]
    outcomes = {"reward": set(), "failed": 0}
    for trial in with_result:
        result = json.loads((trial / "result.json").read_text())
        assert list(result) == fields
        assert trial.name == result["trial_name"]
        assert re.fullmatch(re.escape(result["task_name"][:32].rstrip("_-")) + r"__[2-9A-HJ-NP-Za-km-z]{7}",
                            trial.name)
        assert result["config"]["job_id"] is None
        assert re.fullmatch(r"Qwen3-8B@\d+",
                            result["config"]["agent"]["kwargs"]["llm_kwargs"]["extra_body"]["cache_salt"])
        assert result["started_at"].endswith("Z")
        if result["exception_info"]:
            outcomes["failed"] += 1
            assert result["verifier_result"] is None
            assert "T" in result["exception_info"]["occurred_at"] and not result["exception_info"]["occurred_at"].endswith("Z")
        else:
            reward = result["verifier_result"]["rewards"]["reward"]
            outcomes["reward"].add(reward)
            assert (trial / "verifier/reward.txt").read_text().strip() == str(int(reward))
            assert (trial / "verifier/test-stdout.txt").is_file()
    assert outcomes["failed"] >= 1 and outcomes["reward"] <= {0.0, 1.0} and outcomes["reward"]
    retry_logs = [t for t in trials if "Retry of " in (t / "trial.log").read_text()]
    assert retry_logs
    assert len(list((run.root / "trace_jobs").glob("*/agent/trajectory.cont-1.json"))) == 1
    big_panes = [p for p in (run.root / "trace_jobs").glob("*/agent/terminus_2.pane")
                 if p.stat().st_size >= SMALL["large_pane_mb"] * 1024 * 1024]
    assert len(big_panes) == 2
    assert list((run.root / "trace_jobs").glob("*/agent/recording.cast"))
    largest = max(p.stat().st_size for p in (run.root / "trace_jobs").glob("*/result.json"))
    assert largest >= 0.7 * SMALL["large_result_mb"] * 1024 * 1024


def test_trajectories_are_atif_with_inline_numeric_arrays(run: ExampleRun) -> None:
    for path in (run.root / "trace_jobs").glob("*/agent/trajectory*.json"):
        text = path.read_text()
        document = json.loads(text)
        assert document["schema_version"] == "ATIF-v1.6"
        assert [s["step_id"] for s in document["steps"]] == list(range(1, len(document["steps"]) + 1))
        assert document["steps"][0]["source"] == "user"
        assert "null" not in text
        assert re.search(r'"completion_token_ids": \[\d+(, \d+)*\]', text)
    head = next((run.root / "trace_jobs").glob("*/agent/trajectory.cont-1.json")).with_name("trajectory.json")
    assert json.loads(head.read_text())["continued_trajectory_ref"] == "trajectory.cont-1.json"


def test_n_trials_scales_the_trial_count(tmp_path: Path) -> None:
    for n_trials in (12, 40):
        run = write_example_run(tmp_path / f"n{n_trials}", n_trials=n_trials, model_hidden=16,
                                large_result_mb=0.05, large_pane_mb=0.02)
        assert run.trials_started == n_trials == len(list((run.root / "trace_jobs").iterdir()))
        assert run.trials_completed == len(list((run.root / "trace_jobs").glob("*/result.json")))


def test_trial_kb_gives_every_trial_agent_a_recording_of_that_size(tmp_path: Path) -> None:
    small = dict(n_trials=12, model_hidden=16, large_result_mb=0.05, large_pane_mb=0.02)
    plain = write_example_run(tmp_path / "plain", **small)
    big = write_example_run(tmp_path / "big", trial_kb=40, **small)
    casts = sorted((big.root / "trace_jobs").glob("*/agent/recording.cast"))
    agents = list((big.root / "trace_jobs").glob("*/agent"))
    assert len(casts) == len(agents) >= 10 and all(40 * 1024 <= p.stat().st_size < 42 * 1024 for p in casts)
    assert json.loads(casts[0].read_text().splitlines()[0])["version"] == 2  # asciinema v2, as terminus writes
    assert len(list((plain.root / "trace_jobs").glob("*/agent/recording.cast"))) < len(agents)

    def trace_bytes(run: ExampleRun) -> int:
        return sum(p.stat().st_size for p in (run.root / "trace_jobs").rglob("*") if p.is_file())
    assert trace_bytes(big) - trace_bytes(plain) > len(agents) * 35 * 1024


def test_record_carries_every_required_contract_field(run: ExampleRun) -> None:
    record = run.record(store_url="s3://demo-bucket/iris/rl-demo/")
    assert set(record) <= CONTRACT_KEYS
    assert record["job"] == "rl-demo" and record["user"] == "demo"
    assert record["scheduler"] == "iris" and record["cluster"] == "cw-local"
    assert record["chain"] == run.chain and record["store"] == "s3://demo-bucket/iris/rl-demo"
    assert record["checkpoint"]["interval"] == 20
    assert record["checkpoint"]["rule"] == {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 0.3333}
    assert record["tracker_url"].startswith("https://wandb.ai/")
    assert yaml.safe_load(yaml.safe_dump(record)) == record
    custom = run.record(store_url="s3://b/r", scheduler="none", cluster=None, rule=None,
                        publish={"model": "org/m", "traces": "org/t", "private": True},
                        register={"authorized": False}, archive={"dest": "s3://b/archives/"},
                        base_model="Qwen/Qwen3-8B")
    assert "cluster" not in custom and "rule" not in custom["checkpoint"]
    assert custom["publish"]["traces"] == "org/t" and custom["base_model"] == "Qwen/Qwen3-8B"
    with pytest.raises(RecordError, match="cluster"):
        run.record(store_url="s3://b/r", cluster=None)


def test_iris_state_serves_the_chain_and_bystanders(run: ExampleRun) -> None:
    state = iris_state(run)
    jobs = state["jobs"]
    first, last = jobs["/demo/rl-demo"], jobs["/demo/rl-demo-r1"]
    assert first["state"] == "failed" and first["exit_code"] == 1 and first["finished_ms"] > first["started_ms"]
    assert first["submitted_ms"] == 1774890000000
    assert last["state"] == "pending" and last["failure_count"] == 1 and last["finished_ms"] is None
    assert last["tasks"][0]["task_id"] == "/demo/rl-demo-r1/0"
    for job_id, slug in (("/demo/rl-demo", "rl-demo"), ("/demo/rl-demo-r1", "rl-demo-r1")):
        stdout = _text(run, f"logs/{slug}.out").splitlines()
        lines = jobs[job_id]["log_lines"]
        assert len(lines) == len(stdout)
        prefix = re.compile(r"^\[\d\d:\d\d:\d\d\] task=" + re.escape(job_id) + r"/0 \| ")
        assert all(prefix.match(line) and prefix.sub("", line) == out for line, out in zip(lines, stdout))
    bystanders = {"/demo/other-rl-demo", "/demo/other-rl-demo/eval", "/someoneelse/rl-demo"}
    assert set(jobs) == set(run.chain) | bystanders | {"/demo/rl-demo-r10"}
    assert all(jobs[j]["state"] == "pending" for j in bystanders)
    assert jobs["/demo/rl-demo-r10"]["state"] == "failed"  # an unrecorded attempt that ended: blocks nothing
    assert [a["attempt_id"] for a in last["tasks"][0]["attempts"]] == ["/demo/rl-demo-r1/0:0", "/demo/rl-demo-r1/0:1"]
    quiet = iris_state(run, pending_retry=False, extra_jobs=False)
    assert set(quiet["jobs"]) == set(run.chain)
    assert quiet["jobs"]["/demo/rl-demo-r1"]["state"] == "failed"
    assert json.loads(json.dumps(state)) == state


def test_cli_writes_tree_record_and_iris_state_and_reruns_safely(tmp_path: Path, capsys) -> None:
    out, record, state = tmp_path / "store", tmp_path / "records/rl-demo.yaml", tmp_path / "iris.json"
    argv = ["--out", str(out), "--trials", "12", "--seed", "2", "--model-hidden", "16", "--large-result-mb",
            "0.05", "--large-pane-mb", "0.02", "--record-out", str(record), "--store-url", "s3://b/iris/rl-demo",
            "--iris-state", str(state)]
    assert cli_main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trials_started"] == 12
    assert yaml.safe_load(record.read_text())["store"] == "s3://b/iris/rl-demo"
    assert "/demo/rl-demo-r1" in json.loads(state.read_text())["jobs"]
    digest = tree_digest(out)
    assert cli_main(argv) == 0  # same run again: nothing changes
    assert tree_digest(out) == digest
    changed = [a if a != "2" else "3" for a in argv]
    with pytest.raises(RlkeepError, match="exists and holds something other"):
        cli_main(changed)
    assert tree_digest(out) == digest
    assert not list(tmp_path.glob(".store.example-tmp-*"))
    with pytest.raises(RlkeepError, match="must be named rl-demo.yaml"):
        cli_main(["--out", str(tmp_path / "x"), "--record-out", str(tmp_path / "other.yaml"), "--store-url", "s3://b"])
    with pytest.raises(RlkeepError, match="--store-url"):
        cli_main(["--out", str(tmp_path / "x"), "--record-out", str(record)])


@pytest.mark.parametrize("kwargs, message", [
    ({"n_steps": 60}, "off-interval"),
    ({"job": "bad/name"}, "job"),
    ({"n_trials": 3}, "n_trials"),
    ({"model_hidden": 20}, "model_hidden"),
    ({"trial_kb": -1}, "trial_kb"),
])
def test_bad_parameters_fail_before_writing(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(RlkeepError, match=message):
        write_example_run(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("seed", [4, 5, 14, 19])
def test_the_smallest_run_still_plants_every_secret_and_the_continuation(tmp_path: Path, seed: int) -> None:
    run = write_example_run(tmp_path / "run", seed=seed, n_trials=12, n_steps=25, interval=10, model_hidden=16,
                            large_result_mb=0.02, large_pane_mb=0.01)
    assert len({entry["kind"] for entry in run.planted_secrets}) == 10
    for entry in run.planted_secrets:
        assert entry["value"] in _text(run, entry["path"]), (entry["kind"], entry["path"])
    assert len(list(run.root.glob("trace_jobs/*/agent/trajectory.cont-1.json"))) == 1
    assert run.steps_logged["rl-demo"][-1] > run.resumed_from["rl-demo-r1"] == run.complete_ckpt_steps[-1] == 20
    assert (run.root / "ckpts/latest_ckpt_global_step.txt").read_text() == "20"


def test_dead_attempts_option_makes_a_chain_of_four_whose_training_is_unchanged(run: ExampleRun, tmp_path: Path) -> None:
    dead = write_example_run(tmp_path / "dead", seed=7, dead_attempts=True, **SMALL)
    assert dead.chain == ["/demo/rl-demo", "/demo/rl-demo-r1", "/demo/rl-demo-r2", "/demo/rl-demo-r3"]
    assert dead.dead_attempts == {"rl-demo-r1": "traceback", "rl-demo-r2": "empty"}
    assert dead.steps_logged["rl-demo-r1"] == dead.steps_logged["rl-demo-r2"] == []
    assert dead.steps_logged["rl-demo"] == run.steps_logged["rl-demo"]
    assert dead.steps_logged["rl-demo-r3"] == run.steps_logged["rl-demo-r1"]  # resumed as before, from the same save
    assert dead.resumed_from == {"rl-demo-r3": run.resumed_from["rl-demo-r1"]}
    assert dead.complete_ckpt_steps == run.complete_ckpt_steps and dead.final_step == run.final_step
    assert (dead.root / "logs/rl-demo-r2.out").stat().st_size == 0
    traceback = _text(dead, "logs/rl-demo-r1.out").splitlines()
    assert traceback[0] == "Traceback (most recent call last):" and traceback[-1].startswith("RuntimeError: ")
    assert all(line.startswith(("Traceback", "  ", "RuntimeError")) for line in traceback)  # nothing else
    assert not (dead.root / "vllm/rl-demo-r1.log").exists() and not (dead.root / "metrics/rl-demo-r2.csv").exists()
    jobs = iris_state(dead)["jobs"]
    assert jobs["/demo/rl-demo-r2"]["log_lines"] == [] and len(jobs["/demo/rl-demo-r1"]["log_lines"]) == len(traceback)
    assert [jobs[j]["state"] for j in dead.chain] == ["failed", "failed", "failed", "pending"]
    again = write_example_run(tmp_path / "dead-again", seed=7, dead_attempts=True, **SMALL)
    assert tree_digest(again.root) == tree_digest(dead.root)
