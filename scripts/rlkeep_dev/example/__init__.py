"""A realistic finished SkyRL + Harbor agentic RL run, as it sits in the durable object store.

`write_example_run(root)` writes the run's store tree (logs of two attempts in the two metric
serializations, Ray/vLLM logs, configs, W&B dir, Harbor trials, FSDP checkpoints, HF exports,
junk and planted fake credentials) into `root`, deterministically: same parameters and seed,
byte-identical tree. `ExampleRun.record()` gives its job record, `iris_state()` the state the
stand-in `iris` command serves. `rlkeep example-run` is the CLI (`cli_main`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlkeep.errors import RlkeepError
from rlkeep.jsonio import atomic_write_bytes, write_json

from . import clock
from .checkpoints import write_checkpoints
from .context import RunContext, make_wandb_run_id
from .credentials import PlantedSecrets, make_credentials
from .iris import iris_state
from .logs import render, trainer_stdout
from .plan import Params, build_plan
from .record import DEFAULT_RULE, build_record
from .runfiles import write_run_files
from .tree import Tree, tree_digest
from .trials import trial_summary, write_trials

__all__ = ["ExampleRun", "write_example_run", "iris_state", "cli_main", "tree_digest"]


@dataclass
class ExampleRun:
    root: Path
    job: str
    user: str
    chain: list[str]
    interval: int
    steps_logged: dict[str, list[int]]          # slug -> steps in its log
    final_step: int
    complete_ckpt_steps: list[int]
    export_steps: list[int]
    incomplete_ckpt_steps: list[int]
    trials_started: int
    trials_completed: int
    planted_secrets: list[dict]                 # {"kind", "path", "value"}; path relative to root
    tracker_url: str = ""
    resumed_from: dict[str, int] = field(default_factory=dict)            # slug -> resume step
    attempt_times: list[dict] = field(default_factory=list, repr=False)   # per attempt, for Iris
    stdout_lines: dict[str, list[tuple[str, str]]] = field(default_factory=dict, repr=False)
    dead_attempts: dict[str, str] = field(default_factory=dict)           # slug -> "traceback" | "empty"

    def record(
        self,
        *,
        store_url: str,
        scheduler: str = "iris",
        cluster: str | None = "cw-local",
        rule: dict | None = DEFAULT_RULE,
        publish: dict | None = None,
        register: dict | None = None,
        archive: dict | None = None,
        base_model: str | None = None,
    ) -> dict:
        """The contract §3 job record for this run, with `store` = `store_url`."""
        return build_record(
            job=self.job, user=self.user, chain=self.chain, interval=self.interval,
            tracker_url=self.tracker_url, store_url=store_url, scheduler=scheduler, cluster=cluster,
            rule=rule, publish=publish, register=register, archive=archive, base_model=base_model,
        )


def write_example_run(
    root: Path,
    *,
    job: str = "rl-demo",
    user: str = "demo",
    n_trials: int = 300,
    n_steps: int = 57,
    interval: int = 20,
    seed: int = 0,
    model_hidden: int = 64,
    large_result_mb: float = 6.0,
    large_pane_mb: float = 2.5,
    dead_attempts: bool = False,
    trial_kb: float = 0.0,
) -> ExampleRun:
    """Write the run into `root` (created; must be absent, empty, or already this very run).

    dead_attempts: a chain of four (trained and crashed, died with only a traceback, died with a
    0-byte log, resumed and finished); the default is the two training attempts alone.
    trial_kb: every trial's agent also leaves a terminal recording of about this many KB (bytes per trial).
    """
    params = Params(job, user, n_trials, n_steps, interval, seed, model_hidden, large_result_mb, large_pane_mb,
                    dead_attempts, trial_kb)
    plan = build_plan(params)
    ctx = RunContext(plan, make_credentials(seed), PlantedSecrets(), make_wandb_run_id(seed))
    root = Path(root)
    staging = root.parent / f".{root.name}.example-tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        tree = Tree(staging)
        stdout_lines: dict[str, list[tuple[str, str]]] = {}
        texts: dict[str, str] = {}
        for attempt in plan.attempts:
            lines = trainer_stdout(ctx, attempt)
            texts[attempt.slug] = render(lines)
            tree.write_text(f"logs/{attempt.slug}.out", texts[attempt.slug])
            stdout_lines[attempt.slug] = [(clock.clock(moment), text) for moment, text in lines]
        write_run_files(tree, ctx, texts)
        specs = write_trials(tree, ctx)
        write_checkpoints(tree, ctx)
        _install(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    counts = trial_summary(specs)
    return ExampleRun(
        root=root,
        job=job,
        user=user,
        chain=plan.chain,
        interval=interval,
        steps_logged={a.slug: list(a.steps) for a in plan.attempts},
        final_step=plan.final_step,
        complete_ckpt_steps=list(plan.complete_ckpt_steps),
        export_steps=list(plan.export_steps),
        incomplete_ckpt_steps=list(plan.incomplete_ckpt_steps),
        trials_started=counts["started"],
        trials_completed=counts["completed"],
        planted_secrets=[dict(entry) for entry in ctx.planted.entries],
        tracker_url=ctx.tracker_url,
        resumed_from={a.slug: a.resumed_from for a in plan.attempts if a.resumed_from is not None},
        attempt_times=[_attempt_times(a) for a in plan.attempts],
        stdout_lines=stdout_lines,
        dead_attempts={a.slug: a.death for a in plan.attempts if a.death is not None},
    )


def _attempt_times(attempt) -> dict:
    errors = [
        "Exit code 1: ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "Exit code 1: OSError: [Errno 28] No space left on device",
    ]
    deaths = {
        "traceback": "Exit code 1: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "empty": "Exit code 137: container killed before it wrote output (node lost)",
    }
    return {
        "submitted_ms": clock.epoch_ms(attempt.submitted),
        "started_ms": clock.epoch_ms(attempt.started),
        "finished_ms": clock.epoch_ms(attempt.finished),
        "error": deaths[attempt.death] if attempt.death else errors[min(attempt.index, 1)],
        "preemption_count": 2 if attempt.index == 0 else 0,
        "memory_mb": 61_440 + 2_048 * attempt.index,
        "memory_peak_mb": 98_304 + 4_096 * attempt.index,
    }


def _install(staging: Path, root: Path) -> None:
    """Move the finished tree into place; an identical existing tree is left alone (reruns are safe)."""
    if root.exists() and not root.is_dir():
        raise RlkeepError(f"{root}: exists and is not a directory")
    if root.is_dir() and any(root.iterdir()):
        if tree_digest(root) == tree_digest(staging):
            return
        raise RlkeepError(f"{root}: exists and holds something other than this example run; "
                          "remove it or choose another output directory")
    if root.is_dir():
        root.rmdir()
    root.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, root)


def cli_main(argv: list[str]) -> int:
    """`rlkeep example-run --out DIR [--job J] [--user U] [--trials N] [--seed S]
    [--record-out records/J.yaml --store-url URL] [--iris-state F]` (+ size options for tests)."""
    parser = argparse.ArgumentParser(prog="rlkeep example-run",
                                     description="Write a realistic finished SkyRL + Harbor run into DIR.")
    parser.add_argument("--out", required=True, type=Path, help="the run's store root to create")
    parser.add_argument("--job", default="rl-demo")
    parser.add_argument("--user", default="demo")
    parser.add_argument("--trials", type=int, default=300, help="number of Harbor trial dirs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=57, help="last logged global step (off-interval)")
    parser.add_argument("--interval", type=int, default=20, help="checkpoint interval")
    parser.add_argument("--model-hidden", type=int, default=64, help="hidden size of the tiny model")
    parser.add_argument("--large-result-mb", type=float, default=6.0, help="size of the one large result.json")
    parser.add_argument("--large-pane-mb", type=float, default=2.5, help="size of the large pane/cast files")
    parser.add_argument("--trial-kb", type=float, default=0.0,
                        help="every trial's agent also leaves a terminal recording of about this many KB")
    parser.add_argument("--record-out", type=Path, help="write the job record YAML here (stem = job)")
    parser.add_argument("--store-url", help="the record's `store:` (where the tree will be uploaded)")
    parser.add_argument("--iris-state", type=Path, help="write the stand-in iris state JSON here")
    parser.add_argument("--dead-attempts", action="store_true",
                        help="a chain of four: two attempts between the training ones die on a bad node "
                             "(a traceback-only log, a 0-byte log)")
    args = parser.parse_args(argv)
    if args.record_out is not None:
        if not args.store_url:
            raise RlkeepError("example-run: --record-out needs --store-url (the record's `store:`)")
        if args.record_out.stem != args.job:
            raise RlkeepError(f"example-run: record file {args.record_out} must be named {args.job}.yaml "
                              "(the stem equals the job)")
    run = write_example_run(
        args.out, job=args.job, user=args.user, n_trials=args.trials, n_steps=args.steps, interval=args.interval,
        seed=args.seed, model_hidden=args.model_hidden, large_result_mb=args.large_result_mb,
        large_pane_mb=args.large_pane_mb, dead_attempts=args.dead_attempts, trial_kb=args.trial_kb,
    )
    summary = {"root": str(run.root), "job": run.job, "chain": run.chain, "final_step": run.final_step,
               "complete_ckpt_steps": run.complete_ckpt_steps, "export_steps": run.export_steps,
               "trials_started": run.trials_started, "trials_completed": run.trials_completed}
    if args.record_out is not None:
        record = run.record(store_url=args.store_url)
        atomic_write_bytes(args.record_out, yaml.safe_dump(record, sort_keys=False).encode("utf-8"))
        summary["record"] = str(args.record_out)
    if args.iris_state is not None:
        write_json(args.iris_state, iris_state(run))
        summary["iris_state"] = str(args.iris_state)
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 0
