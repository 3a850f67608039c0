"""Trainer stdout of each attempt, in the two serializations SkyRL runs produce, with the noise.

Attempt 1 mirrors its tracker payloads as `WANDB_MIRROR kind=… step=… metrics={json}` loguru
lines (docs/reference.md, formats §2.1); later attempts use the console backend's `Step N: ` + pprint block
(§2.2). Both carry vLLM throughput lines, Harbor batch summaries, Ray worker lines and
tracebacks. A line is (time, text); the Iris view of the same stdout reuses the times.
"""
from __future__ import annotations

import json
import pprint
import random
from datetime import datetime, timedelta

from . import clock
from .context import (
    HEAD_IP,
    WANDB_ENTITY,
    WANDB_PROJECT,
    WORKER_IP,
    RunContext,
    driver_pid,
    short_id,
    vllm_pid,
    worker_pid,
)
from .metrics import SAMPLES_PER_PROMPT, TRAIN_BATCH_SIZE
from .plan import AttemptPlan

Line = tuple[datetime, str]

LEVEL_COLOUR = {"INFO": "\x1b[1m", "WARNING": "\x1b[33m\x1b[1m", "ERROR": "\x1b[31m\x1b[1m"}
RESET = "\x1b[0m"


class Stdout:
    """Collects timed stdout lines; multi-line messages get the prefix on every line (Ray does)."""

    def __init__(self) -> None:
        self.lines: list[Line] = []

    def raw(self, moment: datetime, text: str, prefix: str = "") -> None:
        for line in text.split("\n"):
            self.lines.append((moment, prefix + line))

    def loguru(
        self,
        moment: datetime,
        where: str,
        message: str,
        *,
        level: str = "INFO",
        coloured: bool = False,
        prefix: str = "",
    ) -> None:
        module, function, line = where.split(":")
        if coloured:
            colour = LEVEL_COLOUR[level]
            text = (
                f"\x1b[32m{clock.loguru(moment)}{RESET} | {colour}{level:<8}{RESET} | "
                f"\x1b[36m{module}{RESET}:\x1b[36m{function}{RESET}:\x1b[36m{line}{RESET} - "
                f"{colour}{message}{RESET}"
            )
        else:
            text = f"{clock.loguru(moment)} | {level:<8} | {module}:{function}:{line} - {message}"
        self.raw(moment, text, prefix)

    def text(self) -> str:
        return "".join(line + "\n" for _, line in self.lines)


def stringify_floats(data: dict[str, float | int]) -> dict[str, str | int]:
    """SkyRL's console logger: floats become 4-decimal strings, ints stay ints."""
    return {key: f"{value:.4f}" if isinstance(value, float) else value for key, value in data.items()}


def console_block(step: int, data: dict[str, float | int]) -> str:
    return f"Step {step}: \n{pprint.pformat(stringify_floats(data))}"


def mirror_line(kind: str, step: int, data: dict[str, float | int]) -> str:
    return f"WANDB_MIRROR kind={kind} step={step} metrics={json.dumps(data, sort_keys=True)}"


def _ray_prefix(attempt: AttemptPlan) -> str:
    return f"(skyrl_entrypoint pid={driver_pid(attempt)}) "


def _vllm_prefix(attempt: AttemptPlan, engine: int) -> str:
    return f"(AsyncVLLMInferenceEngine pid={vllm_pid(attempt, engine)}) "


def _worker_prefix(attempt: AttemptPlan, rank: int) -> str:
    ip = HEAD_IP if rank == 0 else WORKER_IP
    return f"(FSDPPolicyWorkerBase pid={worker_pid(attempt, rank)}, ip={ip}) "


def throughput_line(rng: random.Random, moment: datetime) -> str:
    return (
        f"INFO {clock.vllm(moment)} [loggers.py:123] Engine 000: "
        f"Avg prompt throughput: {rng.uniform(4000, 16000):.1f} tokens/s, "
        f"Avg generation throughput: {rng.uniform(500, 1600):.1f} tokens/s, "
        f"Running: {rng.randint(4, 48)} reqs, Waiting: {rng.randint(0, 9)} reqs, "
        f"GPU KV cache usage: {rng.uniform(5, 90):.1f}%, Prefix cache hit rate: {rng.uniform(20, 80):.1f}%"
    )


def _trial_traceback(trial: str) -> str:
    return "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/app/skyrl-train/examples/train_integrations/harbor/harbor_generator.py", line 188, in _run_trial',
            "    result = await trial.run()",
            "             ^^^^^^^^^^^^^^^^^",
            '  File "/app/.venv/lib/python3.11/site-packages/harbor/trial/trial.py", line 344, in run',
            "    await self._execute_agent()",
            '  File "/app/.venv/lib/python3.11/site-packages/harbor/trial/trial.py", line 241, in _execute_agent',
            "    raise AgentTimeoutError(",
            f"harbor.trial.trial.AgentTimeoutError: Agent execution timed out after 1200.0 seconds ({trial})",
        ]
    )


