"""The run's other durable non-weight files: Ray session logs, vLLM logs, resolved configs, the
launch command, the W&B run dir, per-attempt metric CSVs, and the junk a real store also holds
(a core dump and a `.pyc`, which an archive must skip)."""
from __future__ import annotations

import csv
import io
import json
import random
from datetime import timedelta

import yaml

from . import clock
from .context import (
    BASE_MODEL,
    CLUSTER,
    HEAD_IP,
    SERVED_MODEL,
    WANDB_ENTITY,
    WANDB_PROJECT,
    WORKER_IP,
    WORLD_SIZE,
    RunContext,
    vllm_pid,
    worker_pid,
)
from .logs import throughput_line
from .metrics import SAMPLES_PER_PROMPT, TRAIN_BATCH_SIZE
from .plan import AttemptPlan
from .tree import Tree


def _hex(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(length))


def _ray_line(moment, pid: int, component: str, where: str, text: str, level: str = "I") -> str:
    return f"[{clock.python_logging(moment)} {level} {pid} {pid}] ({component}) {where}: {text}"


def write_ray_session(tree: Tree, ctx: RunContext, attempt: AttemptPlan) -> None:
    rng = ctx.rng(f"ray/{attempt.slug}")
    start = attempt.started + timedelta(seconds=1.5)
    session = f"session_{start:%Y-%m-%d_%H-%M-%S}_{start.microsecond:06d}_2150"
    base = f"ray/{attempt.slug}/{session}/logs"
    raylet, gcs = [], []
    raylet.append(_ray_line(start, 2150, "raylet", "main.cc:218", f"Setting cluster ID to: {_hex(rng, 56)}"))
    raylet.append(_ray_line(start, 2150, "raylet", "main.cc:363", "Raylet is not set to kill unknown children."))
    raylet.append(_ray_line(start, 2150, "raylet", "io_service_pool.cc:35", "IOServicePool is running with 1 io_service."))
    gcs.append(_ray_line(start, 2090, "gcs_server", "gcs_server.cc:75", "GCS storage type is StorageType::IN_MEMORY"))
    gcs.append(_ray_line(start, 2090, "gcs_server", "gcs_init_data.cc:42", "Loading job table data."))
    for step in attempt.steps:
        moment = attempt.step_end[step]
        if step % 4 == 0:
            raylet.append(_ray_line(moment, 2150, "raylet", "node_manager.cc:525",
                                    f"[state-dump] NodeManager: num_workers={rng.randint(10, 14)} "
                                    f"object_store_used={rng.uniform(0.2, 3.5):.2f}GiB"))
        if step % 9 == 0:
            gcs.append(_ray_line(moment, 2090, "gcs_server", "gcs_server.cc:289",
                                 f"GcsNodeManager: RegisterNode request count: 2, heartbeat p99={rng.randint(3, 40)}ms"))
    end = attempt.failed_at
    if attempt.index == 0:
        raylet.append(_ray_line(end, 2150, "raylet", "node_manager.cc:3069", "1 Workers (tasks / actors) killed "
                                f"due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
                                f"(IP: {WORKER_IP}).", level="E"))
    else:
        raylet.append(_ray_line(end, 2150, "raylet", "node_manager.cc:3069",
                                f"Worker {worker_pid(attempt, 1)} exited with SYSTEM_ERROR.", level="E"))
    gcs.append(_ray_line(end, 2090, "gcs_server", "gcs_actor_manager.cc:1051",
                         "Actor FSDPPolicyWorkerBase is dead: worker process died", level="W"))
    tree.write_text(f"{base}/raylet.out", "\n".join(raylet) + "\n")
    tree.write_text(f"{base}/gcs_server.out", "\n".join(gcs) + "\n")
    for rank in range(WORLD_SIZE):
        _write_worker_logs(tree, ctx, attempt, base, rank, rng)


