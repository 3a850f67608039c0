"""Each step's status from the files a run leaves, and for a step that has not run, its real cause.

A step whose evidence file exists is what that file says (`completed` or `not_applicable`).
Otherwise, in this order:
- an ancestor in the step graph (rlkeep.pipeline.parents) failed: the step is `pending` and
  `blocked_by` names the first failed ancestor (the root cause, in table order), with that
  ancestor's reason, log and remedy: a step that never ran is never given a remedy of its own;
- its own latest run failed (its log, or a helper rule's such as staging, ends with
  `rlkeep: <reason>`): `blocked`, with its own remedy (rlkeep.pipeline.Step.remaining);
- else `pending`: it has not run yet, and the reason names the parent it waits for, if any.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlkeep.jsonio import read_json
from rlkeep.kinds import spec_for
from rlkeep.pipeline import EVERY_DESTINATION, PIPELINE, STEP_BY_NAME, STEPS, kind_has, parents
from rlkeep.world import remedy_of

TABLE_ORDER = {step.name: index for index, step in enumerate(PIPELINE)}
# A helper rule (staging: no evidence of its own) is part of the first step that takes it: its
# failure blocks that step, and every other step waiting on it is held by that step. A rule no
# step takes (`done`, the on-demand `restore`) owns nothing.
TAKERS = {helper.name: [step.name for step in PIPELINE
                        if any(entry.partition(" if ")[0] == helper.name for entry in step.after)]
          for helper in PIPELINE if helper.evidence is None}
OWNER = {helper: takers[0] for helper, takers in TAKERS.items() if takers}


def last_error(log_path: Path) -> str | None:
    """The reason of a step's latest failure, if its latest run (logs append) failed."""
    return _last_run(log_path)[1]


def _last_run(log_path: Path) -> tuple[str | None, str | None]:
    """("done" | "failed" | None, the failure's reason) of a rule's latest run, from its log."""
    if not log_path.is_file():
        return None, None
    tail = log_path.read_bytes()[-16384:].decode("utf-8", "replace").splitlines()
    for index in range(len(tail) - 1, -1, -1):
        line = tail[index]
        if line.startswith("rlkeep: "):  # a message may span lines: keep all of it
            return "failed", "\n".join([line.removeprefix("rlkeep: "), *tail[index + 1:]]).strip()
        if line.startswith("Traceback (most recent call last)"):
            return "failed", f"unexpected error: see logs/{log_path.name}"
        if " done in " in line:
            return "done", None
    return None, None


def collect_steps(job_dir: Path, kind: str | None = None,
                  publish: Mapping[str, Any] | None = EVERY_DESTINATION) -> dict[str, dict[str, Any]]:
    """Every step's status; a step the run's kind does not have is not_applicable (rlkeep.kinds).
    `publish` is the record's publish section (None: the record names no destinations)."""
    spec = spec_for(kind)
    known: dict[str, dict[str, Any]] = {}

    def state(rule: str) -> dict[str, Any]:
        if rule not in known:
            parent_states = {name: state(name) for name in parents(rule, spec.name, publish)}
            known[rule] = _state_of(job_dir, rule, parent_states, state)
        return known[rule]

    return {step.name: state(step.name) if kind_has(spec.name, step.name) else
            {"status": "not_applicable", "reason": f"does not apply to a {spec.name} run"} for step in STEPS}


def _state_of(job_dir: Path, rule: str, parent_states: dict[str, dict[str, Any]],
              state: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    step = STEP_BY_NAME[rule]
    if step.evidence is not None and (job_dir / step.evidence).is_file():
        return {"status": _sentinel_status(job_dir / step.evidence), "evidence": step.evidence}
    held = _first_failed_ancestor(rule, parent_states)
    if held is not None:
        via, root = held
        cause = state(root)
        first_line = (cause["reason"].splitlines() or [""])[0]
        return {"status": "pending", "blocked_by": root, "log": cause["log"],
                "reason": f"waits for {_named(via)}; {root} is blocked: {cause['reason']}",
                "remaining": f"{root} is blocked ({first_line}): {cause['remaining']}"}
    for helper in (name for name in parent_states if OWNER.get(name) == rule):
        if parent_states[helper]["status"] == "blocked":
            return {**parent_states[helper], "remaining": step.remaining}
    outcome, reason = _last_run(job_dir / "logs" / f"{rule}.log")
    if outcome == "failed":
        # a failure whose message states its remedy (rlkeep.world: the store the record names) is advised that
        return {"status": "blocked", "reason": reason, "log": f"logs/{rule}.log",
                "remaining": remedy_of(reason or "") or step.remaining}
    if step.evidence is None and outcome == "done":
        return {"status": "completed"}  # a helper rule (staging): its latest run finished
    waiting = [name for name, info in parent_states.items() if info["status"] not in {"completed", "not_applicable"}]
    reason = f"has not run yet; waits for {_named(waiting[0])}, which has not run yet" if waiting else "has not run yet"
    return {"status": "pending", "reason": reason,
            "remaining": "nothing failed here: the command that continues it runs it and whatever it waits for"}


def _first_failed_ancestor(rule: str, parent_states: dict[str, dict[str, Any]]) -> tuple[str, str] | None:
    """(the parent it waits on, the failed step behind it): the root cause first in table order,
    so every step held by one failure names the same one. A failed helper of this step's own is
    not an ancestor's failure (see OWNER)."""
    causes = []
    for name, info in parent_states.items():
        if "blocked_by" in info:
            causes.append((name, info["blocked_by"]))
        elif info["status"] == "blocked" and OWNER.get(name) != rule:
            causes.append((name, OWNER.get(name, name)))
    return min(causes, key=lambda cause: TABLE_ORDER[cause[1]]) if causes else None


def _named(rule: str) -> str:
    evidence = STEP_BY_NAME[rule].evidence
    return f"{rule} ({evidence})" if evidence else rule


def _sentinel_status(path: Path) -> str:
    if path.suffix != ".json":
        return "completed"
    try:
        return read_json(path).get("status", "completed")
    except (ValueError, AttributeError):
        return "completed"