def _preamble(out: Stdout, ctx: RunContext, attempt: AttemptPlan, rng: random.Random) -> datetime:
    moment = attempt.started + timedelta(seconds=4.2)
    out.raw(moment, f"Installed {rng.randint(180, 240)} packages in {rng.uniform(2, 6):.2f}s")
    moment += timedelta(seconds=6.1)
    ray_time = clock.python_logging(moment)
    out.raw(moment, f"{ray_time}\tINFO worker.py:1832 -- Connecting to existing Ray cluster at address: {HEAD_IP}:6379...")
    out.raw(moment, f"{ray_time}\tINFO worker.py:2003 -- Connected to Ray cluster. View the dashboard at {HEAD_IP}:8265 ")
    if attempt.index == 0:
        netrc = f"[entrypoint] wrote /root/.netrc: machine api.wandb.ai login user password {ctx.credentials.wandb_key}"
        ctx.planted.plant("wandb_key", f"logs/{attempt.slug}.out", ctx.credentials.wandb_key)
        out.raw(moment, netrc)
    coloured = attempt.index > 0
    prefix = _ray_prefix(attempt)
    moment += timedelta(seconds=3.7)
    config_path = f"/mnt/local_storage/{attempt.slug}/resolved_config.yaml"
    out.loguru(moment, "skyrl_train.entrypoints.main_base:main:301", f"Resolved config written to {config_path}",
               coloured=coloured, prefix=prefix)
    run_dir = f"/root/wandb/run-{attempt.started:%Y%m%d_%H%M%S}-{ctx.wandb_run_id}"
    verb = "Syncing run" if attempt.index == 0 else "Resuming run"
    for text in [
        f"wandb: Currently logged in as: demo to https://api.wandb.ai. Use `wandb login --relogin` to force relogin",
        "wandb: Tracking run with wandb version 0.22.3",
        f"wandb: Run data is saved locally in {run_dir}",
        f"wandb: {verb} {ctx.job}",
        f"wandb: ⭐️ View project at https://wandb.ai/{WANDB_ENTITY}/{WANDB_PROJECT}",
        f"wandb: 🚀 View run at {ctx.tracker_url}",
    ]:
        out.raw(moment, text, prefix)
    for engine in range(2):
        moment += timedelta(seconds=11.0)
        vprefix = _vllm_prefix(attempt, engine)
        out.raw(moment, f"INFO {clock.vllm(moment)} [__init__.py:239] Automatically detected platform cuda.", vprefix)
        out.raw(moment, f"INFO {clock.vllm(moment)} [core.py:58] Initializing a V1 LLM engine (v0.10.1.1) with config: "
                f"model='Qwen/Qwen3-8B', served_model_name=Qwen3-8B, dtype=torch.bfloat16, max_seq_len=40960, "
                f"tensor_parallel_size=1, enable_prefix_caching=True, seed={engine}", vprefix)
        out.raw(moment, f"INFO {clock.vllm(moment)} [gpu_model_runner.py:1892] Model loading took 15.2683 GiB and "
                f"{rng.uniform(20, 40):.6f} seconds", vprefix)
    for rank in range(2):
        out.raw(moment, f"[rank{rank}]: Initialized FSDP2 policy model with 2 shards, param_dtype=torch.bfloat16",
                _worker_prefix(attempt, rank))
    if attempt.resumed_from is not None:
        ckpt = f"{ctx.store_uri}/ckpts/global_step_{attempt.resumed_from}"
        moment += timedelta(seconds=20.0)
        out.loguru(moment, "skyrl_train.trainer:load_checkpoints:1122", f"Loading checkpoint from {ckpt}",
                   coloured=coloured, prefix=prefix)
        moment += timedelta(seconds=35.0)
        out.loguru(moment, "skyrl_train.trainer:load_checkpoints:1161",
                   f"Successfully loaded checkpoint; resuming training from global_step {attempt.resumed_from}",
                   coloured=coloured, prefix=prefix)
    return moment


