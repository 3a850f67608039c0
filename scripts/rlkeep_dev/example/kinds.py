"""Realistic finished runs of the other kinds the archive runbook covers: SFT, datagen, eval.

`write_sft_run` (a SLURM SFT run folder), `write_datagen_run` (one-level `trace_jobs/<trial>/` and
the harbor run log) and `write_eval_run` (`eval_jobs/<name>/<trial>/` plus `vllm.log`, `job.log`)
write a run's store tree into `root`, deterministically (same parameters, byte-identical tree).
Harbor trials come from the RL example's own builders (trials.py, atif.py), written under the
kind's trace tree. `KindRun.record()` gives the job record.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from . import clock
from .context import SERVED_MODEL, WANDB_ENTITY, RunContext, make_wandb_run_id
from .credentials import PlantedSecrets, make_credentials
from .plan import Params, build_plan
from .tree import Tree
from .trials import TrialSpec, plan_trials, write_trial


@dataclass
class KindRun:
    root: Path
    job: str
    kind: str
    user: str
    chain: list[str]
    scheduler: str
    tracker_url: str | None = None
    trace_tree: str | None = None
    trials_started: int = 0
    trials_completed: int = 0
    scontrol_lines: dict[str, str] = field(default_factory=dict, repr=False)  # slurm id -> `scontrol -o` line

    def files(self) -> dict[str, int]:
        """Every file of the run: POSIX path relative to root -> size."""
        return {p.relative_to(self.root).as_posix(): p.stat().st_size for p in sorted(self.root.rglob("*"))
                if p.is_file()}

    def record(self, *, store_url: str, cluster: str | None = None, archive: dict | None = None,
               publish: dict | None = None) -> dict[str, Any]:
        record: dict[str, Any] = {"job": self.job, "kind": self.kind, "user": self.user, "scheduler": self.scheduler}
        if cluster:
            record["cluster"] = cluster
        record["chain"] = list(self.chain)
        record["store"] = store_url.rstrip("/")
        if self.tracker_url:
            record["tracker_url"] = self.tracker_url
        if publish is not None:
            record["publish"] = dict(publish)
        if archive is not None:
            record["archive"] = dict(archive)
        return record


def _install(root: Path, build: Callable[[Tree], None]) -> None:
    """Build the tree in a private staging folder, then rename it into place (never half-written)."""
    from . import _install as install_tree

    root = Path(root)
    staging = root.parent / f".{root.name}.example-tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        build(Tree(staging))
        install_tree(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _RemappedTree(Tree):
    """A Tree whose `trace_jobs/` prefix is written under another folder (eval: `eval_jobs/<name>/`)."""

    def __init__(self, inner: Tree, prefix: str) -> None:
        super().__init__(inner.root)
        self.prefix = prefix

    def path(self, relative: str) -> Path:
        if relative.startswith("trace_jobs/"):
            relative = self.prefix + relative[len("trace_jobs/"):]
        return super().path(relative)


def _trial_context(job: str, user: str, n_trials: int, seed: int, large_pane_mb: float) -> RunContext:
    params = Params(job, user, n_trials, 23, 10, seed, 16, 0.0, large_pane_mb)
    return RunContext(build_plan(params), make_credentials(seed), PlantedSecrets(), make_wandb_run_id(seed))


def _write_trials(tree: Tree, ctx: RunContext, prefix: str) -> list[TrialSpec]:
    target = tree if prefix == "trace_jobs/" else _RemappedTree(tree, prefix)
    specs = plan_trials(ctx)
    for spec in specs:
        write_trial(target, ctx, spec)
    return specs


# --------------------------------------------------------------------------- SFT (SLURM)


def _sft_config(job: str, seed: int, n_steps: int, save_steps: int) -> str:
    return (
        "### model\n"
        "model_name_or_path: Qwen/Qwen3-8B\n"
        "trust_remote_code: true\n\n"
        "### method\n"
        "stage: sft\ndo_train: true\nfinetuning_type: full\n"
        "deepspeed: examples/deepspeed/ds_z3_config.json\n\n"
        "### dataset\n"
        "dataset: laion_swe_traces_v3\ntemplate: qwen3\ncutoff_len: 32768\npreprocessing_num_workers: 16\n\n"
        "### output\n"
        f"output_dir: experiments/{job}\nlogging_steps: 1\nsave_steps: {save_steps}\nplot_loss: true\n"
        "overwrite_output_dir: false\n\n"
        "### train\n"
        "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nlearning_rate: 1.0e-5\n"
        f"max_steps: {n_steps}\nlr_scheduler_type: cosine\nwarmup_ratio: 0.03\nbf16: true\n"
        f"seed: {seed}\nreport_to: wandb\nrun_name: {job}\n"
    )


def _loss(step: int, seed: int) -> float:
    rng = random.Random(f"{seed}/sft-loss/{step}")
    return round(1.9 * 0.97 ** step + 0.35 + rng.uniform(-0.04, 0.04), 4)


def _sft_step_line(step: int, n_steps: int, seed: int) -> str:
    lr = 1.0e-5 * 0.5 * (1 + np.cos(np.pi * step / n_steps))
    return ("{'loss': %.4f, 'grad_norm': %.4f, 'learning_rate': %.4e, 'epoch': %.2f}"
            % (_loss(step, seed), 0.8 + 0.3 * random.Random(f"{seed}/gn/{step}").random(), lr, step / n_steps))


def _safetensors_bytes(seed: int, step: int, hidden: int) -> bytes:
    from safetensors.numpy import save

    generator = np.random.default_rng(seed * 1000 + step)
    return save({"model.embed_tokens.weight": generator.standard_normal((64, hidden)).astype(np.float32),
                 "lm_head.weight": generator.standard_normal((64, hidden)).astype(np.float32)})


def _sft_launch_script(job: str) -> str:
    return ("#!/bin/bash\n#SBATCH --job-name=%s\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:1\n"
            "#SBATCH --output=logs/%%j.out\n#SBATCH --error=logs/%%j.err\n#SBATCH --requeue\n"
            "srun llamafactory-cli train configs/sft.yaml\n" % job)


def _sft_trainer_row(step: int, n_steps: int, seed: int, now: datetime, began: datetime) -> dict[str, Any]:
    """One `trainer_log.jsonl` row as LLaMA-Factory writes it."""
    return {"current_steps": step, "total_steps": n_steps, "loss": _loss(step, seed),
            "lr": round(1.0e-5 * 0.5 * (1 + float(np.cos(np.pi * step / n_steps))), 10),
            "epoch": round(step / n_steps, 2), "percentage": round(100 * step / n_steps, 2),
            "elapsed_time": str(now - began).split(".")[0],
            "remaining_time": str((n_steps - step) * timedelta(seconds=43)).split(".")[0]}


def _write_sft_attempt(tree: Tree, *, job: str, job_id: str, first: bool, steps: range, n_steps: int,
                       save_steps: int, seed: int, wandb_id: str, submitted: datetime,
                       trainer_log: list[dict[str, Any]]) -> tuple[datetime, datetime]:
    """`logs/<job_id>.out` and `.err` of one attempt (the first dies of a node failure), its rows
    appended to `trainer_log`; returns when it began and ended."""
    began = submitted + timedelta(seconds=400)
    out = [f"[INFO|{clock.python_logging(began)}] llamafactory.hparams.parser: Process rank: 0, world size: 4",
           f"[INFO|{clock.python_logging(began)}] llamafactory.data.loader: Loading dataset laion_swe_traces_v3",
           f"wandb: Tracking run with wandb version 0.19.8",
           f"wandb: View run at https://wandb.ai/{WANDB_ENTITY}/sft/runs/{wandb_id}"]
    if not first:
        out.append(f"[INFO|trainer.py:2412] Continuing training from checkpoint experiments/{job}/"
                   f"checkpoint-{save_steps}")
    now = began + timedelta(seconds=90)
    for step in steps:
        now += timedelta(seconds=41 + step % 5)
        out.append(f"{step}/{n_steps} [{clock.clock(now)}] " + _sft_step_line(step, n_steps, seed))
        trainer_log.append(_sft_trainer_row(step, n_steps, seed, now, began))
        if step % save_steps == 0:
            out.append(f"[INFO|trainer.py:3984] Saving model checkpoint to experiments/{job}/checkpoint-{step}")
    err = [f"{clock.python_logging(began)} - torch.distributed - WARNING - NCCL_ASYNC_ERROR_HANDLING is deprecated"]
    if first:
        err.append("srun: error: c611-004: task 3: Killed")
        err.append("slurmstepd: error: *** JOB %s ON c611-002 CANCELLED AT %s DUE TO NODE FAILURE ***"
                   % (job_id, clock.iso_naive(now).split(".")[0]))
    else:
        out.append("***** train metrics *****\n  epoch = 1.0\n  train_loss = %.4f" % _loss(n_steps, seed))
    tree.write_text(f"logs/{job_id}.out", "\n".join(out) + "\n")
    tree.write_text(f"logs/{job_id}.err", "\n".join(err) + "\n")
    return began, now


def _write_sft_checkpoints(tree: Tree, *, job: str, seed: int, hidden: int, n_steps: int, save_steps: int,
                           trainer_log: list[dict[str, Any]]) -> None:
    """`checkpoint-<step>/`: weights, optimizer and training args (which the archive skips), state, config."""
    for step in range(save_steps, n_steps + 1, save_steps):
        base = f"checkpoint-{step}"
        tree.write_bytes(f"{base}/model.safetensors", _safetensors_bytes(seed, step, hidden))
        tree.write_bytes(f"{base}/optimizer.pt", np.random.default_rng(step).bytes(4096))
        tree.write_bytes(f"{base}/training_args.bin", b"\x80\x04" + job.encode() + b"\x00" * 62)
        tree.write_json(f"{base}/trainer_state.json", {"global_step": step, "log_history": trainer_log[:step]})
        tree.write_json(f"{base}/config.json", {"architectures": ["Qwen3ForCausalLM"], "hidden_size": hidden})


def _write_sft_wandb(tree: Tree, *, start: datetime, wandb_id: str, config: str, n_steps: int, seed: int) -> None:
    run_dir = f"wandb/run-{start:%Y%m%d_%H%M%S}-{wandb_id}"
    tree.write_text(f"{run_dir}/files/config.yaml", config)
    tree.write_json(f"{run_dir}/files/wandb-summary.json",
                    {"train/loss": _loss(n_steps, seed), "train/global_step": n_steps})
    tree.write_bytes(f"{run_dir}/run-{wandb_id}.wandb", b":W&B\x00\x01" + bytes(range(256)) * 4)
    tree.write_text("wandb/debug.log", f"wandb run {wandb_id} synced\n")


def _sft_scontrol_line(*, job: str, user: str, job_id: str, state: str, exit_code: str,
                       times: tuple[datetime, datetime, datetime], stdout_base: str) -> str:
    """`scontrol show job` of one attempt, on one line."""
    submitted, began, ended = times
    return (
        f"JobId={job_id} JobName={job} UserId={user}(1001) GroupId={user}(1001) Account=laion QOS=normal "
        f"JobState={state} Reason={'NodeDown' if state == 'NODE_FAIL' else 'None'} Requeue=1 "
        f"Restarts={0 if state == 'COMPLETED' else 1} BatchFlag=1 ExitCode={exit_code} "
        f"SubmitTime={clock.iso_naive(submitted)[:19]} StartTime={clock.iso_naive(began)[:19]} "
        f"EndTime={clock.iso_naive(ended)[:19]} Partition=gh NumNodes=4 "
        f"Command={stdout_base}/launch.sbatch WorkDir={stdout_base} "
        f"StdErr={stdout_base}/logs/%j.err StdIn=/dev/null StdOut={stdout_base}/logs/{job_id}.out Power="
    )


def write_sft_run(root: Path, *, job: str = "sft-demo", user: str = "demo",
                  job_ids: tuple[str, ...] = ("4815101", "4815162"), n_steps: int = 40, save_steps: int = 20,
                  seed: int = 0, hidden: int = 64, stdout_root: str | None = None) -> KindRun:
    """A LLaMA-Factory SFT run folder as SLURM leaves it (`experiments/<job>/`).

    Attempt 1 dies of a node failure and is requeued as attempt 2, which finishes. Files:
    `logs/<id>.out` / `.err` (per-step logs), `trainer_log.jsonl`, the rendered `configs/sft.yaml`
    and `launch.sbatch`, `wandb/run-*/`, and checkpoint weights `checkpoint-*/model.safetensors`
    (+ optimizer and training args) that the archive skips. stdout_root: where the SLURM StdOut
    paths point (default: this folder, as on a shared filesystem).
    """
    root = Path(root)
    wandb_id = make_wandb_run_id(seed + 7)
    start = clock.at(0.0)
    first_last = n_steps // 2 + 3
    attempts = [(job_ids[0], range(1, first_last + 1), "NODE_FAIL", "0:9"),
                (job_ids[1], range(save_steps + 1, n_steps + 1), "COMPLETED", "0:0")]
    times: dict[str, tuple[datetime, datetime, datetime]] = {}

    def build(tree: Tree) -> None:
        config = _sft_config(job, seed, n_steps, save_steps)
        tree.write_text("configs/sft.yaml", config)
        tree.write_text("launch.sbatch", _sft_launch_script(job))
        trainer_log: list[dict[str, Any]] = []
        submitted = start
        for index, (job_id, steps, _, _) in enumerate(attempts):
            began, ended = _write_sft_attempt(tree, job=job, job_id=job_id, first=index == 0, steps=steps,
                                              n_steps=n_steps, save_steps=save_steps, seed=seed, wandb_id=wandb_id,
                                              submitted=submitted, trainer_log=trainer_log)
            times[job_id] = (submitted, began, ended)
            submitted = ended + timedelta(seconds=12)
        tree.write_text("trainer_log.jsonl", "".join(json.dumps(row) + "\n" for row in trainer_log))
        _write_sft_checkpoints(tree, job=job, seed=seed, hidden=hidden, n_steps=n_steps, save_steps=save_steps,
                               trainer_log=trainer_log)
        _write_sft_wandb(tree, start=start, wandb_id=wandb_id, config=config, n_steps=n_steps, seed=seed)

    _install(root, build)
    stdout_base = stdout_root or str(root)
    lines = {job_id: _sft_scontrol_line(job=job, user=user, job_id=job_id, state=state, exit_code=exit_code,
                                        times=times.get(job_id) or (start, start, start), stdout_base=stdout_base)
             for job_id, _, state, exit_code in attempts}
    return KindRun(root=root, job=job, kind="sft", user=user, chain=list(job_ids), scheduler="slurm",
                   tracker_url=f"https://wandb.ai/{WANDB_ENTITY}/sft/runs/{wandb_id}", scontrol_lines=lines)


# --------------------------------------------------------------------------- datagen


def _harbor_log(ctx: RunContext, specs: list[TrialSpec], what: str) -> str:
    lines = [f"{clock.python_logging(specs[0].started)} - harbor.cli - INFO - {what}: {len(specs)} trials, "
             f"agent terminus-2, model hosted_vllm/{SERVED_MODEL}, n_concurrent 32"]
    for spec in specs:
        state = "incomplete" if spec.status == "incomplete" else (
            f"failed ({spec.exception[0]})" if spec.exception else f"reward={spec.reward}")
        lines.append(f"{clock.python_logging(spec.started)} - harbor.job - INFO - trial {spec.name}: {state}")
    return "\n".join(lines) + "\n"


def write_datagen_run(root: Path, *, job: str = "datagen-demo", user: str = "demo", n_trials: int = 24,
                      seed: int = 0, large_pane_mb: float = 0.0) -> KindRun:
    """A Harbor trace-generation run: one-level `trace_jobs/<trial>/` + the harbor run log
    (`logs/<job>.out`, the job's stdout) and the run's config."""
    ctx = _trial_context(job, user, n_trials, seed, large_pane_mb)
    specs: list[TrialSpec] = []

    def build(tree: Tree) -> None:
        specs.extend(_write_trials(tree, ctx, "trace_jobs/"))
        tree.write_text(f"logs/{job}.out", _harbor_log(ctx, specs, "harbor run (datagen)"))
        tree.write_text("configs/datagen.yaml", f"job_name: {job}\nagent: terminus-2\nmodel: hosted_vllm/{SERVED_MODEL}\n"
                        f"n_attempts: 1\nn_concurrent: 32\ntrials_dir: trace_jobs\n")

    _install(root, build)
    return KindRun(root=Path(root), job=job, kind="datagen", user=user, chain=[f"/{user}/{job}"], scheduler="none",
                   trace_tree="trace_jobs", trials_started=len(specs),
                   trials_completed=sum(1 for s in specs if s.status != "incomplete"))


# --------------------------------------------------------------------------- eval


def write_eval_run(root: Path, *, job: str = "eval-demo", user: str = "demo", name: str = "terminal-bench",
                   n_trials: int = 16, seed: int = 0, large_pane_mb: float = 0.3) -> KindRun:
    """An agentic Harbor eval: `eval_jobs/<name>/<trial>/{result.json, config.json,
    agent/trajectory.json, verifier/, manifest.json, lock.json, trial.log}`, the eval job's own
    `result.json`/`config.json`, and top-level `vllm.log`, `job.log`. Two trials carry
    `*.pane`/`recording.cast` of `large_pane_mb`; the others small ones."""
    ctx = _trial_context(job, user, n_trials, seed, large_pane_mb)
    prefix = f"eval_jobs/{name}/"
    specs: list[TrialSpec] = []

    def build(tree: Tree) -> None:
        specs.extend(_write_trials(tree, ctx, prefix))
        for spec in specs:
            base = f"{prefix}{spec.name}"
            tree.write_json(f"{base}/lock.json", {"harbor_version": "0.18.2", "task_checksum": spec.task,
                                                  "acquired_at": clock.iso_z(spec.started)}, indent=2)
            if spec.status != "incomplete":
                tree.write_json(f"{base}/manifest.json", {"trial_name": spec.name, "files": ["result.json",
                                "config.json", "agent/trajectory.json", "trial.log"]}, indent=2)
        finished = [s for s in specs if s.reward is not None]
        rewards = [s.reward for s in finished]
        tree.write_json(f"{prefix}result.json", {
            "id": f"{job}-{name}", "n_total_trials": len(specs),
            "stats": {"evals": {name: {"n_trials": len(finished), "n_errors": sum(1 for s in specs if s.exception),
                                       "reward_stats": {"mean": round(sum(rewards) / max(1, len(rewards)), 4)}}}}})
        tree.write_json(f"{prefix}config.json", {"job_name": name, "agents": [{"name": "terminus-2",
                        "model_name": f"hosted_vllm/{SERVED_MODEL}"}], "n_attempts": 1})
        moment = specs[0].started
        vllm = [f"INFO {clock.vllm(moment)} [api_server.py:1090] vLLM API server version 0.10.1",
                f"INFO {clock.vllm(moment)} [api_server.py:1091] args: model={SERVED_MODEL} tensor_parallel_size=1"]
        vllm += [f"INFO {clock.vllm(s.started)} [logger.py:41] Received request chatcmpl-{i:04d}: prompt tokens"
                 for i, s in enumerate(specs)]
        tree.write_text("vllm.log", "\n".join(vllm) + "\n")
        tree.write_text("job.log", _harbor_log(ctx, specs, f"harbor jobs start ({name})"))

    _install(root, build)
    return KindRun(root=Path(root), job=job, kind="eval", user=user, chain=[f"/{user}/{job}"], scheduler="none",
                   trace_tree="eval_jobs", trials_started=len(specs),
                   trials_completed=sum(1 for s in specs if s.status != "incomplete"))