def _write_worker_logs(tree: Tree, ctx: RunContext, attempt: AttemptPlan, base: str, rank: int,
                       rng: random.Random) -> None:
    worker_id = _hex(rng, 56)
    pid = worker_pid(attempt, rank)
    stem = f"worker-{worker_id}-01000000-{pid}"
    out = [":actor_name:FSDPPolicyWorkerBase"]
    for step in attempt.steps:
        out.append(f"[rank{rank}]: step {step}: policy_loss={attempt.metrics[step]['policy/policy_loss']:.5f} "
                   f"tokens/s/gpu={rng.uniform(900, 1700):.1f}")
    err = [":actor_name:FSDPPolicyWorkerBase",
           "/app/.venv/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_state.py:172: "
           "UserWarning: FSDP reshard_after_forward=True with a single mesh dim is a no-op",
           "  warnings.warn("]
    if attempt.index == 0 and rank == 0:
        creds = ctx.credentials
        path = f"{base}/{stem}.err"
        ctx.planted.plant("aws_access_key", path, creds.aws_key_id)
        ctx.planted.plant("aws_secret_key", path, creds.aws_secret)
        err.append(f"[runtime_env] worker env_vars={{'AWS_ACCESS_KEY_ID': '{creds.aws_key_id}', "
                   f"'AWS_SECRET_ACCESS_KEY': '{creds.aws_secret}', 'AWS_ENDPOINT_URL_S3': "
                   f"'https://cwobject.com', 'RAY_DEDUP_LOGS': '0'}}")
    core = [f"[{clock.python_logging(attempt.started)} I {pid} {pid}] core_worker.cc:286: Constructing CoreWorker. "
            f"worker_id: {worker_id}",
            f"[{clock.python_logging(attempt.started)} I {pid} {pid}] core_worker.cc:722: Adjusted worker niceness to 15",
            f"[{clock.python_logging(attempt.failed_at)} I {pid} {pid}] core_worker.cc:4123: Force kill actor request "
            f"has received. exiting immediately."]
    tree.write_text(f"{base}/{stem}.out", "\n".join(out) + "\n")
    tree.write_text(f"{base}/{stem}.err", "\n".join(err) + "\n")
    tree.write_text(f"{base}/python-core-worker-{worker_id}_{pid}.log", "\n".join(core) + "\n")


def write_vllm_log(tree: Tree, ctx: RunContext, attempt: AttemptPlan) -> None:
    rng = ctx.rng(f"vllm/{attempt.slug}")
    path = f"vllm/{attempt.slug}.log"
    moment = attempt.started + timedelta(seconds=60)
    lines = [
        f"INFO {clock.vllm(moment)} [api_server.py:1805] vLLM API server version 0.10.1.1",
        f"INFO {clock.vllm(moment)} [utils.py:326] non-default args: {{'model': '{BASE_MODEL}', "
        f"'served_model_name': ['{SERVED_MODEL}'], 'enable_prefix_caching': True, 'seed': {vllm_pid(attempt, 0)}}}",
    ]
    if attempt.index == 0:
        password = ctx.planted.plant("password", path, ctx.credentials.password)
        lines.append(f"INFO {clock.vllm(moment)} [metrics_sink.py:41] exporting engine stats to "
                     f"redis://vllm-metrics.internal:6379/0 password={password}")
    for step in attempt.steps:
        start = attempt.step_start[step]
        for share in (0.2, 0.5, 0.8):
            at = start + timedelta(seconds=float(attempt.metrics[step]["timing/generate"]) * share)
            lines.append(throughput_line(rng, at))
            lines.append(f'INFO:     {HEAD_IP}:{rng.randint(40000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    lines.append(f"ERROR {clock.vllm(attempt.failed_at)} [core_client.py:564] Engine core proc EngineCore_0 died "
                 "unexpectedly, shutting down client.")
    tree.write_text(path, "\n".join(lines) + "\n")


def resolved_config(ctx: RunContext, attempt: AttemptPlan) -> dict:
    params = ctx.plan.params
    return {
        "data": {
            "train_data": ["/data/harbor/train_tasks.parquet"],
            "val_data": ["/data/harbor/terminal_bench_eval.parquet"],
        },
        "trainer": {
            "placement": {"colocate_all": True, "policy_num_nodes": 1, "policy_num_gpus_per_node": WORLD_SIZE},
            "strategy": "fsdp",
            "policy": {
                "model": {"path": BASE_MODEL},
                "optimizer_config": {"lr": 1.0e-6, "weight_decay": 0.01, "max_grad_norm": 1.0},
                "fsdp_config": {"cpu_offload": False, "reshard_after_forward": True},
            },
            "algorithm": {"advantage_estimator": "grpo", "use_kl_loss": False, "loss_reduction": "token_mean"},
            "epochs": 1,
            "train_batch_size": TRAIN_BATCH_SIZE,
            "policy_mini_batch_size": TRAIN_BATCH_SIZE // 2,
            "micro_train_batch_size_per_gpu": 1,
            "eval_batch_size": 32,
            "eval_before_train": attempt.index == 0,
            "eval_interval": ctx.plan.eval_interval,
            "ckpt_interval": params.interval,
            "hf_save_interval": params.interval,
            "max_ckpts_to_keep": -1,
            "ckpt_path": f"{ctx.store_uri}/ckpts",
            "export_path": f"{ctx.store_uri}/exports",
            "resume_mode": "latest",
            "logger": "wandb",
            "project_name": WANDB_PROJECT,
            "run_name": ctx.job,
            "seed": 42,
        },
        "generator": {
            "backend": "vllm",
            "num_inference_engines": 2,
            "inference_engine_tensor_parallel_size": 1,
            "n_samples_per_prompt": SAMPLES_PER_PROMPT,
            "served_model_name": SERVED_MODEL,
            "sampling_params": {"temperature": 1.0, "top_p": 1.0, "max_generate_length": 4096},
        },
        "harbor": {
            "agent": "terminus-2",
            "max_turns": 32,
            "trials_dir": "/mnt/local_storage/trials_run",
            "trace_jobs_uri": f"{ctx.store_uri}/trace_jobs",
            "max_retries": 2,
        },
        "env_vars": {
            "HF_TOKEN": ctx.credentials.hf_token,
            "WANDB_PROJECT": WANDB_PROJECT,
            "WANDB_ENTITY": WANDB_ENTITY,
            "RAY_DEDUP_LOGS": "0",
        },
    }