def _generation_noise(out: Stdout, ctx: RunContext, attempt: AttemptPlan, step: int, rng: random.Random) -> None:
    start, values = attempt.step_start[step], attempt.metrics[step]
    generate = float(values["timing/generate"])
    for share in (0.3, 0.65):
        moment = start + timedelta(seconds=generate * share)
        out.raw(moment, throughput_line(rng, moment), _vllm_prefix(attempt, rng.randint(0, 1)))
    done = start + timedelta(seconds=generate)
    timeouts = int(values["generate/num_timeout_trajectories"])
    errors = int(values["generate/num_error_trajectories"])
    coloured, prefix = attempt.index > 0, _ray_prefix(attempt)
    where = "skyrl_train.generators.harbor_generator:generate:231"
    if step % 7 == 3:
        trial = f"terminal-bench-fix-git__{short_id(ctx.rng(f'retry/{attempt.slug}/{step}'))}"
        out.loguru(done - timedelta(seconds=40), "skyrl_train.generators.harbor_generator:_run_trial:196",
                   f"Trial {trial} failed; retrying (1/2)", level="WARNING", coloured=coloured, prefix=prefix)
        out.raw(done - timedelta(seconds=40), _trial_traceback(trial), prefix)
    breakdown: dict[str, int] = {}
    if timeouts:
        breakdown["AgentTimeoutError"] = timeouts
    if errors:
        breakdown["NonZeroAgentExitCodeError"] = errors
    if breakdown:
        out.loguru(done, where, f"Exception breakdown: {breakdown}", coloured=coloured, prefix=prefix)
    total = TRAIN_BATCH_SIZE * SAMPLES_PER_PROMPT
    failed = timeouts + errors
    out.loguru(done, where, f"Batch generation complete: {total - failed}/{total} successful, "
               f"{failed} failed instances, {timeouts} masked", coloured=coloured, prefix=prefix)
    if step % 5 == 0:
        moment = done + timedelta(seconds=float(values["timing/policy_train"]) / 2)
        for rank in range(2):
            out.raw(moment, f"[rank{rank}]: mini-batch {step % 4}/4 grad_norm computed, micro_batches=16, "
                    f"peak_mem={rng.uniform(60, 74):.2f}GiB", _worker_prefix(attempt, rank))


def _save_lines(out: Stdout, ctx: RunContext, attempt: AttemptPlan, step: int) -> None:
    values = attempt.metrics[step]
    moment = attempt.step_end[step] - timedelta(seconds=float(values.get("timing/save_hf_model", 0.0)) + 9.0)
    coloured, prefix = attempt.index > 0, _ray_prefix(attempt)
    out.loguru(moment, "skyrl_train.trainer:save_checkpoints:1043",
               f"Saving checkpoint to {ctx.store_uri}/ckpts/global_step_{step}", coloured=coloured, prefix=prefix)
    for rank in range(2):
        out.raw(moment, f"[rank{rank}]: Saved model_world_size_2_rank_{rank}.pt, optim_world_size_2_rank_{rank}.pt",
                _worker_prefix(attempt, rank))
    if "timing/save_hf_model" in values:
        out.loguru(moment + timedelta(seconds=2), "skyrl_train.trainer:save_models:1088",
                   f"Saved HF model to {ctx.store_uri}/exports/global_step_{step}/policy",
                   coloured=coloured, prefix=prefix)


def _metric_lines(out: Stdout, attempt: AttemptPlan, step: int) -> None:
    moment = attempt.step_end[step]
    prefix = _ray_prefix(attempt)
    values = attempt.metrics[step]
    if attempt.index == 0:
        variant = step % 3  # 0 plain, 1 Ray prefix, 2 Ray prefix + colours
        where = "skyrl_train.trainer:_log_metrics_stdout:1951"
        line_prefix = "" if variant == 0 else prefix
        if step in attempt.evals:
            out.loguru(moment, where, mirror_line("eval", step, attempt.evals[step]), coloured=variant == 2,
                       prefix=line_prefix)
        out.loguru(moment, where, mirror_line("train", step, values), coloured=variant == 2, prefix=line_prefix)
    else:
        merged = {**values, **attempt.evals.get(step, {})}
        out.loguru(moment, "skyrl.train.utils.tracking:log:97", console_block(step, merged), coloured=True,
                   prefix=prefix)


def _first_attempt_crash(out: Stdout, ctx: RunContext, attempt: AttemptPlan) -> None:
    moment = attempt.failed_at
    raylet_time = clock.python_logging(moment)
    out.raw(moment, f"(raylet) [{raylet_time} E 2150 2150] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
            f"killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
            f"(ID: 5f2a9c, IP: {WORKER_IP}) over the last time period.")
    prefix = _ray_prefix(attempt)
    out.loguru(moment, "skyrl_train.trainer:train:612", "Policy worker rank 1 died during training step "
               f"{attempt.steps[-1] + 1}", level="ERROR", prefix=prefix)
    out.raw(moment + timedelta(seconds=2), "\n".join([
        "Traceback (most recent call last):",
        '  File "/app/skyrl-train/skyrl_train/entrypoints/main_base.py", line 318, in <module>',
        "    main()",
        '  File "/app/skyrl-train/skyrl_train/entrypoints/main_base.py", line 312, in main',
        "    ray.get(skyrl_entrypoint.remote(cfg))",
        '  File "/app/.venv/lib/python3.11/site-packages/ray/_private/worker.py", line 2882, in get',
        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::skyrl_entrypoint() "
        f"(pid={driver_pid(attempt)}, ip={HEAD_IP})",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        f"\tclass_name: FSDPPolicyWorkerBase\n\tpid: {worker_pid(attempt, 1)}\n\tip: {WORKER_IP}",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
        "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.",
    ]))


