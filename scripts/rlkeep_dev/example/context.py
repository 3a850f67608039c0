"""Names shared by every part of the example run (derived from the parameters, never random)."""
from __future__ import annotations

import random
from dataclasses import dataclass

from .credentials import FakeCredentials, PlantedSecrets
from .plan import AttemptPlan, RunPlan

SERVED_MODEL = "Qwen3-8B"
BASE_MODEL = "Qwen/Qwen3-8B"
WANDB_ENTITY = "laion-rl"
WANDB_PROJECT = "rl-agentic"
CLUSTER = "cw-us-east-02a"
HEAD_IP = "10.20.3.14"
WORKER_IP = "10.20.3.15"
WORLD_SIZE = 2
SHORTUUID_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def short_id(rng: random.Random, length: int = 7) -> str:
    """Harbor's trial-name suffix: a shortuuid of 7 characters."""
    return "".join(rng.choice(SHORTUUID_ALPHABET) for _ in range(length))


@dataclass
class RunContext:
    plan: RunPlan
    credentials: FakeCredentials
    planted: PlantedSecrets
    wandb_run_id: str

    @property
    def job(self) -> str:
        return self.plan.params.job

    @property
    def seed(self) -> int:
        return self.plan.params.seed

    @property
    def store_uri(self) -> str:
        """Where the run itself believed its artifacts went (configs and logs cite it)."""
        return f"s3://marin-us-east-02a/iris/{self.job}"

    @property
    def tracker_url(self) -> str:
        return f"https://wandb.ai/{WANDB_ENTITY}/{WANDB_PROJECT}/runs/{self.wandb_run_id}"

    def rng(self, what: str) -> random.Random:
        return random.Random(f"{self.seed}/{what}")


def make_wandb_run_id(seed: int) -> str:
    rng = random.Random(f"{seed}/wandb-run-id")
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))


def driver_pid(attempt: AttemptPlan) -> int:
    return 2211 + 1374 * attempt.index


def worker_pid(attempt: AttemptPlan, rank: int) -> int:
    return 4417 + 1374 * attempt.index + rank


def vllm_pid(attempt: AttemptPlan, engine: int) -> int:
    return 3187 + 1374 * attempt.index + engine
