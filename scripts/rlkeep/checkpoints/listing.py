"""Saved checkpoints of a run and which of them are complete, from the store listing.

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
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlkeep.errors import RlkeepError

SOURCE_ORDER: tuple[str, ...] = ("fsdp", "hf_export", "megatron", "deepspeed", "unknown")
LATEST_TXT = "latest_ckpt_global_step.txt"
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
    return sorted((c for c in map(as_candidate, candidates) if c.complete), key=lambda c: c.step)


def as_candidate(candidate: Candidate | Mapping[str, Any]) -> Candidate:
    return candidate if isinstance(candidate, Candidate) else Candidate.from_json(candidate)
