"""Synthetic Harbor-shaped trace trees of any size for the growth tests: `n` trial folders of a
few small members each (result.json, an ATIF trajectory, a trial log, the verifier's reward), a
fixed share of them carrying a credential-shaped value (in the trial log, or inside a gzipped
agent log), so trees of n and 4n trials have the same share of findings."""
from __future__ import annotations

import gzip
import json
import random
import string

MODEL = "hosted_vllm/Qwen3-8B"
SECRET_EVERY = 3  # one trial in SECRET_EVERY has a finding in its trial log
GZIP_SECRET_EVERY = 10  # and one in GZIP_SECRET_EVERY inside a gzipped agent log


def _token(rng: random.Random) -> str:
    """A Hugging Face token shape, assembled at run time (no credential-shaped literal here)."""
    alphabet = string.ascii_letters + string.digits
    return "h" + "f_" + "".join(rng.choice(alphabet) for _ in range(30)) + "a1B2"


def trial_name(index: int) -> str:
    return f"codecontests-{index % 997:04d}__{index:07d}"


def trial_members(index: int, rng: random.Random) -> dict[str, bytes]:
    """One trial's files (paths relative to the trial folder)."""
    name = trial_name(index)
    reward = float(index % 3 == 0)
    steps = [{"step_id": 1, "source": "user", "message": f"Task {index}: count the lines of a.txt."},
             {"step_id": 2, "source": "agent", "message": "wc -l a.txt", "model_name": MODEL,
              "observation": {"results": [{"content": f"{index % 40} a.txt"}]}},
             {"step_id": 3, "source": "agent", "message": "done", "model_name": MODEL}]
    trajectory = {"schema_version": "ATIF-v1.6", "agent": {"name": "terminus-2", "version": "2.0.0",
                                                           "model_name": MODEL}, "steps": steps}
    result = {"id": str(index), "task_name": f"codecontests-{index % 997:04d}", "trial_name": name,
              "started_at": "2026-03-30T17:04:11.000000Z", "finished_at": "2026-03-30T17:06:11.000000Z",
              "config": {"job_id": None, "agent": {"name": "terminus-2", "model_name": MODEL}},
              "agent_info": {"name": "terminus-2", "version": "2.0.0",
                             "model_info": {"name": "Qwen3-8B", "provider": "hosted_vllm"}},
              "verifier_result": {"rewards": {"reward": reward}}, "exception_info": None}
    log = f"trial {name} started\nagent terminus-2 ready\n"
    if index % SECRET_EVERY == 0:
        log += f"env: HF_TOKEN={_token(rng)}\n"
    members = {
        "result.json": json.dumps(result, indent=4).encode(),
        "agent/trajectory.json": json.dumps(trajectory, indent=2).encode(),
        "trial.log": log.encode(),
        "verifier/reward.txt": f"{reward}\n".encode(),
    }
    if index % GZIP_SECRET_EVERY == 1:
        members["agent/session.log.gz"] = gzip.compress(f"login with {_token(rng)}\n".encode(), mtime=0)
    return members


def trace_objects(n_trials: int, seed: int = 0) -> dict[str, bytes]:
    """Every object of a trace tree of `n_trials` trials, keyed by its path under the tree."""
    rng = random.Random(seed)
    objects: dict[str, bytes] = {}
    for index in range(n_trials):
        name = trial_name(index)
        for rel, data in trial_members(index, rng).items():
            objects[f"{name}/{rel}"] = data
    return objects
