"""Detection (pure: works on a listing): what a step directory holds, which files prove it and which
files consolidation needs (never optimizer states, extra_state or data.pt).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.layout import CONFIG_FILES, DEEPSPEED_EXPORT_JOB, INDEX_NAME, LEFTOVER_EXPORT_PREFIXES, MEGATRON_EXPORT_JOB, RANK_FILE, REMOTE_CODE_FILE, SHARD_NAME, SINGLE_WEIGHTS
from rlkeep.export.layout import TOKENIZER_FILES, TOKENIZER_REQUIREMENT, has_tokenizer


@dataclass(frozen=True)
class Detection:
    """What a step directory holds. ``root`` is the subdirectory holding the weights ("" = top)."""

    format: str
    root: str
    evidence: list[str]
    needed_files: list[str]
    consolidatable: bool
    reason: str
    source: str = "local"  # which listing: "export" | "ckpt" (choose_source), "local", "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clean_listing(files: Mapping[str, int]) -> dict[str, int]:
    cleaned: dict[str, int] = {}
    for path, size in files.items():
        parts = [part for part in PurePosixPath(str(path).replace("\\", "/")).parts if part not in ("/", ".")]
        if parts:
            cleaned["/".join(parts)] = int(size)
    return cleaned


def _excluded_because(path: str) -> str | None:
    for part in path.split("/")[:-1]:
        if part.startswith(LEFTOVER_EXPORT_PREFIXES):
            return "leftover of an interrupted HF export, never an export"
        if part == "critic":
            return "critic model, not the policy"
    return None


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _by_directory(files: Mapping[str, int]) -> dict[str, dict[str, int]]:
    grouped: dict[str, dict[str, int]] = {}
    for path, size in files.items():
        directory, _, name = path.rpartition("/")
        grouped.setdefault(directory, {})[name] = size
    return grouped


def _aux_files(directory: str, names: Mapping[str, int]) -> list[str]:
    """config, generation config, tokenizer and remote-code files present in one directory."""
    wanted = [name for name in names if name in CONFIG_FILES or name in TOKENIZER_FILES
              or REMOTE_CODE_FILE.fullmatch(name)]
    return sorted(_join(directory, name) for name in wanted)


def _aux_problems(directory: str, names: Mapping[str, int]) -> list[str]:
    problems = []
    if "config.json" not in names:
        problems.append(f"no {_join(directory, 'config.json')}")
    if not has_tokenizer(names):
        problems.append(f"no tokenizer in {directory or '.'}/ ({TOKENIZER_REQUIREMENT})")
    return problems


def _hf_candidate(directory: str, names: Mapping[str, int]) -> Detection | None:
    shards = {name: SHARD_NAME.fullmatch(name) for name in names}
    shards = {name: match for name, match in shards.items() if match}
    if SINGLE_WEIGHTS not in names and INDEX_NAME not in names and not shards:
        return None
    evidence: list[str] = []
    problems: list[str] = []
    if SINGLE_WEIGHTS in names:
        fmt, weight_files = "hf-single", [SINGLE_WEIGHTS]
        evidence.append(f"{_join(directory, SINGLE_WEIGHTS)} ({names[SINGLE_WEIGHTS]} bytes)")
        if INDEX_NAME in names or shards:
            evidence.append(f"{_join(directory, SINGLE_WEIGHTS)} takes precedence over the index/shards "
                            "beside it, as in transformers")
    else:
        fmt, weight_files = "hf-sharded", [INDEX_NAME]
        if INDEX_NAME in names:
            evidence.append(_join(directory, INDEX_NAME))
        else:
            problems.append(f"shards without {_join(directory, INDEX_NAME)}")
        totals = sorted({int(match.group(2)) for match in shards.values()})
        for total in totals:
            expected = {f"model-{k:05d}-of-{total:05d}.safetensors" for k in range(1, total + 1)}
            missing = sorted(expected - set(names))
            if missing:
                problems.append(f"missing shard {', '.join(_join(directory, m) for m in missing)}")
            else:
                weight_files += sorted(expected)
                evidence.append(f"{total} shards {_join(directory, f'model-*-of-{total:05d}.safetensors')}")
        if not totals:
            problems.append(f"{_join(directory, INDEX_NAME)} without any model-*-of-*.safetensors shard")
    for name in weight_files:
        if name != INDEX_NAME and names.get(name, 0) < 8:
            problems.append(f"{_join(directory, name)} is {names.get(name, 0)} bytes (truncated)")
    problems += _aux_problems(directory, names)
    needed = sorted(set(_join(directory, name) for name in weight_files) | set(_aux_files(directory, names)))
    return Detection(fmt, directory, evidence, needed, not problems,
                     "; ".join(problems) if problems else "complete HF export")


def _fsdp_candidate(directory: str, names: Mapping[str, int], grouped: Mapping[str, Mapping[str, int]],
                    files: Mapping[str, int]) -> Detection:
    ranks = [(int(m.group(1)), int(m.group(2)), name) for name in names if (m := RANK_FILE.fullmatch(name))]
    world_sizes = sorted({world for world, _, _ in ranks})
    evidence = [f"{len(ranks)} rank file(s) {_join(directory, 'model_world_size_*_rank_*.pt')}"]
    problems: list[str] = []
    if len(world_sizes) > 1:
        problems.append(f"rank files of several world sizes {world_sizes} in {directory or '.'}/")
    world = world_sizes[-1]
    present = {rank for w, rank, _ in ranks if w == world}
    missing = sorted(set(range(world)) - present)
    extra = sorted(present - set(range(world)))
    if missing:
        problems.append("missing rank file(s) " + ", ".join(
            _join(directory, f"model_world_size_{world}_rank_{r}.pt") for r in missing))
    if extra:
        problems.append(f"rank(s) {extra} outside world size {world}")
    if "fsdp_config.json" in names:
        evidence.append(f"{_join(directory, 'fsdp_config.json')} (world_size checked against {world} rank files)")
    else:
        evidence.append(f"no {_join(directory, 'fsdp_config.json')} (written by SkyRL since PR #124); "
                        f"world size {world} from the file names")
    aux_dir = _join(directory, "huggingface")
    aux_names = grouped.get(aux_dir, {})
    aux_problems = _aux_problems(aux_dir, aux_names)
    if aux_problems:
        problems.append("; ".join(aux_problems) + " (checkpoints before SkyRL PR #124 carry no HF config and "
                        "tokenizer; consolidate an HF export of this step or add them to huggingface/)")
    else:
        evidence.append(f"{aux_dir}/config.json and tokenizer")
    if any(path.startswith(_join(directory, "lora_adapter") + "/") for path in files):
        problems.append(f"{_join(directory, 'lora_adapter')}/ present: a LoRA run; merging adapters into the base "
                        "weights needs a merge job, rlkeep does not do it")
    needed = sorted([_join(directory, name) for w, _, name in ranks if w == world]
                    + ([_join(directory, "fsdp_config.json")] if "fsdp_config.json" in names else [])
                    + _aux_files(aux_dir, aux_names))
    return Detection("fsdp", directory, evidence, needed, not problems,
                     "; ".join(problems) if problems else "FSDP rank shards with HF config and tokenizer")


def _megatron_candidate(directory: str, names: Mapping[str, int]) -> Detection | None:
    distcp = sorted(name for name in names if name.endswith(".distcp"))
    if "metadata.json" not in names or not (distcp or ".metadata" in names or "common.pt" in names):
        return None
    evidence = [_join(directory, "metadata.json")]
    evidence += [_join(directory, name) for name in (".metadata", "common.pt") if name in names]
    if distcp:
        evidence.append(f"{len(distcp)} file(s) {_join(directory, '__*_*.distcp')}")
    return Detection("megatron", directory, evidence, [], False, MEGATRON_EXPORT_JOB)


_DEEPSPEED_STATES = re.compile(r"global_step\d+/(?:zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt")


def _deepspeed_candidate(files: Mapping[str, int]) -> Detection | None:
    for path in sorted(files):
        directory, _, tail = path.rpartition("/")
        parent, _, step_dir = directory.rpartition("/")
        if _DEEPSPEED_STATES.fullmatch(f"{step_dir}/{tail}"):
            evidence = [path]
            evidence += [p for p in (_join(parent, "latest"), _join(parent, "zero_to_fp32.py")) if p in files]
            return Detection("deepspeed", parent, evidence, [], False, DEEPSPEED_EXPORT_JOB)
    return None


def detect_format(files: Mapping[str, int]) -> Detection:
    """Detect the checkpoint format of one step directory from its listing (relative path -> size).

    A complete HF export wins; then FSDP rank shards; Megatron and DeepSpeed are recognised and
    refused with the export job they need. Nothing is downloaded or opened.
    """
    listing = _clean_listing(files)
    excluded = {path: why for path in listing if (why := _excluded_because(path))}
    usable = {path: size for path, size in listing.items() if path not in excluded}
    notes = sorted({f"ignored {path.rsplit('/', 1)[0]}/: {why}" for path, why in excluded.items()})
    grouped = _by_directory(usable)

    hf = [c for directory, names in sorted(grouped.items()) if (c := _hf_candidate(directory, names))]
    fsdp_dirs = [d for d, names in sorted(grouped.items()) if any(RANK_FILE.fullmatch(n) for n in names)]
    fsdp = [_fsdp_candidate(d, grouped[d], grouped, usable) for d in fsdp_dirs]
    megatron = [c for d, names in sorted(grouped.items()) if (c := _megatron_candidate(d, names))]
    deepspeed = _deepspeed_candidate(usable)

    def finish(detection: Detection, extra: Sequence[str] = ()) -> Detection:
        return replace(detection, evidence=detection.evidence + list(extra) + notes)

    complete_hf = [c for c in hf if c.consolidatable]
    if len(complete_hf) > 1:
        roots = ", ".join(f"{c.root or '.'}/" for c in complete_hf)
        return finish(Detection(complete_hf[0].format, complete_hf[0].root, [], [], False,
                                f"several complete HF weight folders ({roots}); name the one to export"))
    if complete_hf:
        return finish(complete_hf[0])
    incomplete = [f"incomplete HF export in {c.root or '.'}/: {c.reason}" for c in hf]
    if len(fsdp) > 1:
        roots = ", ".join(f"{c.root or '.'}/" for c in fsdp)
        return finish(Detection("fsdp", fsdp[0].root, [], [], False,
                                f"FSDP rank files in several folders ({roots}); name the one to export"), incomplete)
    if fsdp:
        return finish(fsdp[0], incomplete)
    if megatron:
        return finish(megatron[0], incomplete)
    if deepspeed:
        return finish(deepspeed, incomplete)
    if hf:
        return finish(hf[0])
    return finish(Detection("unknown", "", [f"{len(usable)} file(s) listed"], [], False,
                            "no HF safetensors export, FSDP rank shards (model_world_size_W_rank_R.pt), Megatron "
                            "dist-checkpoint or DeepSpeed checkpoint found"))


def choose_source(export_files: Mapping[str, int] | None, ckpt_files: Mapping[str, int] | None) -> Detection:
    """Prefer a complete HF export of the step; otherwise the training checkpoint of the step."""
    export = replace(detect_format(export_files), source="export") if export_files else None
    if export is not None and export.consolidatable and export.format.startswith("hf-"):
        return export
    if ckpt_files:
        checkpoint = replace(detect_format(ckpt_files), source="ckpt")
        why = ("no export of this step" if export is None
               else f"export not used ({export.format}): {export.reason}")
        return replace(checkpoint, evidence=checkpoint.evidence + [why])
    if export is not None:
        return replace(export, evidence=export.evidence + ["no checkpoint of this step listed"])
    return Detection("unknown", "", [], [], False, "neither an export nor a checkpoint of this step was listed",
                     source="none")


def list_files(directory: str | os.PathLike[str]) -> dict[str, int]:
    """Relative posix path -> size of every regular file under directory (the local listing)."""
    root = Path(directory)
    if not root.is_dir():
        raise RlkeepError(f"{root}: not a directory")
    listing: dict[str, int] = {}
    for base, _, names in os.walk(root):
        for name in names:
            path = Path(base) / name
            if path.is_file():
                listing[path.relative_to(root).as_posix()] = path.stat().st_size
    return listing
