"""What the example run did, decided before any file is written: attempts, steps, saves, times.

attempt 1 logs 1..A and saves every `interval` steps; it dies during step A+1.
attempt 2 resumes from attempt 1's last save R (< A), re-logs R+1..A with new values, runs to
`n_steps` (off-interval), saves on the interval, and dies during the final save at `n_steps`
(rank 1 lost),
leaving that directory incomplete and the latest-step file at the last complete save.

With `dead_attempts`, two attempts die on a bad node between those two: `-r1` before training
(its log is only a Python traceback) and `-r2` before its pod wrote a line (a 0-byte log);
the resumed attempt is `-r3`. The dead attempts log no step and save nothing, so the metric
surface and the checkpoints are those of the two training attempts.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rlkeep.errors import RlkeepError

from . import clock
from .metrics import eval_metrics, metric_rng, train_metrics

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Params:
    job: str
    user: str
    n_trials: int
    n_steps: int
    interval: int
    seed: int
    model_hidden: int
    large_result_mb: float
    large_pane_mb: float
    dead_attempts: bool = False
    # every trial's agent also leaves an asciinema recording of about this many KB (a long session's
    # terminal stream): the knob for a run's bytes per trial; 0 keeps the recordings few and small
    trial_kb: float = 0.0

    def validate(self) -> None:
        problems = []
        if not NAME_PATTERN.match(self.job):
            problems.append(f"job {self.job!r} must match {NAME_PATTERN.pattern}")
        if not NAME_PATTERN.match(self.user):
            problems.append(f"user {self.user!r} must match {NAME_PATTERN.pattern}")
        if self.interval < 3:
            problems.append(f"interval {self.interval} must be >= 3")
        if self.n_steps < self.interval + 2:
            problems.append(f"n_steps {self.n_steps} must be >= interval + 2 ({self.interval + 2})")
        if self.interval >= 3 and self.n_steps % self.interval == 0:
            problems.append(
                f"n_steps {self.n_steps} must be off-interval (the run ends in a final save that fails)"
            )
        if self.n_trials < 12:
            problems.append(f"n_trials {self.n_trials} must be >= 12")
        if self.model_hidden < 16 or self.model_hidden % 8:
            problems.append(f"model_hidden {self.model_hidden} must be a multiple of 8, >= 16")
        if self.large_result_mb < 0 or self.large_pane_mb < 0:
            problems.append("large_result_mb and large_pane_mb must be >= 0")
        if self.trial_kb < 0:
            problems.append(f"trial_kb {self.trial_kb} must be >= 0")
        if problems:
            raise RlkeepError("example run: " + "; ".join(problems))


@dataclass
class AttemptPlan:
    index: int
    job_id: str
    slug: str
    steps: list[int]
    resumed_from: int | None
    saves: list[int]                      # complete checkpoints this attempt wrote
    submitted: datetime
    started: datetime
    trainer_start: datetime
    failed_at: datetime
    finished: datetime
    step_start: dict[int, datetime] = field(default_factory=dict)
    step_end: dict[int, datetime] = field(default_factory=dict)
    metrics: dict[int, dict[str, float | int]] = field(default_factory=dict)
    evals: dict[int, dict[str, float]] = field(default_factory=dict)
    death: str | None = None              # a dead attempt: "traceback" (log is only one) or "empty" (0 bytes)


DEATHS: tuple[str, ...] = ("traceback", "empty")


@dataclass
class RunPlan:
    params: Params
    attempts: list[AttemptPlan]
    complete_ckpt_steps: list[int]
    export_steps: list[int]
    incomplete_ckpt_steps: list[int]
    eval_interval: int
    nan_step: int

    @property
    def final_step(self) -> int:
        return self.params.n_steps

    @property
    def chain(self) -> list[str]:
        return [attempt.job_id for attempt in self.attempts]

    def executions(self) -> list[tuple[AttemptPlan, int]]:
        """Every (attempt, step) that generated rollouts, in time order."""
        return [(attempt, step) for attempt in self.attempts for step in attempt.steps]


def checkpoint_steps(n_steps: int, interval: int) -> tuple[list[int], int, int]:
    """(complete saves, resume step, attempt 1's last logged step)."""
    complete = list(range(interval, n_steps, interval))
    candidates = [step for step in complete if step <= n_steps - 2]
    resume = candidates[-1] if len(candidates) <= 2 else candidates[len(candidates) // 2]
    first_attempt_last = min(resume + interval // 3 + 1, n_steps - 1)
    return complete, resume, first_attempt_last


def build_plan(params: Params) -> RunPlan:
    params.validate()
    complete, resume, first_last = checkpoint_steps(params.n_steps, params.interval)
    eval_interval = max(2, params.interval // 2)
    nan_step = max(2, params.n_steps // 4)
    deaths: list[str | None] = [None, *(DEATHS if params.dead_attempts else ()), None]
    chain = [f"/{params.user}/{params.job}" + (f"-r{index}" if index else "") for index in range(len(deaths))]
    step_ranges = [list(range(1, first_last + 1)), *([] for _ in deaths[1:-1]),
                   list(range(resume + 1, params.n_steps + 1))]
    plan = RunPlan(params, [], complete, list(complete), [params.n_steps], eval_interval, nan_step)
    submitted = clock.at(0.0)
    for index, (job_id, steps, death) in enumerate(zip(chain, step_ranges, deaths)):
        if death is None:
            attempt = _timeline(plan, index, job_id, steps, resume if index else None, submitted)
        else:
            attempt = _dead_timeline(plan, index, job_id, death, submitted)
        plan.attempts.append(attempt)
        submitted = attempt.finished + timedelta(seconds=412.0)
    return plan


def _dead_timeline(plan: RunPlan, index: int, job_id: str, death: str, submitted: datetime) -> AttemptPlan:
    """An attempt on a bad node: scheduled, then dead before its first step (no steps, no saves)."""
    slug = job_id.rsplit("/", 1)[1]
    jitter = random.Random(f"{plan.params.seed}/timeline/{slug}")
    started = submitted + timedelta(seconds=80.0 + jitter.uniform(0, 30))
    failed_at = started + timedelta(seconds=(11.0 if death == "traceback" else 2.0) + jitter.uniform(0, 5))
    return AttemptPlan(index=index, job_id=job_id, slug=slug, steps=[], resumed_from=None, saves=[],
                       submitted=submitted, started=started, trainer_start=failed_at, failed_at=failed_at,
                       finished=failed_at + timedelta(seconds=6.0), death=death)


def _timeline(
    plan: RunPlan, index: int, job_id: str, steps: list[int], resumed_from: int | None, submitted: datetime
) -> AttemptPlan:
    params = plan.params
    slug = job_id.rsplit("/", 1)[1]
    jitter = random.Random(f"{params.seed}/timeline/{slug}")
    started = submitted + timedelta(seconds=95.0 + jitter.uniform(0, 30))
    trainer_start = started + timedelta(seconds=240.0 + jitter.uniform(0, 60))
    moment = trainer_start
    metrics: dict[int, dict[str, float | int]] = {}
    evals: dict[int, dict[str, float]] = {}
    step_start: dict[int, datetime] = {}
    step_end: dict[int, datetime] = {}
    if index == 0:  # eval_before_train
        evals[0] = eval_metrics(metric_rng(params.seed, slug, 0, "eval"), 0, params.n_steps)
        moment += timedelta(seconds=evals[0]["timing/eval"])
    for step in steps:
        on_interval = step % params.interval == 0
        values = train_metrics(
            metric_rng(params.seed, slug, step),
            step,
            params.n_steps,
            epoch=0,
            saved_checkpoint=on_interval,
            saved_export=on_interval,
            nan_grad_norm=index == 0 and step == plan.nan_step,
        )
        step_start[step] = moment
        moment += timedelta(seconds=float(values["timing/step"]))
        if step % plan.eval_interval == 0:
            evals[step] = eval_metrics(metric_rng(params.seed, slug, step, "eval"), step, params.n_steps)
            moment += timedelta(seconds=evals[step]["timing/eval"])
        step_end[step] = moment
        metrics[step] = values
    failed_at = moment + timedelta(seconds=95.0 if index == 0 else 31.0)
    saves = [s for s in plan.complete_ckpt_steps if s in steps]
    return AttemptPlan(
        index=index,
        job_id=job_id,
        slug=slug,
        steps=steps,
        resumed_from=resumed_from,
        saves=saves,
        submitted=submitted,
        started=started,
        trainer_start=trainer_start,
        failed_at=failed_at,
        finished=failed_at + timedelta(seconds=18.0),
        step_start=step_start,
        step_end=step_end,
        metrics=metrics,
        evals=evals,
    )