def write_config(tree: Tree, ctx: RunContext, attempt: AttemptPlan) -> None:
    path = f"config/{attempt.slug}/resolved_config.yaml"
    ctx.planted.plant("huggingface_token", path, ctx.credentials.hf_token)
    tree.write_text(path, yaml.safe_dump(resolved_config(ctx, attempt), sort_keys=False, allow_unicode=True))


def write_launch_command(tree: Tree, ctx: RunContext) -> None:
    params = ctx.plan.params
    overrides = (
        f"trainer.ckpt_interval={params.interval} trainer.hf_save_interval={params.interval} "
        f"trainer.ckpt_path={ctx.store_uri}/ckpts trainer.export_path={ctx.store_uri}/exports "
        f"trainer.logger=wandb trainer.strategy=fsdp generator.n_samples_per_prompt={SAMPLES_PER_PROMPT}"
    )
    text = (
        f"# submitted {clock.iso_z(ctx.plan.attempts[0].submitted)}; resubmitted unchanged as "
        f"{ctx.plan.attempts[1].job_id}\n"
        f"iris --cluster={CLUSTER} job run --name {params.job} --user {params.user} --gpus 2 \\\n"
        f"  -e WANDB_API_KEY \"${{WANDB_API_KEY}}\" -e HF_TOKEN \"${{HF_TOKEN}}\" \\\n"
        f"  -- uv run --isolated --extra vllm -m skyrl_train.entrypoints.main_base {overrides}\n"
    )
    tree.write_text("launch_command.txt", text)


def write_wandb_run(tree: Tree, ctx: RunContext, stdout_text: str) -> None:
    first, last = ctx.plan.attempts[0], ctx.plan.attempts[-1]
    base = f"wandb/run-{first.started:%Y%m%d_%H%M%S}-{ctx.wandb_run_id}/files"
    config = {
        "_wandb": {"value": {"cli_version": "0.22.3", "python_version": "3.11.13", "m": [], "t": {"1": [1, 11, 41, 49]}}},
        "trainer": {"value": resolved_config(ctx, first)["trainer"]},
        "generator": {"value": resolved_config(ctx, first)["generator"]},
    }
    tree.write_text(f"{base}/config.yaml", yaml.safe_dump(config, sort_keys=False))
    tree.write_text(f"{base}/output.log", stdout_text)
    final_step = last.steps[-1]
    summary = dict(last.metrics[final_step])
    runtime = (last.step_end[final_step] - first.started).total_seconds()
    summary.update({"_step": final_step, "_runtime": round(runtime, 3),
                    "_timestamp": round(last.step_end[final_step].timestamp(), 6),
                    "_wandb": {"runtime": int(runtime)}})
    tree.write_text(f"{base}/wandb-summary.json", json.dumps(summary, sort_keys=True))


def write_metrics_csv(tree: Tree, attempt: AttemptPlan) -> None:
    keys = sorted({key for values in attempt.metrics.values() for key in values})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["_step", *keys])
    for step in attempt.steps:
        values = attempt.metrics[step]
        writer.writerow([step, *[values.get(key, "") for key in keys]])
    tree.write_text(f"metrics/{attempt.slug}.csv", buffer.getvalue())


def write_junk(tree: Tree, ctx: RunContext) -> None:
    """A core dump and a compiled module: present in real stores, worthless in an archive."""
    rng = ctx.rng("junk")
    elf_header = b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x04\x00\x3e\x00"
    tree.write_bytes("core.12345", elf_header + rng.randbytes(256 * 1024 - len(elf_header)))
    pyc_header = b"\xa7\x0d\x0d\x0a" + bytes(12)  # CPython 3.11 magic, flags, mtime, size
    tree.write_bytes("__pycache__/x.cpython-311.pyc", pyc_header + rng.randbytes(2048))


def write_run_files(tree: Tree, ctx: RunContext, stdout_texts: dict[str, str]) -> None:
    for attempt in ctx.plan.attempts:
        if attempt.death is not None:  # dead before Ray, vLLM or the config writer started: only its log
            continue
        write_ray_session(tree, ctx, attempt)
        write_vllm_log(tree, ctx, attempt)
        write_config(tree, ctx, attempt)
        write_metrics_csv(tree, attempt)
    write_launch_command(tree, ctx)
    write_wandb_run(tree, ctx, stdout_texts[ctx.plan.attempts[-1].slug])
    write_junk(tree, ctx)
