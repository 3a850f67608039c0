"""Harbor trial folders under `trace_jobs/`, as SkyRL's Harbor generator leaves them (docs/reference.md, formats §3).

Flat per-trial dirs named `{task[:32].rstrip('_-')}__{7-char id}`; completed trials (reward 1.0
or 0.0), failed ones (exception_info, verifier_result null) each followed by a retry in a new
dir, and trials that started but never wrote `result.json` (in flight when attempt 1 died).
"""
from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from . import clock
from .atif import TrajectoryPlan, TurnTokens, pane_text, recording_cast, trajectory, turn_tokens
from .context import HEAD_IP, SERVED_MODEL, RunContext, short_id
from .jsonfmt import dumps_atif
from .metrics import SAMPLES_PER_PROMPT, reward_trend
from .plan import AttemptPlan
from .tree import Tree

AGENT_TIMEOUT_SEC = 300.0
MIN_COMPLETED = 8  # trials that carry the large files, the continuation and the planted secrets
FAILURES = [
    ("AgentTimeoutError", f"Agent execution timed out after {AGENT_TIMEOUT_SEC} seconds"),
    ("AgentTimeoutError", f"Agent execution timed out after {AGENT_TIMEOUT_SEC} seconds"),
    ("ContextLengthExceededError", "Context length exceeded: 40960 tokens"),
    ("NonZeroAgentExitCodeError", "Agent exited with non-zero exit code 137"),
    ("RewardFileNotFoundError", "No reward file found at /logs/verifier/reward.txt or /logs/verifier/reward.json"),
    ("AgentSetupTimeoutError", "Agent setup timed out after 360.0 seconds"),
    ("VerifierTimeoutError", "Verifier execution timed out after 600.0 seconds"),
]
TERMINAL_BENCH = ["fix-permissions", "configure-nginx-reverse-proxy", "extract-archive-and-count-lines",
                  "git-recover-lost-commit", "sqlite-schema-migration", "parse-apache-logs",
                  "cron-job-debugging", "compile-c-extension", "tune-postgres-config", "csv-dedupe"]
SWESMITH_REPOS = ["pydantic__pydantic", "pallets__flask", "psf__requests", "marshmallow-code__marshmallow",
                  "python-attrs__attrs", "tox-dev__tox"]


@dataclass
class TrialSpec:
    index: int
    name: str
    task: str
    dataset: str
    attempt: AttemptPlan
    step: int                          # the global step whose rollouts this trial produced
    status: str                        # completed | failed | incomplete
    exception: tuple[str, str] | None
    reward: float | None
    retry_of: str | None
    started: datetime
    turns: int
    roles: set[str] = field(default_factory=set)

    @property
    def weight_version(self) -> int:
        return self.step - 1           # rollouts of step k come from the weights after k-1 updates


def task_pool(rng: random.Random, n_tasks: int) -> list[tuple[str, str]]:
    """(task name, dataset) pairs; some longer than 32 characters, one truncating onto `__`."""
    pool = [("swesmith-pandas-dev-pandas-1a2b" + "__func_pm_ctrl_shuffle__7", "SWE-smith")]  # [:32] ends in "_"
    index = 0
    while len(pool) < n_tasks:
        family = index % 3
        if family == 0:
            pool.append((f"codecontests-{rng.randint(1000, 9999)}", "CodeContests"))
        elif family == 1:
            pool.append((f"terminal-bench-{TERMINAL_BENCH[index % len(TERMINAL_BENCH)]}", "terminal-bench"))
        else:
            repo = SWESMITH_REPOS[index % len(SWESMITH_REPOS)]
            digest = "".join(rng.choice("0123456789abcdef") for _ in range(8))
            pool.append((f"swesmith-{repo}.{digest}__lm_modify__{rng.randint(1, 40)}", "SWE-smith"))
        index += 1
    return pool


def trial_name(task: str, rng: random.Random, taken: set[str]) -> str:
    while True:
        name = f"{task[:32].rstrip('_-')}__{short_id(rng)}"
        if name not in taken:
            taken.add(name)
            return name