def _final_save_crash(out: Stdout, ctx: RunContext, attempt: AttemptPlan) -> None:
    step = attempt.steps[-1]
    moment = attempt.step_end[step] + timedelta(seconds=3)
    prefix = _ray_prefix(attempt)
    out.loguru(moment, "skyrl_train.trainer:train:640", f"Training finished; saving final checkpoint at global_step "
               f"{step}", coloured=True, prefix=prefix)
    out.loguru(moment, "skyrl_train.trainer:save_checkpoints:1043",
               f"Saving checkpoint to {ctx.store_uri}/ckpts/global_step_{step}", coloured=True, prefix=prefix)
    out.raw(moment, f"[rank0]: Saved model_world_size_2_rank_0.pt, optim_world_size_2_rank_0.pt",
            _worker_prefix(attempt, 0))
    rank1 = _worker_prefix(attempt, 1)
    crash = attempt.failed_at
    out.raw(crash, "\n".join([
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/app/skyrl-train/skyrl_train/distributed/fsdp_strategy.py", line 402, in save_checkpoint',
        "[rank1]:     torch.save(model_state_dict, model_path)",
        "[rank1]: OSError: [Errno 28] No space left on device",
    ]), rank1)
    out.raw(crash, f"(raylet) [{clock.python_logging(crash)} E 2150 2150] (raylet) node_manager.cc:3069: Worker "
            f"{worker_pid(attempt, 1)} exited with SYSTEM_ERROR at node (IP: {WORKER_IP}).")
    out.loguru(crash, "skyrl_train.trainer:save_checkpoints:1061", "Checkpoint save failed on rank 1; "
               "latest_ckpt_global_step.txt not updated", level="ERROR", coloured=True, prefix=prefix)
    out.raw(crash + timedelta(seconds=1), "\n".join([
        "Traceback (most recent call last):",
        '  File "/app/skyrl-train/skyrl_train/entrypoints/main_base.py", line 318, in <module>',
        "    main()",
        "ray.exceptions.RayTaskError(OSError): ray::skyrl_entrypoint() "
        f"(pid={driver_pid(attempt)}, ip={HEAD_IP})",
        "OSError: [Errno 28] No space left on device",
    ]))


def _dead_stdout(attempt: AttemptPlan) -> list[Line]:
    """A bad node: only the traceback of the entrypoint's import-time CUDA failure, or nothing."""
    if attempt.death == "empty":
        return []
    out = Stdout()
    out.raw(attempt.failed_at, "\n".join([
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        '  File "/app/skyrl-train/skyrl_train/entrypoints/main_base.py", line 14, in <module>',
        "    from skyrl_train.trainer import RayPPOTrainer",
        '  File "/app/skyrl-train/skyrl_train/trainer.py", line 31, in <module>',
        "    torch.cuda.init()",
        '  File "/app/.venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 319, in init',
        "    _lazy_init()",
        '  File "/app/.venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 372, in _lazy_init',
        "    torch._C._cuda_init()",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ]))
    return out.lines


def trainer_stdout(ctx: RunContext, attempt: AttemptPlan) -> list[Line]:
    """The attempt's full trainer stdout, as Iris captured it and the run synced it to `logs/`."""
    if attempt.death is not None:
        return _dead_stdout(attempt)
    rng = ctx.rng(f"stdout/{attempt.slug}")
    out = Stdout()
    moment = _preamble(out, ctx, attempt, rng)
    if 0 in attempt.evals:
        out.loguru(moment + timedelta(seconds=attempt.evals[0]["timing/eval"]),
                   "skyrl_train.trainer:_log_metrics_stdout:1951", mirror_line("eval", 0, attempt.evals[0]))
    for step in attempt.steps:
        _generation_noise(out, ctx, attempt, step, rng)
        if step in attempt.saves:
            _save_lines(out, ctx, attempt, step)
        _metric_lines(out, attempt, step)
    if attempt.index == 0:
        _first_attempt_crash(out, ctx, attempt)
    else:
        _final_save_crash(out, ctx, attempt)
    return out.lines


def render(lines: list[Line]) -> str:
    return "".join(text + "\n" for _, text in lines)
