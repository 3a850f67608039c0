"""The choice of a checkpoint by the rule the record declares (checkpoint.rule: ema_max, latest or
step), among the complete candidates before a behavior break and after a declared warm-up. With
no rule the step is blocked and lists the valid candidates; nothing is ever chosen by default.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from rlkeep.checkpoints.listing import Candidate, CheckpointError, as_candidate
from rlkeep.errors import BlockedError
from rlkeep.metrics import ema_series, numeric_series

RULE_KINDS: tuple[str, ...] = ("ema_max", "latest", "step")

RULE_EXAMPLE = """checkpoint:
  rule:
    kind: ema_max            # or: latest | step
    metric: reward/avg_raw_reward
    alpha: 0.3333
    # step: 120              # with kind: step"""


def _ineligible_reason(step: int, behavior_break_step: int | None, min_step: int | None) -> str | None:
    if min_step is not None and step < min_step:
        return f"before the declared warm-up (checkpoint.rule.min_step {min_step})"
    if behavior_break_step is not None and step >= behavior_break_step:
        return "at or after the behavior break"
    return None


def _candidate_list(candidates: Sequence[Candidate], behavior_break_step: int | None = None,
                    min_step: int | None = None) -> str:
    if not candidates:
        return "  (none)"
    lines = []
    for c in candidates:
        reason = _ineligible_reason(c.step, behavior_break_step, min_step)
        lines.append(f"  step {c.step}: {', '.join(c.complete_sources)}" + (f" (not eligible: {reason})" if reason else ""))
    return "\n".join(lines)


def _validated_rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    normalized = _validated_rule_kind(rule)
    if "min_step" in rule:
        min_step = rule["min_step"]
        if isinstance(min_step, bool) or not isinstance(min_step, int) or min_step < 1:
            raise CheckpointError(f"checkpoint.rule.min_step must be a step number >= 1 (the declared warm-up), "
                                  f"got {min_step!r}")
        normalized["min_step"] = min_step
    return normalized