def plan_trials(ctx: RunContext) -> list[TrialSpec]:
    params = ctx.plan.params
    rng = ctx.rng("trials")
    executions = ctx.plan.executions()
    n_incomplete = 2 if params.n_trials >= 20 else 1
    n_regular = params.n_trials - n_incomplete
    pool = task_pool(rng, max(3, n_regular // SAMPLES_PER_PROMPT + 1))
    taken: set[str] = set()
    specs: list[TrialSpec] = []
    slot = completed = 0
    while slot < n_regular:
        attempt, step = executions[slot * len(executions) // n_regular]
        task, dataset = pool[(slot // SAMPLES_PER_PROMPT) % len(pool)]
        start = attempt.step_start[step] + timedelta(seconds=rng.uniform(0.5, 20.0))
        retries = 0
        retry_of: str | None = None
        while slot < n_regular:
            forced_failure = slot == 3 and retries == 0
            # random failures never eat the slots needed for MIN_COMPLETED successes (role holders)
            room = n_regular - slot - 1 > MIN_COMPLETED - completed
            fails = forced_failure or (rng.random() < 0.08 and retries < 2 and room)
            exception = FAILURES[0] if forced_failure else (rng.choice(FAILURES) if fails else None)
            success_p = reward_trend(step, params.n_steps)
            spec = TrialSpec(
                index=slot,
                name=trial_name(task, rng, taken),
                task=task,
                dataset=dataset,
                attempt=attempt,
                step=step,
                status="failed" if exception else "completed",
                exception=exception,
                reward=None if exception else (1.0 if rng.random() < success_p else 0.0),
                retry_of=retry_of,
                started=start,
                turns=rng.randint(8, 14) if exception and exception[0] == "AgentTimeoutError" else rng.randint(1, 6),
            )
            specs.append(spec)
            slot += 1
            if not exception:
                completed += 1
                break
            retries += 1
            retry_of = spec.name
            start = start + timedelta(seconds=660.0 + rng.uniform(5, 30))  # after the failed try ended
    first = ctx.plan.attempts[0]
    lost_step = first.steps[-1] + 1
    for k in range(n_incomplete):
        task, dataset = pool[k % len(pool)]
        specs.append(TrialSpec(
            index=len(specs), name=trial_name(task, rng, taken), task=task, dataset=dataset, attempt=first,
            step=lost_step, status="incomplete", exception=None, reward=None, retry_of=None,
            started=first.failed_at - timedelta(seconds=80.0 - 9.0 * k), turns=2 + k,
        ))
    _assign_roles(specs)
    return specs


def _assign_roles(specs: list[TrialSpec]) -> None:
    """Which trials carry the large files, the continuation, the recordings and the planted secrets."""
    ran = [s for s in specs if s.status == "completed" and s.turns >= 2]
    if len(ran) < MIN_COMPLETED:
        ran = [s for s in specs if s.status == "completed"]
    ran[0].roles.add("large_result")
    ran[1].roles.update({"continuation", "large_pane"})
    ran[1].turns = max(ran[1].turns, 3)  # a continuation needs turns on both sides of the split
    for role, spec in zip(["iris_proxy_url", "github_token", "openai_key", "presigned_url", "pem_private_key"],
                          ran[2:7]):
        spec.roles.add(role)
        spec.turns = max(spec.turns, 2)  # the secret rides on turn 0, which must not be the final mark step
    ran[-1].roles.update({"large_pane", "large_cast"})
    for position, spec in enumerate(ran):
        if position % 25 == 3:
            spec.roles.add("cast")


def _trial_config(ctx: RunContext, spec: TrialSpec, session_id: str) -> dict:
    return {
        "task": {"path": f"/data/harbor/{spec.dataset}/{spec.task}", "git_url": None, "git_commit_id": None,
                 "overwrite": False, "download_dir": None, "source": None},
        "trial_name": spec.name,
        "trials_dir": "/mnt/local_storage/trials_run",
        "timeout_multiplier": 1.0,
        "agent": {
            "name": "terminus-2",
            "import_path": None,
            "model_name": f"hosted_vllm/{SERVED_MODEL}",
            "override_timeout_sec": AGENT_TIMEOUT_SEC,
            "override_setup_timeout_sec": None,
            "max_timeout_sec": None,
            "kwargs": {
                "max_turns": 32,
                "collect_rollout_details": True,
                "session_id": session_id,
                "api_base": f"http://{HEAD_IP}:8000/v1",
                "temperature": 1.0,
                "llm_kwargs": {"extra_body": {"cache_salt": f"{SERVED_MODEL}@{spec.weight_version}"}},
            },
        },
        "environment": {"type": "docker", "import_path": None, "force_build": False, "delete": True,
                        "override_cpus": None, "override_memory_mb": None, "override_storage_mb": None,
                        "override_gpus": None, "kwargs": {}},
        "verifier": {"override_timeout_sec": None, "max_timeout_sec": None, "disable": False},
        "job_id": None,
    }


@dataclass
class Phases:
    environment_setup: tuple[datetime, datetime]
    agent_setup: tuple[datetime, datetime] | None
    agent_execution: tuple[datetime, datetime] | None
    verifier: tuple[datetime, datetime] | None
    finished: datetime


def _phases(rng: random.Random, spec: TrialSpec) -> Phases:
    env_end = spec.started + timedelta(seconds=rng.uniform(8, 25))
    kind = spec.exception[0] if spec.exception else None
    if kind == "AgentSetupTimeoutError":
        end = env_end + timedelta(seconds=360.0)
        return Phases((spec.started, env_end), (env_end, end), None, None, end + timedelta(seconds=1.2))
    setup_end = env_end + timedelta(seconds=rng.uniform(5, 15))
    run = AGENT_TIMEOUT_SEC if kind == "AgentTimeoutError" else rng.uniform(20, 40) * spec.turns
    exec_end = setup_end + timedelta(seconds=run)
    if kind in ("AgentTimeoutError", "ContextLengthExceededError", "NonZeroAgentExitCodeError"):
        return Phases((spec.started, env_end), (env_end, setup_end), (setup_end, exec_end), None,
                      exec_end + timedelta(seconds=1.5))
    verifier_seconds = 600.0 if kind == "VerifierTimeoutError" else rng.uniform(4, 30)
    verify_end = exec_end + timedelta(seconds=verifier_seconds)
    return Phases((spec.started, env_end), (env_end, setup_end), (setup_end, exec_end), (exec_end, verify_end),
                  verify_end + timedelta(seconds=1.1))


def _span(span: tuple[datetime, datetime] | None) -> dict | None:
    return None if span is None else {"started_at": clock.iso_z(span[0]), "finished_at": clock.iso_z(span[1])}


def _rollout_details(tokens: list[TurnTokens]) -> list[dict]:
    return [{
        "prompt_token_ids": [t.prompt_ids for t in tokens],
        "completion_token_ids": [t.completion_ids for t in tokens],
        "logprobs": [t.logprobs for t in tokens],
    }]


def _large_rollout_details(seed: int, target_bytes: int) -> list[dict]:
    """Rollout arrays big enough that result.json reaches about `target_bytes`.

    At that depth json indent 4 puts each number on its own line behind 24 spaces: ~32 bytes each.
    """
    generator = np.random.default_rng(seed)
    per_turn = 1024
    turns = max(1, round(target_bytes / 32 / (per_turn * 3)))
    prompt = generator.integers(0, 151643, size=(turns, per_turn)).tolist()
    completion = generator.integers(0, 151643, size=(turns, per_turn)).tolist()
    logprobs = np.round(-np.abs(generator.normal(0.0, 0.35, size=(turns, per_turn))), 4).tolist()
    return [{"prompt_token_ids": prompt, "completion_token_ids": completion, "logprobs": logprobs}]


def _traceback(kind: str, message: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/app/.venv/lib/python3.11/site-packages/harbor/trial/trial.py", line 344, in run\n'
        "    await self._execute_agent()\n"
        '  File "/app/.venv/lib/python3.11/site-packages/harbor/trial/trial.py", line 241, in _execute_agent\n'
        f"    raise {kind}(\n"
        f"harbor.trial.trial.{kind}: {message}\n"
    )


def _presigned_url(ctx: RunContext, spec: TrialSpec) -> str:
    creds = ctx.credentials
    return (
        f"https://marin-us-east-02a.s3.us-east-1.amazonaws.com/harbor-assets/{spec.dataset}/{spec.task}.tar.gz"
        f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={creds.presign_key_id}%2F20260330%2Fus-east-1%2Fs3"
        f"%2Faws4_request&X-Amz-Date={spec.started:%Y%m%dT%H%M%SZ}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        f"&X-Amz-Signature={creds.presign_signature}"
    )


def _trial_log(ctx: RunContext, spec: TrialSpec, phases: Phases | None, path: str) -> str:
    def line(moment: datetime, level: str, text: str) -> str:
        return f"{clock.python_logging(moment)} - harbor.trial.trial - {level} - {text}"

    lines = [line(spec.started, "INFO", f"Starting trial {spec.name} (task {spec.task})")]
    if spec.retry_of:
        lines.append(line(spec.started, "INFO", f"Retry of {spec.retry_of}"))
    if "presigned_url" in spec.roles:
        ctx.planted.plant("presigned_url", path, ctx.credentials.presign_signature)
        ctx.planted.plant("aws_access_key", path, ctx.credentials.presign_key_id)
        lines.append(line(spec.started, "INFO", f"Downloading task assets from {_presigned_url(ctx, spec)}"))
    if phases is None:
        lines.append(line(spec.started + timedelta(seconds=14), "INFO", "Environment ready; starting agent terminus-2"))
        return "\n".join(lines) + "\n"
    env_end = phases.environment_setup[1]
    lines.append(line(env_end, "INFO", f"Environment setup finished in "
                      f"{(env_end - spec.started).total_seconds():.1f}s"))
    if phases.agent_execution:
        lines.append(line(phases.agent_execution[0], "INFO", f"Running agent terminus-2 with model "
                          f"hosted_vllm/{SERVED_MODEL}"))
    if spec.exception:
        lines.append(line(phases.finished, "ERROR", f"{spec.exception[0]}: {spec.exception[1]}"))
    if phases.verifier and spec.reward is not None:
        lines.append(line(phases.verifier[1], "INFO", f"Verifier finished: reward={spec.reward}"))
    lines.append(line(phases.finished, "INFO", f"Trial {spec.name} finished"))
    return "\n".join(lines) + "\n"


def _test_stdout(spec: TrialSpec) -> str:
    passed = spec.reward == 1.0
    summary = "3 passed in 0.84s" if passed else "1 failed, 2 passed in 0.91s"
    body = "..." if passed else "..F"
    return (
        "============================= test session starts ==============================\n"
        "platform linux -- Python 3.11.13, pytest-8.4.1, pluggy-1.6.0\nrootdir: /tests\ncollected 3 items\n\n"
        f"test_outputs.py {body}                                                    [100%]\n\n"
        f"============================== {summary} ===============================\n"
    )


def write_trial(tree: Tree, ctx: RunContext, spec: TrialSpec) -> None:
    rng = ctx.rng(f"trial/{spec.name}")
    base = f"trace_jobs/{spec.name}"
    session_id = uuid.UUID(int=rng.getrandbits(128), version=4).hex
    config = _trial_config(ctx, spec, session_id)
    tree.write_json(f"{base}/config.json", config)
    incomplete = spec.status == "incomplete"
    phases = None if incomplete else _phases(rng, spec)
    tree.write_text(f"{base}/trial.log", _trial_log(ctx, spec, phases, f"{base}/trial.log"))
    agent_ran = incomplete or (phases is not None and phases.agent_execution is not None)
    tokens = [turn_tokens(rng, turn, rng.randint(900, 1800)) for turn in range(spec.turns)] if agent_ran else []
    if agent_ran:
        _write_agent_dir(tree, ctx, spec, rng, session_id, tokens, base)
    if incomplete:
        return
    assert phases is not None
    if phases.verifier and spec.reward is not None:
        tree.write_text(f"{base}/verifier/reward.txt", f"{int(spec.reward)}\n")
        tree.write_text(f"{base}/verifier/test-stdout.txt", _test_stdout(spec))
    if spec.exception:
        tree.write_text(f"{base}/exception.txt", _traceback(*spec.exception))
    tree.write_json(f"{base}/result.json", _result(ctx, spec, rng, config, phases, tokens, base))


def _result(ctx: RunContext, spec: TrialSpec, rng: random.Random, config: dict, phases: Phases,
            tokens: list[TurnTokens], base: str) -> dict:
    if tokens:
        rollout = _rollout_details(tokens)
        if "large_result" in spec.roles:
            target = int(ctx.plan.params.large_result_mb * 1024 * 1024)
            rollout = _large_rollout_details(ctx.seed, target)
        metadata: dict = {
            "n_episodes": spec.turns,
            "api_request_times_msec": [round(rng.uniform(300, 2500), 1) for _ in tokens],
            "summarization_count": 1 if "continuation" in spec.roles else 0,
        }
        if "pem_private_key" in spec.roles:
            ctx.planted.plant("pem_private_key", f"{base}/result.json", ctx.credentials.pem_body_line)
            metadata["sandbox_deploy_key"] = ctx.credentials.pem
        agent_result = {
            "n_input_tokens": sum(t.prompt_tokens for t in tokens),
            "n_cache_tokens": 0,
            "n_output_tokens": sum(len(t.completion_ids) for t in tokens),
            "cost_usd": None,
            "rollout_details": rollout,
            "metadata": metadata,
        }
    else:
        agent_result = {"n_input_tokens": None, "n_cache_tokens": None, "n_output_tokens": None, "cost_usd": None,
                        "rollout_details": None, "metadata": None}
    exception_info = None
    if spec.exception:
        exception_info = {"exception_type": spec.exception[0], "exception_message": spec.exception[1],
                          "exception_traceback": _traceback(*spec.exception),
                          "occurred_at": clock.iso_naive(phases.finished - timedelta(seconds=1))}
    return {
        "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "task_name": spec.task,
        "trial_name": spec.name,
        "trial_uri": f"file:///mnt/local_storage/trials_run/{spec.name}",
        "task_id": {"path": f"/data/harbor/{spec.dataset}/{spec.task}"},
        "source": None,
        "task_checksum": hashlib.sha256(f"{spec.dataset}/{spec.task}".encode()).hexdigest(),
        "config": config,
        "agent_info": {"name": "terminus-2", "version": "2.0.0",
                       "model_info": {"name": SERVED_MODEL, "provider": "hosted_vllm"}},
        "agent_result": agent_result,
        "verifier_result": None if spec.reward is None else {"rewards": {"reward": spec.reward}},
        "exception_info": exception_info,
        "started_at": clock.iso_z(spec.started),
        "finished_at": clock.iso_z(phases.finished),
        "environment_setup": _span(phases.environment_setup),
        "agent_setup": _span(phases.agent_setup),
        "agent_execution": _span(phases.agent_execution),
        "verifier": _span(phases.verifier),
    }


def _write_agent_dir(tree: Tree, ctx: RunContext, spec: TrialSpec, rng: random.Random, session_id: str,
                     tokens: list[TurnTokens], base: str) -> None:
    creds = ctx.credentials
    plan = TrajectoryPlan(
        session_id=session_id,
        instruction=f"Solve the task `{spec.task}`: read /app/README.md and make the tests in /tests pass.",
        turns=spec.turns,
        start=spec.started + timedelta(seconds=25),
        turn_seconds=min(25.0, 280.0 / spec.turns),
        completes=spec.status == "completed",
    )
    path = f"{base}/agent/trajectory.json"
    if "iris_proxy_url" in spec.roles:
        ctx.planted.plant("iris_proxy_url", path, creds.iris_token)
        plan.planted_keystrokes[0] = "curl -s \"$HARBOR_PROXY_URL/health\"\n"
        plan.planted_output[0] = f"{{\"status\": \"ok\", \"proxy\": \"https://iris.oa.dev/proxy/t/{creds.iris_token}/v1\"}}"
    if "github_token" in spec.roles:
        ctx.planted.plant("github_token", path, creds.github_token)
        plan.planted_keystrokes[0] = f"export GITHUB_TOKEN={creds.github_token} && git fetch origin\n"
    if "openai_key" in spec.roles:
        ctx.planted.plant("openai_key", path, creds.openai_key)
        plan.planted_keystrokes[0] = "cat .env\n"
        plan.planted_output[0] = f"OPENAI_API_KEY={creds.openai_key}\nLOG_LEVEL=info"
    if "continuation" in spec.roles and len(tokens) >= 2:
        split = max(1, len(tokens) // 2)
        head = trajectory(rng, plan, tokens[:split], continued_ref="trajectory.cont-1.json")
        tail = trajectory(rng, plan, tokens[split:], first_turn=split, copied_prefix=[head["steps"][-1]],
                          handoff="Summary of previous work: inspected the repository and drafted a fix. "
                                  "Continue from here.")
        tree.write_text(path, dumps_atif(head))
        tree.write_text(f"{base}/agent/trajectory.cont-1.json", dumps_atif(tail))
    else:
        tree.write_text(path, dumps_atif(trajectory(rng, plan, tokens)))
    params = ctx.plan.params
    pane_bytes = int(params.large_pane_mb * 1024 * 1024) if "large_pane" in spec.roles else rng.randint(800, 6000)
    tree.write_text(f"{base}/agent/terminus_2.pane", pane_text(rng, pane_bytes))
    if "cast" in spec.roles or "large_cast" in spec.roles or params.trial_kb > 0:
        cast_bytes = int(params.large_pane_mb * 1024 * 1024) if "large_cast" in spec.roles else 4000
        cast_bytes = max(cast_bytes, int(params.trial_kb * 1024))
        tree.write_text(f"{base}/agent/recording.cast", recording_cast(rng, spec.started, cast_bytes))


def write_trials(tree: Tree, ctx: RunContext) -> list[TrialSpec]:
    specs = plan_trials(ctx)
    for spec in specs:
        write_trial(tree, ctx, spec)
    return specs


def trial_summary(specs: list[TrialSpec]) -> dict[str, int]:
    return {
        "started": len(specs),
        "completed": sum(1 for s in specs if s.status != "incomplete"),
        "failed": sum(1 for s in specs if s.status == "failed"),
    }
