"""Per-step metric values of the example run: a noisy upward reward trend with a dip.

Pure functions of (seed, attempt, step): an attempt that re-logs a step after a resume gets
its own, different values, as a real re-run does.
"""
from __future__ import annotations

import math
import random

SAMPLES_PER_PROMPT = 8
TRAIN_BATCH_SIZE = 8  # prompts per step; x SAMPLES_PER_PROMPT trials


def metric_rng(seed: int, slug: str, step: int, what: str = "train") -> random.Random:
    # str seeds hash with sha512: stable across processes and PYTHONHASHSEED
    return random.Random(f"{seed}/metrics/{what}/{slug}/{step}")


def reward_trend(step: int, n_steps: int) -> float:
    """Expected avg_raw_reward at `step`: saturating rise with a dip around 55% of the run."""
    rise = 0.14 + 0.48 * (1.0 - math.exp(-step / (0.45 * n_steps)))
    dip_centre, dip_width = 0.55 * n_steps, max(1.5, 0.06 * n_steps)
    dip = 0.11 * math.exp(-(((step - dip_centre) / dip_width) ** 2))
    return rise - dip


def _clip(value: float, low: float = 0.0, high: float = 1.0) -> float:
    return min(high, max(low, value))


def train_metrics(
    rng: random.Random,
    step: int,
    n_steps: int,
    *,
    epoch: int,
    saved_checkpoint: bool,
    saved_export: bool,
    nan_grad_norm: bool,
) -> dict[str, float | int]:
    """One step's tracker payload (the keys SkyRL logs for a Harbor run)."""
    raw = _clip(reward_trend(step, n_steps) + rng.gauss(0.0, 0.035))
    avg_tokens = 7000.0 + 4000.0 * step / n_steps + rng.gauss(0.0, 600.0)
    timeouts = rng.choice([0, 0, 1, 1, 2, 3])
    errors = rng.choice([0, 0, 0, 1])
    generate = 360.0 + rng.gauss(0.0, 35.0)
    policy_train = 118.0 + rng.gauss(0.0, 9.0)
    sync = 14.0 + rng.gauss(0.0, 1.5)
    save_ckpt = 41.0 + rng.gauss(0.0, 4.0) if saved_checkpoint else 0.0
    save_hf = 23.0 + rng.gauss(0.0, 2.0) if saved_export else 0.0
    loss = rng.gauss(0.0, 0.04)
    values: dict[str, float | int] = {
        "generate/avg_num_tokens": avg_tokens,
        "generate/avg_num_turns": 4.0 + 3.0 * step / n_steps + rng.gauss(0.0, 0.4),
        "generate/max_num_tokens": int(avg_tokens * 3.1 + rng.randint(0, 900)),
        "generate/min_num_tokens": int(avg_tokens * 0.12 + rng.randint(0, 200)),
        "generate/num_error_trajectories": errors,
        "generate/num_timeout_trajectories": timeouts,
        "generate/std_num_tokens": avg_tokens * 0.42 + rng.gauss(0.0, 80.0),
        "policy/final_loss": loss,
        "policy/grad_norm": math.nan if nan_grad_norm else abs(rng.gauss(0.35, 0.12)),
        "policy/policy_entropy": 0.92 - 0.25 * step / n_steps + rng.gauss(0.0, 0.03),
        "policy/policy_kl": abs(rng.gauss(0.0012 * step / n_steps + 0.0004, 0.0002)),
        "policy/policy_loss": loss,
        "policy/policy_lr": 1e-06,
        "reward/avg_pass_at_8": _clip(raw + 0.22 + rng.gauss(0.0, 0.03)),
        "reward/avg_raw_reward": raw,
        "reward/mean_positive_reward": _clip(raw + 0.05 + rng.gauss(0.0, 0.02)),
        "timing/generate": generate,
        "timing/policy_train": policy_train,
        "timing/sync_weights": sync,
        "timing/step": generate + policy_train + sync + save_ckpt + save_hf + 6.0,
        "trainer/epoch": epoch,
        "trainer/global_step": step,
    }
    if saved_checkpoint:
        values["timing/save_checkpoints"] = save_ckpt
    if saved_export:
        values["timing/save_hf_model"] = save_hf
    return {key: _rounded(value) for key, value in values.items()}


def eval_metrics(rng: random.Random, step: int, n_steps: int) -> dict[str, float]:
    score = _clip(reward_trend(step, n_steps) - 0.04 + rng.gauss(0.0, 0.02))
    values = {
        "eval/all/avg_score": score,
        "eval/all/pass_at_8": _clip(score + 0.2 + rng.gauss(0.0, 0.02)),
        "eval/terminal_bench/avg_score": _clip(score - 0.05 + rng.gauss(0.0, 0.03)),
        "eval/terminal_bench/pass_at_8": _clip(score + 0.15 + rng.gauss(0.0, 0.03)),
        "timing/eval": 240.0 + rng.gauss(0.0, 20.0),
    }
    return {key: _rounded(value) for key, value in values.items()}


def _rounded(value: float | int) -> float | int:
    if isinstance(value, int) or math.isnan(value):
        return value
    return round(value, 6)
