"""Saved checkpoints of a run, which of them are complete, and the choice by the declared rule.

Completeness is judged from the store listing (key -> size) plus the content of a few small
files (fsdp_config.json, model.safetensors.index.json, Megatron metadata.json, DeepSpeed
`latest`); `keys_to_read` names them so the caller can fetch them first. Signals follow
docs/reference.md, formats §1 (SkyRL fsdp_strategy.save_checkpoint, trainer.save_models):

- FSDP ``ckpts/global_step_N/``: trainer_state.pt; all W rank files of model/optim/extra_state;
  policy/fsdp_config.json with world_size == W (a pre-#124 checkpoint has neither that file
  nor policy/huggingface/ and is accepted with a note); every file non-zero; N not beyond
  latest_ckpt_global_step.txt (written last, after all saves).
- HF export ``exports/global_step_N/policy/``: config.json (marks a finished export) and every
  shard the index names (or a single model.safetensors), non-zero. ``.tmp-hf-export-*`` and
  ``.old-hf-export-*`` siblings are leftovers of an interrupted atomic publish, never exports.
- Megatron (torch_dist dist_checkpointing) and legacy DeepSpeed (policy/latest +
  policy/global_step{K}/) checkpoints are listed and checked as far as the listing allows;
  the export step decides what it can consolidate.

A step is a valid candidate when at least one of its sources is complete.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlkeep.errors import BlockedError, RlkeepError
from rlkeep.jsonio import read_json, write_json
from rlkeep.metrics import ema_series, numeric_series, read_metrics_csv
from rlkeep.scheduler import refuse_while_unrecorded_attempts_run
from rlkeep.steps import StepContext
from rlkeep.storage import open_store

SOURCE_ORDER: tuple[str, ...] = ("fsdp", "hf_export", "megatron", "deepspeed", "unknown")
LATEST_TXT = "latest_ckpt_global_step.txt"
RULE_KINDS: tuple[str, ...] = ("ema_max", "latest", "step")
MAX_LISTED = 5

_STEP_DIR = re.compile(r"global_step_(\d+)")
_RANK_FILE = re.compile(r"(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt")
_LEFTOVER = re.compile(r"\.(?:tmp|old)-hf-export-[^/]*")
_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")
_DS_TAG_DIR = re.compile(r"global_step\d+")
_DS_MODEL = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_00_model_states\.pt")
_DS_OPTIM = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")


class CheckpointError(RlkeepError):
    """No checkpoint can be chosen as asked (the message lists what can)."""


@dataclass
class Candidate:
    """One saved step. complete: at least one source is complete (a valid candidate)."""

    step: int
    complete: bool
    reasons: list[str]
    sources: list[str]
    complete_sources: list[str] = field(default_factory=list)
    keys: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(step=int(data["step"]), complete=bool(data["complete"]), reasons=list(data.get("reasons", [])),
                   sources=list(data.get("sources", [])), complete_sources=list(data.get("complete_sources", [])),
                   keys={k: list(v) for k, v in data.get("keys", {}).items()})


# --------------------------------------------------------------------------- listing -> steps

def _prefix(value: str) -> str:
    return value.strip("/") + "/" if value.strip("/") else ""


def _step_dirs(keys: Mapping[str, int], prefix: str) -> dict[int, dict[str, int]]:
    """{step: {path inside global_step_N/: size}} for keys under prefix."""
    grouped: dict[int, dict[str, int]] = {}
    for key, size in keys.items():
        if not key.startswith(prefix):
            continue
        head, _, rest = key[len(prefix):].partition("/")
        match = _STEP_DIR.fullmatch(head)
        if match and rest:
            grouped.setdefault(int(match.group(1)), {})[rest] = size
    return grouped


def keys_to_read(keys: Iterable[str], *, ckpts_prefix: str = "ckpts", exports_prefix: str = "exports") -> list[str]:
    """The small files whose content candidates_from_listing needs (pass them as contents)."""
    ckpts, exports = _prefix(ckpts_prefix), _prefix(exports_prefix)
    wanted = []
    for key in keys:
        if key.startswith(ckpts) and (key.endswith(("/policy/fsdp_config.json", "/policy/metadata.json",
                                                    "/policy/latest")) or key == ckpts + LATEST_TXT):
            wanted.append(key)
        elif key.startswith(exports) and key.endswith("/policy/model.safetensors.index.json"):
            wanted.append(key)
    return sorted(wanted)


def parse_latest_step(text: str | None, name: str = LATEST_TXT) -> int | None:
    if text is None:
        return None
    stripped = text.strip()
    if not re.fullmatch(r"\d+", stripped):
        raise CheckpointError(f"{name}: expected a step number, found {stripped[:40]!r}")
    return int(stripped)


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _zero_size(files: Mapping[str, int], names: Iterable[str]) -> list[str]:
    return sorted(name for name in names if name in files and files[name] <= 0)


def _cap_problem(step: int, latest: int | None) -> str | None:
    if latest is not None and step > latest:
        return f"step {step} is beyond {LATEST_TXT} ({latest}): the save never finished"
    return None


def _read_json(contents: Mapping[str, bytes], key: str) -> tuple[Any, str | None]:
    if key not in contents:
        return None, f"content of {key} was not provided"
    try:
        return json.loads(contents[key]), None
    except (ValueError, UnicodeDecodeError) as error:
        return None, f"{key} is not valid JSON ({error})"


def _size_and_cap_problems(step: int, files: Mapping[str, int], names: Iterable[str], latest: int | None) -> list[str]:
    """What every layout checks last: no zero-size file, and not beyond latest_ckpt_global_step.txt."""
    problems = []
    zero = _zero_size(files, names)
    if zero:
        problems.append(f"zero-size {_listed(zero)}")
    cap = _cap_problem(step, latest)
    if cap:
        problems.append(cap)
    return problems


def _fsdp_status(step: int, files: Mapping[str, int], key: str, latest: int | None,
                 contents: Mapping[str, bytes]) -> tuple[bool, list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    ranks: dict[str, set[int]] = {"model": set(), "optim": set(), "extra_state": set()}
    world_sizes: set[int] = set()
    for name in files:
        match = _RANK_FILE.fullmatch(name.removeprefix("policy/")) if name.startswith("policy/") else None
        if match:
            world_sizes.add(int(match.group(2)))
            ranks[match.group(1)].add(int(match.group(3)))
    if "trainer_state.pt" not in files:
        problems.append("missing trainer_state.pt")
    expected = ["trainer_state.pt"]
    if not world_sizes:
        problems.append("no policy/model_world_size_*_rank_*.pt shards")
    elif len(world_sizes) > 1:
        problems.append(f"rank files of several world sizes: {sorted(world_sizes)}")
    else:
        (world,) = world_sizes
        names = [f"policy/{kind}_world_size_{world}_rank_{rank}.pt" for kind in ranks for rank in range(world)]
        expected += names
        missing = [name for name in names if name not in files]
        if missing:
            problems.append(f"missing {_listed(missing)} (world size {world})")
        extra = sorted(f"{kind} rank {rank}" for kind, seen in ranks.items() for rank in seen if rank >= world)
        if extra:
            problems.append(f"rank files beyond world size {world}: {_listed(extra)}")
        config_name = "policy/fsdp_config.json"
        if config_name in files:
            expected.append(config_name)
            config, error = _read_json(contents, key + config_name)
            if error:
                problems.append(error)
            elif not isinstance(config, dict) or config.get("world_size") != world:
                found = config.get("world_size") if isinstance(config, dict) else config
                problems.append(f"{config_name} world_size {found!r} != {world} (rank files model_world_size_{world}_*)")
        elif any(name.startswith("policy/huggingface/") for name in files):
            problems.append(f"missing {config_name} (policy/huggingface/ exists, so this is a post-#124 save)")
        else:
            notes.append(f"pre-#124 layout (no {config_name}): world size {world} taken from the rank file names")
    problems += _size_and_cap_problems(step, files, expected, latest)
    if problems:
        return False, ["fsdp: " + problem for problem in problems] + ["fsdp: note: " + note for note in notes]
    world = next(iter(world_sizes))
    summary = f"fsdp: complete: trainer_state.pt and {world} ranks of model/optim/extra_state"
    summary += f", fsdp_config.json world_size {world}" if "policy/fsdp_config.json" in files else ""
    return True, [summary] + ["fsdp: note: " + note for note in notes]


def _megatron_status(step: int, files: Mapping[str, int], key: str, latest: int | None,
                     contents: Mapping[str, bytes]) -> tuple[bool, list[str]]:
    problems: list[str] = []
    required = ["trainer_state.pt", "policy/metadata.json", "policy/common.pt", "policy/.metadata"]
    missing = [name for name in required if name not in files]
    if missing:
        problems.append(f"missing {_listed(missing)}")
    shards = sorted(name for name in files if name.startswith("policy/") and name.endswith(".distcp"))
    if not shards:
        problems.append("no policy/__*_*.distcp shards")
    if "policy/metadata.json" in files:
        metadata, error = _read_json(contents, key + "policy/metadata.json")
        if error:
            problems.append(error)
        elif not isinstance(metadata, dict) or metadata.get("sharded_backend") != "torch_dist":
            problems.append("policy/metadata.json sharded_backend is not torch_dist")
    problems += _size_and_cap_problems(step, files, [*required, *shards], latest)
    if problems:
        return False, ["megatron: " + problem for problem in problems]
    return True, [f"megatron: complete: torch_dist metadata, common.pt, .metadata and {len(shards)} .distcp shards "
                  "(shard set not cross-checked against .metadata)"]


def _deepspeed_status(step: int, files: Mapping[str, int], key: str, latest: int | None,
                      contents: Mapping[str, bytes]) -> tuple[bool, list[str]]:
    problems: list[str] = []
    tags = sorted({name.split("/")[1] for name in files
                   if name.startswith("policy/") and name.count("/") >= 2 and _DS_TAG_DIR.fullmatch(name.split("/")[1])})
    tag: str | None = None
    if "policy/latest" in files and key + "policy/latest" in contents:
        tag = contents[key + "policy/latest"].decode("utf-8", errors="replace").strip()
    elif len(tags) == 1:
        tag = tags[0]
    else:
        problems.append("cannot tell the DeepSpeed tag: policy/latest content not provided and "
                        f"{len(tags)} policy/global_step* dirs")
    checked: list[str] = ["trainer_state.pt"]
    if "trainer_state.pt" not in files:
        problems.append("missing trainer_state.pt")
    if tag is not None:
        inside = {name[len(f"policy/{tag}/"):]: size for name, size in files.items() if name.startswith(f"policy/{tag}/")}
        models = {name: _DS_MODEL.fullmatch(name) for name in inside}
        models = {name: match for name, match in models.items() if match}
        optims = {name: _DS_OPTIM.fullmatch(name) for name in inside}
        optims = {name: match for name, match in optims.items() if match}
        if not inside:
            problems.append(f"policy/latest names {tag!r} but policy/{tag}/ is empty or absent")
        if not models:
            problems.append(f"no *model_states.pt in policy/{tag}/")
        if not optims:
            problems.append(f"no *optim_states.pt in policy/{tag}/")
        dp_ranks = sorted({int(match.group(1)) for match in optims.values()})
        if dp_ranks and dp_ranks != list(range(len(dp_ranks))):
            problems.append(f"optimizer partitions of dp ranks {dp_ranks} are not 0..{len(dp_ranks) - 1}")
        zero3 = sorted({int(match.group(1)) for match in models.values() if match.group(1) is not None})
        if zero3 and zero3 != dp_ranks:
            problems.append(f"ZeRO-3 model states of dp ranks {zero3} do not match optimizer ranks {dp_ranks}")
        checked += [f"policy/{tag}/{name}" for name in [*models, *optims]]
    problems += _size_and_cap_problems(step, files, checked, latest)
    if problems:
        return False, ["deepspeed: " + problem for problem in problems]
    return True, [f"deepspeed: complete: tag {tag} with model and optimizer states"]


def _hf_export_status(files: Mapping[str, int], key: str, contents: Mapping[str, bytes],
                      leftovers: Sequence[str]) -> tuple[bool, list[str]]:
    """files: paths inside exports/global_step_N/policy/."""
    leftover_note = f"leftover of an interrupted export, never an export: {_listed(list(leftovers))}" if leftovers else ""
    if not files:
        return False, [f"hf_export: no policy/ export; only a {leftover_note}"] if leftovers else ["hf_export: empty"]
    problems: list[str] = []
    checked = ["config.json"]
    if "config.json" not in files:
        problems.append("missing policy/config.json (the export never finished)")
    index_name = "model.safetensors.index.json"
    if index_name in files:
        index, error = _read_json(contents, key + index_name)
        if error:
            problems.append(error)
        elif not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
            problems.append(f"{index_name} has no weight_map")
        else:
            if "metadata" not in index:
                problems.append(f"{index_name} has no metadata key (transformers refuses to load it)")
            shards = sorted({str(value) for value in index["weight_map"].values()})
            checked += shards
            missing = [shard for shard in shards if shard not in files]
            if missing:
                problems.append(f"missing {_listed(missing)} named by the index")
    elif "model.safetensors" in files:
        checked.append("model.safetensors")
    elif any(_SHARD.fullmatch(name) for name in files):
        problems.append(f"sharded safetensors without {index_name}")
    else:
        problems.append("no safetensors weights")
    zero = _zero_size(files, checked)
    if zero:
        problems.append(f"zero-size {_listed(zero)}")
    notes = ["hf_export: note: " + leftover_note] if leftovers else []
    if problems:
        return False, ["hf_export: " + problem for problem in problems] + notes
    weights = len(checked) - 1
    return True, [f"hf_export: complete: config.json and {weights} safetensors file{'s' if weights != 1 else ''}"] + notes


def candidates_from_listing(keys: Mapping[str, int], *, ckpts_prefix: str = "ckpts", exports_prefix: str = "exports",
                            latest_step_text: str | None, interval: int,
                            contents: Mapping[str, bytes] | None = None) -> list[Candidate]:
    """Every saved step under ckpts/global_step_N and exports/global_step_N, judged complete or
    not with reasons. keys: store keys relative to the run root -> size in bytes; contents: the
    bytes of the keys named by keys_to_read (a key whose content is needed but absent makes
    its source incomplete rather than guessed)."""
    contents = contents or {}
    ckpts, exports = _prefix(ckpts_prefix), _prefix(exports_prefix)
    latest = parse_latest_step(latest_step_text, ckpts + LATEST_TXT)
    ckpt_dirs = _step_dirs(keys, ckpts)
    export_dirs = _step_dirs(keys, exports)
    steps = set(ckpt_dirs) | set(export_dirs) | ({latest} if latest is not None else set())
    candidates = []
    for step in sorted(steps):
        statuses: dict[str, tuple[bool, list[str]]] = {}
        step_keys: dict[str, list[str]] = {}
        files = ckpt_dirs.get(step)
        if files:
            base = f"{ckpts}global_step_{step}/"
            policy = [name for name in files if name.startswith("policy/")]
            layouts = []
            if any(_RANK_FILE.fullmatch(name[7:]) for name in policy) or "policy/fsdp_config.json" in files:
                layouts.append(("fsdp", _fsdp_status))
            if "policy/metadata.json" in files or any(name.endswith(".distcp") for name in policy):
                layouts.append(("megatron", _megatron_status))
            if "policy/latest" in files or any(_DS_TAG_DIR.fullmatch(name.split("/")[1]) for name in policy if name.count("/") >= 2):
                layouts.append(("deepspeed", _deepspeed_status))
            for name, judge in layouts:
                statuses[name] = judge(step, files, base, latest, contents)
                step_keys[name] = sorted(base + path for path in files)
            if not layouts:
                statuses["unknown"] = (False, ["unknown: no FSDP, Megatron or DeepSpeed policy files in "
                                               f"{base} ({_listed(sorted(files))})"])
                step_keys["unknown"] = sorted(base + path for path in files)
        exported = export_dirs.get(step)
        if exported:
            base = f"{exports}global_step_{step}/"
            inside = {name[len("policy/"):]: size for name, size in exported.items() if name.startswith("policy/")}
            leftovers = sorted({base + name.split("/")[0] for name in exported if _LEFTOVER.fullmatch(name.split("/")[0])})
            if inside or leftovers:
                statuses["hf_export"] = _hf_export_status(inside, base + "policy/", contents, leftovers)
                step_keys["hf_export"] = sorted(base + "policy/" + name for name in inside)
                if leftovers:
                    step_keys["hf_export_leftovers"] = sorted(base + name for name in exported
                                                              if _LEFTOVER.fullmatch(name.split("/")[0]))
        if not statuses and step == latest:
            statuses["unknown"] = (False, [f"unknown: {LATEST_TXT} names step {step} but no global_step_{step}/ exists"])
        sources = [name for name in SOURCE_ORDER if name in statuses]
        complete_sources = [name for name in sources if statuses[name][0]]
        reasons = [reason for name in sources for reason in statuses[name][1]]
        if interval > 0 and step % interval:
            reasons.append(f"note: off-interval step (interval {interval}): the final save of a run")
        candidates.append(Candidate(step=step, complete=bool(complete_sources), reasons=reasons, sources=sources,
                                    complete_sources=complete_sources, keys=step_keys))
    return candidates


def valid_candidates(candidates: Iterable[Candidate | Mapping[str, Any]]) -> list[Candidate]:
    return sorted((c for c in map(_as_candidate, candidates) if c.complete), key=lambda c: c.step)


def _as_candidate(candidate: Candidate | Mapping[str, Any]) -> Candidate:
    return candidate if isinstance(candidate, Candidate) else Candidate.from_json(candidate)


# --------------------------------------------------------------------------- selection

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


def select_checkpoint(candidates: Sequence[Candidate | Mapping[str, Any]], rule: Mapping[str, Any] | None,
                      surface_rows: list[dict[str, Any]], behavior_break_step: int | None) -> dict[str, Any]:
    """Apply the campaign's declared rule to the complete candidates.

    A checkpoint at step s was trained on rollouts of steps <= s, so with a behavior break at
    step B only s < B is eligible, and the rationale names the last such checkpoint.
    Raises BlockedError without a rule (listing the valid candidates) and CheckpointError
    when the rule cannot be satisfied (naming the step or metric).
    """
    all_candidates = sorted(map(_as_candidate, candidates), key=lambda c: c.step)
    complete = [c for c in all_candidates if c.complete]
    if behavior_break_step is not None and (isinstance(behavior_break_step, bool) or not isinstance(behavior_break_step, int)):
        raise CheckpointError(f"checkpoint.behavior_break_step must be an integer step, got {behavior_break_step!r}")
    if not complete:
        listing = "\n".join(f"  step {c.step}: {'; '.join(c.reasons)}" for c in all_candidates) or "  (no saved steps)"
        raise CheckpointError(f"no complete saved checkpoint to select from:\n{listing}")
    eligible = [c for c in complete if behavior_break_step is None or c.step < behavior_break_step]
    break_info: dict[str, Any] | None = None
    break_sentence = ""
    if behavior_break_step is not None:
        last_before = eligible[-1].step if eligible else None
        excluded = [c.step for c in complete if c.step >= behavior_break_step]
        break_info = {"step": behavior_break_step, "last_checkpoint_before": last_before, "excluded": excluded}
        if last_before is None:
            raise CheckpointError(
                f"no complete checkpoint predates the behavior break at step {behavior_break_step}; "
                f"complete checkpoints:\n{_candidate_list(complete)}")
        break_sentence = (f" Behavior break at step {behavior_break_step}: checkpoints at or after it are not "
                          f"eligible ({', '.join(map(str, excluded)) or 'none saved'}); the last complete checkpoint "
                          f"whose generating rollouts predate it is step {last_before}.")

    if rule is None:
        hint = (f"\nBehavior break at step {behavior_break_step}: only steps before it are eligible; the last complete "
                f"checkpoint whose rollouts predate it is step {break_info['last_checkpoint_before']}." if break_info else "")
        raise BlockedError(
            "no checkpoint selection rule is declared; valid candidates (complete saved checkpoints, step: sources):\n"
            f"{_candidate_list(complete, behavior_break_step)}{hint}\n"
            "Declare the choice in the job record's checkpoint.rule (kind ema_max | latest | step), e.g.:\n"
            f"{RULE_EXAMPLE}")
    normalized = _validated_rule(rule)
    kind = normalized["kind"]
    min_step = normalized.get("min_step")  # the declared warm-up; never defaulted
    warm_up_info: dict[str, Any] | None = None
    warm_up_sentence = ""
    if min_step is not None:
        warm_up = [c.step for c in eligible if c.step < min_step]
        eligible = [c for c in eligible if c.step >= min_step]
        warm_up_info = {"min_step": min_step, "excluded": warm_up}
        if not eligible:
            raise CheckpointError(
                f"no complete checkpoint at or after the declared warm-up checkpoint.rule.min_step {min_step}"
                f"{' and before the behavior break at step ' + str(behavior_break_step) if break_info else ''}; "
                f"complete checkpoints:\n{_candidate_list(complete, behavior_break_step, min_step)}")
        warm_up_sentence = (f" Declared warm-up checkpoint.rule.min_step {min_step}: checkpoints before it are not "
                            f"eligible ({', '.join(map(str, warm_up)) or 'none saved'}).")
    ema_values: dict[int, float] | None = None
    considered = []
    for c in complete:
        entry: dict[str, Any] = {"step": c.step, "sources": c.complete_sources, "eligible": c in eligible}
        if not entry["eligible"]:
            entry["not_eligible"] = _ineligible_reason(c.step, behavior_break_step, min_step)
        considered.append(entry)

    if kind == "step":
        wanted = normalized["step"]
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
        chosen = match
        rationale = f"step rule: step {wanted} as declared; it is a complete checkpoint ({', '.join(match.complete_sources)})."
    elif kind == "latest":
        chosen = eligible[-1]
        rationale = (f"latest rule: step {chosen.step} is the highest complete checkpoint"
                     f"{' before the behavior break' if break_info else ''} "
                     f"({', '.join(chosen.complete_sources)}) of {len(complete)} complete.")
    else:
        metric, alpha = normalized["metric"], normalized["alpha"]
        points = numeric_series(surface_rows, metric)
        if not points:
            raise CheckpointError(f"metric {metric!r} has no finite value in the metric surface")
        scored = _ema_by_candidate(points, alpha, [c.step for c in complete])
        ema_values = {step: value for step, (value, _) in scored.items()}
        for entry in considered:
            entry["ema"] = ema_values.get(entry["step"])
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


# --------------------------------------------------------------------------- pipeline steps

MAX_SMALL_FILE = 16 << 20  # an index or config larger than this is not one; leave it unread


def list_checkpoints_step(ctx: StepContext) -> None:
    """`<job>/checkpoint/candidates.json`: every saved step under the record's ckpts/ and
    exports/, complete or not with reasons. Runs after retries.json, so no attempt of the chain still
    writes, and refuses while chain.json lists an unrecorded attempt that is pending or running."""

    record = ctx.record
    if ctx.inputs.get("chain") is not None:  # issue 16: an attempt the record does not name may still write

        record_file = f"{ctx.config.get('records', 'records')}/{record.job}.yaml"
        refuse_while_unrecorded_attempts_run(read_json(ctx.inputs["chain"]), record_file)
    store = open_store(record.store)
    ckpts, exports = record.layout["ckpts"].strip("/"), record.layout["exports"].strip("/")
    keys: dict[str, int] = {}
    for prefix in (ckpts, exports):
        keys.update((info.key, info.size) for info in store.list(prefix))
    txt_key = f"{ckpts}/{LATEST_TXT}"
    latest_text = store.read_bytes(txt_key).decode("utf-8", "replace") if txt_key in keys else None
    contents = {key: store.read_bytes(key) for key in keys_to_read(keys, ckpts_prefix=ckpts, exports_prefix=exports)
                if key != txt_key and keys[key] <= MAX_SMALL_FILE}
    found = candidates_from_listing(keys, ckpts_prefix=ckpts, exports_prefix=exports, latest_step_text=latest_text,
                                    interval=record.checkpoint_interval, contents=contents)
    write_json(ctx.outputs["candidates"], {
        "status": "completed",
        "store": record.store,
        "ckpts": ckpts,
        "exports": exports,
        "latest_ckpt_global_step": parse_latest_step(latest_text, f"{record.store}/{txt_key}"),
        "interval": record.checkpoint_interval,
        "objects_listed": len(keys),
        "valid": [candidate.step for candidate in found if candidate.complete],
        "candidates": [candidate.to_json() for candidate in found],
    })


def select_checkpoint_step(ctx: StepContext) -> None:
    """`<job>/checkpoint/selected.json`: the record's rule applied to the complete candidates
    over metrics.csv. Without a rule the step is blocked with the list of valid candidates."""

    listing = read_json(ctx.inputs["candidates"])
    try:
        candidates = [Candidate.from_json(item) for item in listing["candidates"]]
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{ctx.inputs['candidates']}: not a candidates.json ({error!r})") from None
    settings = ctx.settings or {}
    rule = settings["rule"] if "rule" in settings else ctx.record.selection_rule
    behavior_break = (settings["behavior_break_step"] if "behavior_break_step" in settings
                      else ctx.record.behavior_break_step)
    rows = read_metrics_csv(ctx.inputs["metrics"])
    selected = select_checkpoint(candidates, rule, rows, behavior_break)
    chosen = next(candidate for candidate in candidates if candidate.step == selected["step"])
    write_json(ctx.outputs["selected"], {
        "status": "completed",
        "job": ctx.job,
        "store": listing.get("store"),
        **selected,
        "ema": None if selected["ema"] is None else {str(step): value for step, value in selected["ema"].items()},
        "keys": {source: chosen.keys.get(source, []) for source in chosen.complete_sources},
        "reasons": chosen.reasons,
    })