def _validated_rule_kind(rule: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(rule, Mapping):
        raise CheckpointError(f"checkpoint.rule must be a mapping, got {type(rule).__name__}")
    kind = rule.get("kind")
    if kind not in RULE_KINDS:
        raise CheckpointError(f"checkpoint.rule.kind must be one of {', '.join(RULE_KINDS)}, got {kind!r}")
    if kind == "ema_max":
        metric, alpha = rule.get("metric"), rule.get("alpha")
        if not isinstance(metric, str) or not metric:
            raise CheckpointError("checkpoint.rule.metric is required for kind ema_max (e.g. reward/avg_raw_reward)")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
            raise CheckpointError(f"checkpoint.rule.alpha must be a number in (0, 1] for kind ema_max, got {alpha!r}")
        return {"kind": kind, "metric": metric, "alpha": float(alpha)}
    if kind == "step":
        step = rule.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise CheckpointError(f"checkpoint.rule.step must be an integer step for kind step, got {step!r}")
        return {"kind": kind, "step": step}
    return {"kind": kind}


def _ema_by_candidate(points: Sequence[tuple[int, float]], alpha: float,
                      steps: Iterable[int]) -> dict[int, tuple[float, int]]:
    """{candidate step: (EMA as of the last logged step <= it, that logged step)}."""
    emas = ema_series([value for _, value in points], alpha)
    logged = [step for step, _ in points]
    result: dict[int, tuple[float, int]] = {}
    for step in steps:
        position = _last_at_or_before(logged, step)
        if position is not None:
            result[step] = (emas[position], logged[position])
    return result


def _last_at_or_before(sorted_steps: Sequence[int], step: int) -> int | None:
    low, high = 0, len(sorted_steps)
    while low < high:
        middle = (low + high) // 2
        if sorted_steps[middle] <= step:
            low = middle + 1
        else:
            high = middle
    return low - 1 if low else None


def _break_eligible(complete: list[Candidate], behavior_break_step: int | None
                    ) -> tuple[list[Candidate], dict[str, Any] | None, str]:
    """(the complete candidates before the behavior break, its evidence, its rationale sentence)."""
    if behavior_break_step is None:
        return complete, None, ""
    eligible = [c for c in complete if c.step < behavior_break_step]
    last_before = eligible[-1].step if eligible else None
    excluded = [c.step for c in complete if c.step >= behavior_break_step]
    if last_before is None:
        raise CheckpointError(
            f"no complete checkpoint predates the behavior break at step {behavior_break_step}; "
            f"complete checkpoints:\n{_candidate_list(complete)}")
    sentence = (f" Behavior break at step {behavior_break_step}: checkpoints at or after it are not "
                f"eligible ({', '.join(map(str, excluded)) or 'none saved'}); the last complete checkpoint "
                f"whose generating rollouts predate it is step {last_before}.")
    return eligible, {"step": behavior_break_step, "last_checkpoint_before": last_before, "excluded": excluded}, sentence


def _no_rule_declared(complete: list[Candidate], behavior_break_step: int | None,
                      break_info: dict[str, Any] | None) -> BlockedError:
    hint = (f"\nBehavior break at step {behavior_break_step}: only steps before it are eligible; the last complete "
            f"checkpoint whose rollouts predate it is step {break_info['last_checkpoint_before']}." if break_info else "")
    return BlockedError(
        "no checkpoint selection rule is declared; valid candidates (complete saved checkpoints, step: sources):\n"
        f"{_candidate_list(complete, behavior_break_step)}{hint}\n"
        "Declare the choice in the job record's checkpoint.rule (kind ema_max | latest | step), e.g.:\n"
        f"{RULE_EXAMPLE}")


def _warm_up_eligible(eligible: list[Candidate], complete: list[Candidate], min_step: int | None,
                      behavior_break_step: int | None) -> tuple[list[Candidate], dict[str, Any] | None, str]:
    """(the eligible candidates at or after the declared warm-up, its evidence, its rationale sentence)."""
    if min_step is None:  # the declared warm-up; never defaulted
        return eligible, None, ""
    warm_up = [c.step for c in eligible if c.step < min_step]
    kept = [c for c in eligible if c.step >= min_step]
    if not kept:
        before_break = f" and before the behavior break at step {behavior_break_step}" if behavior_break_step is not None else ""
        raise CheckpointError(
            f"no complete checkpoint at or after the declared warm-up checkpoint.rule.min_step {min_step}"
            f"{before_break}; complete checkpoints:\n{_candidate_list(complete, behavior_break_step, min_step)}")
    sentence = (f" Declared warm-up checkpoint.rule.min_step {min_step}: checkpoints before it are not "
                f"eligible ({', '.join(map(str, warm_up)) or 'none saved'}).")
    return kept, {"min_step": min_step, "excluded": warm_up}, sentence


def _chosen_by_step(wanted: int, all_candidates: list[Candidate], complete: list[Candidate],
                    eligible: list[Candidate], min_step: int | None, behavior_break_step: int | None
                    ) -> tuple[Candidate, str]:
    match = next((c for c in complete if c.step == wanted), None)
    if match is None:
        known = next((c for c in all_candidates if c.step == wanted), None)
        why = f" (saved but incomplete: {'; '.join(known.reasons)})" if known else " (no checkpoint saved at that step)"
        raise CheckpointError(f"checkpoint.rule.step {wanted} is not a complete saved checkpoint{why}; "
                              f"valid candidates:\n{_candidate_list(complete)}")
    if min_step is not None and wanted < min_step:
        raise CheckpointError(
            f"checkpoint.rule.step {wanted} is before the declared warm-up checkpoint.rule.min_step {min_step}; "
            f"eligible candidates:\n{_candidate_list(eligible)}")
    if match not in eligible:
        raise CheckpointError(
            f"checkpoint.rule.step {wanted} does not predate the behavior break at step {behavior_break_step} "
            f"(its generating rollouts reach step {wanted}); eligible candidates:\n{_candidate_list(eligible)}")
    return match, f"step rule: step {wanted} as declared; it is a complete checkpoint ({', '.join(match.complete_sources)})."


def _chosen_by_ema(metric: str, alpha: float, complete: list[Candidate], eligible: list[Candidate],
                   surface_rows: list[dict[str, Any]]) -> tuple[Candidate, str, dict[int, float]]:
    """(the eligible candidate with the highest EMA, the rationale, the EMA of every complete candidate)."""
    points = numeric_series(surface_rows, metric)
    if not points:
        raise CheckpointError(f"metric {metric!r} has no finite value in the metric surface")
    scored = _ema_by_candidate(points, alpha, [c.step for c in complete])
    ranked = [c for c in eligible if c.step in scored]
    if not ranked:
        raise CheckpointError(f"no eligible checkpoint has a logged {metric!r} at or before its step "
                              f"(first logged step {points[0][0]}); eligible:\n{_candidate_list(eligible)}")
    chosen = max(ranked, key=lambda c: (scored[c.step][0], -c.step))
    listing = ", ".join(f"{c.step}: {scored[c.step][0]:.4f}" for c in ranked)
    rationale = (f"ema_max rule: EMA of {metric} (alpha {alpha:g}) over {len(points)} logged steps; step "
                 f"{chosen.step} has the highest EMA, {scored[chosen.step][0]:.4f}, among {len(ranked)} eligible "
                 f"complete checkpoints ({listing}); ties go to the earliest step.")
    stale = [f"{c.step} (from step {scored[c.step][1]})" for c in ranked if scored[c.step][1] != c.step]
    if stale:
        rationale += f" Not logged at their own step, EMA taken from the last logged step before: {', '.join(stale)}."
    skipped = sum(1 for row in surface_rows if isinstance(row.get(metric), float) and math.isnan(row[metric]))
    if skipped:
        rationale += f" {skipped} NaN value(s) skipped."
    return chosen, rationale, {step: value for step, (value, _) in scored.items()}


def select_checkpoint(candidates: Sequence[Candidate | Mapping[str, Any]], rule: Mapping[str, Any] | None,
                      surface_rows: list[dict[str, Any]], behavior_break_step: int | None) -> dict[str, Any]:
    """Apply the campaign's declared rule to the complete candidates.

    A checkpoint at step s was trained on rollouts of steps <= s, so with a behavior break at
    step B only s < B is eligible, and the rationale names the last such checkpoint.
    Raises BlockedError without a rule (listing the valid candidates) and CheckpointError
    when the rule cannot be satisfied (naming the step or metric).
    """
    all_candidates = sorted(map(as_candidate, candidates), key=lambda c: c.step)
    complete = [c for c in all_candidates if c.complete]
    if behavior_break_step is not None and (isinstance(behavior_break_step, bool)
                                            or not isinstance(behavior_break_step, int)):
        raise CheckpointError(f"checkpoint.behavior_break_step must be an integer step, got {behavior_break_step!r}")
    if not complete:
        listing = "\n".join(f"  step {c.step}: {'; '.join(c.reasons)}" for c in all_candidates) or "  (no saved steps)"
        raise CheckpointError(f"no complete saved checkpoint to select from:\n{listing}")
    eligible, break_info, break_sentence = _break_eligible(complete, behavior_break_step)
    if rule is None:
        raise _no_rule_declared(complete, behavior_break_step, break_info)
    normalized = _validated_rule(rule)
    min_step = normalized.get("min_step")
    eligible, warm_up_info, warm_up_sentence = _warm_up_eligible(eligible, complete, min_step, behavior_break_step)
    considered = []
    for c in complete:
        entry: dict[str, Any] = {"step": c.step, "sources": c.complete_sources, "eligible": c in eligible}
        if not entry["eligible"]:
            entry["not_eligible"] = _ineligible_reason(c.step, behavior_break_step, min_step)
        considered.append(entry)

    ema_values: dict[int, float] | None = None
    if normalized["kind"] == "step":
        chosen, rationale = _chosen_by_step(normalized["step"], all_candidates, complete, eligible, min_step,
                                            behavior_break_step)
    elif normalized["kind"] == "latest":
        chosen = eligible[-1]
        rationale = (f"latest rule: step {chosen.step} is the highest complete checkpoint"
                     f"{' before the behavior break' if break_info else ''} "
                     f"({', '.join(chosen.complete_sources)}) of {len(complete)} complete.")
    else:
        chosen, rationale, ema_values = _chosen_by_ema(normalized["metric"], normalized["alpha"], complete, eligible,
                                                       surface_rows)
        for entry in considered:
            entry["ema"] = ema_values.get(entry["step"])
    return {
        "step": chosen.step,
        "rule": normalized,
        "rationale": rationale + warm_up_sentence + break_sentence,
        "ema": ema_values,
        "candidates_considered": considered,
        "behavior_break": break_info,
        "warm_up": warm_up_info,
        "sources": chosen.complete_sources,
    }
