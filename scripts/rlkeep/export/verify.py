"""Verification of a flat model folder: one function per check, every problem reported at once."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkeep.errors import RlkeepError
from rlkeep.export.layout import DTYPE_BYTES, INDEX_NAME, SHARD_NAME, SINGLE_WEIGHTS, DTYPE_ALIASES
from rlkeep.export.safetensors_header import numel, read_safetensors_header
from rlkeep.export.sources import few, read_json_object
from rlkeep.export.writer import hash_pool
from rlkeep.hashing import sha256_file
from rlkeep.export.layout import TOKENIZER_FILES, TOKENIZER_REQUIREMENT, has_tokenizer


Expected = Mapping[str, tuple[str, Sequence[int]]]


def verify_model(model_dir: str | os.PathLike[str], *, expected: Expected | None = None) -> dict[str, Any]:
    """Check a flat model folder; raise RlkeepError listing every problem, else return the evidence.

    expected: tensor name -> (dtype, shape) of the source checkpoint; dtype as safetensors names it
    ("BF16") or a torch/numpy dtype.
    """
    with hash_pool() as pool:
        return verify_folder(Path(model_dir), expected, {}, pool)


@dataclass
class _Findings:
    """What the checks of one model folder found: problems (all reported at once) and passed checks."""

    model_dir: Path
    problems: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)


@dataclass
class _WeightLayout:
    weights: list[str]
    index_map: dict[str, str] | None = None
    declared_total: Any = None


@dataclass
class _Tensors:
    found: dict[str, tuple[str, tuple[int, ...], str]]  # name -> (dtype, shape, weight file)
    data_bytes: int
    headers_ok: bool

    @property
    def parameter_count(self) -> int:
        return sum(numel(shape) for _, shape, _ in self.found.values())


def verify_folder(model_dir: Path, expected: Expected | None, digests: Mapping[str, Future[str]],
            pool: ThreadPoolExecutor) -> dict[str, Any]:
    """verify_model's work; digests: files already being hashed by the writer (consolidation)."""
    if not model_dir.is_dir():
        raise RlkeepError(f"{model_dir}: not a directory")
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    pending = {p.relative_to(model_dir).as_posix(): digests.get(p.relative_to(model_dir).as_posix())
               or pool.submit(sha256_file, p) for p in files}
    findings = _Findings(model_dir)
    top = {p.name for p in model_dir.iterdir() if p.is_file()}
    layout = _check_weight_layout(findings, top, files)
    tensors = _check_headers(findings, layout.weights)
    if layout.index_map is not None and tensors.headers_ok:
        _check_index_coverage(findings, layout, tensors)
    if expected is not None and tensors.headers_ok:
        _check_against_source(findings, expected, tensors)
    architectures = _check_config(findings)
    tokenizer_files = _check_tokenizer(findings, top)
    _check_other_json(findings, top)
    file_report = _collect_digests(findings, pending)
    problems = findings.problems
    if problems:
        raise RlkeepError(f"{model_dir} is not a verified flat model ({len(problems)} problem"
                          f"{'s' if len(problems) != 1 else ''}):\n  - " + "\n  - ".join(problems))
    dtypes: dict[str, int] = {}
    for dtype, _, _ in tensors.found.values():
        dtypes[dtype] = dtypes.get(dtype, 0) + 1
    findings.checks.append("sha256 and size of every file")
    return {
        "dir": str(model_dir),
        "weights": layout.weights,
        "sharded": layout.index_map is not None,
        "tensor_count": len(tensors.found),
        "parameter_count": tensors.parameter_count,
        "total_size": tensors.data_bytes,
        "dtypes": dtypes,
        "architectures": architectures,
        "tokenizer_files": tokenizer_files,
        "files": file_report,
        "checks": findings.checks,
        "compared_with_source": expected is not None,
    }


def _check_weight_layout(findings: _Findings, top: set[str], files: Sequence[Path]) -> _WeightLayout:
    """One layout at the top level: model.safetensors alone, or an index and its shards."""
    model_dir, problems = findings.model_dir, findings.problems
    if SINGLE_WEIGHTS in top and INDEX_NAME in top:
        problems.append(f"{model_dir}: both {SINGLE_WEIGHTS} and {INDEX_NAME}; a flat model has one layout")
    if SINGLE_WEIGHTS in top:
        stray = sorted(n for n in top if SHARD_NAME.fullmatch(n))
        if stray:
            problems.append(f"{model_dir}: stray shard file(s) beside {SINGLE_WEIGHTS}: {few(stray)}")
        return _WeightLayout([SINGLE_WEIGHTS])
    if INDEX_NAME in top:
        index_map, declared_total, weights = _check_index(model_dir, top, problems)
        return _WeightLayout(weights, index_map, declared_total)
    nested = sorted({p.relative_to(model_dir).parent.as_posix() for p in files if p.suffix == ".safetensors"})
    if nested:
        problems.append(f"{model_dir}: no top-level weights; safetensors are nested under "
                        f"{', '.join(d + '/' for d in nested)}: an intermediate, not the flat model "
                        "(run `rlkeep consolidate` to flatten it)")
    else:
        problems.append(f"{model_dir}: no {SINGLE_WEIGHTS} or {INDEX_NAME}")
    return _WeightLayout([])


def _check_headers(findings: _Findings, weights: Sequence[str]) -> _Tensors:
    """Every weight file's header parses, the safetensors reader opens it, no tensor is in two files."""
    tensors = _Tensors(found={}, data_bytes=0, headers_ok=bool(weights))
    for name in weights:
        path = findings.model_dir / name
        if not path.is_file():
            continue  # reported by the index check
        try:
            header = read_safetensors_header(path)
        except RlkeepError as error:
            findings.problems.append(str(error))
            tensors.headers_ok = False
            continue
        reader_problem = _reference_reader_problem(path)
        if reader_problem:
            findings.problems.append(reader_problem)
            tensors.headers_ok = False
        for entry in header.tensors:
            if entry.name in tensors.found:
                findings.problems.append(f"{path}: tensor {entry.name!r} is also in {tensors.found[entry.name][2]} "
                                         "(duplicated across shards)")
            else:
                tensors.found[entry.name] = (entry.dtype, entry.shape, name)
        tensors.data_bytes += header.data_bytes
    if tensors.headers_ok:
        findings.checks.append("every weight file's header parses; offsets contiguous, in bounds, covering the "
                               "file; the safetensors reader opens it")
    return tensors


def _check_index_coverage(findings: _Findings, layout: _WeightLayout, tensors: _Tensors) -> None:
    """The index maps every tensor to the shard holding it, and total_size is the data bytes."""
    index_path = findings.model_dir / INDEX_NAME
    index_map, declared_total, found = layout.index_map or {}, layout.declared_total, tensors.found
    missing = sorted(t for t in index_map if t not in found)
    misplaced = sorted(t for t, (_, _, shard) in found.items() if t in index_map and index_map[t] != shard)
    unlisted = sorted(t for t in found if t not in index_map)
    for label, names in (("named by the index but in no shard", missing),
                         ("in a different shard than the index says", misplaced),
                         ("in a shard but not in the index", unlisted)):
        if names:
            findings.problems.append(f"{index_path}: tensor(s) {label}: {few(names)}")
    if declared_total != tensors.data_bytes:
        if declared_total == tensors.parameter_count:
            findings.problems.append(f"{index_path}: metadata.total_size {declared_total} is the parameter count, "
                                     f"not the {tensors.data_bytes} bytes of tensor data (verl's merge bug)")
        else:
            findings.problems.append(f"{index_path}: metadata.total_size {declared_total!r} is not the "
                                     f"{tensors.data_bytes} bytes of tensor data")
    if not (missing or misplaced or unlisted) and declared_total == tensors.data_bytes:
        findings.checks.append("index: every tensor mapped to the shard holding it; total_size is the data bytes")


def _check_against_source(findings: _Findings, expected: Expected, tensors: _Tensors) -> None:
    """Tensor names, dtypes and shapes are the source checkpoint's."""
    model_dir, found = findings.model_dir, tensors.found
    wanted = {name: (_dtype_name(dtype), tuple(shape)) for name, (dtype, shape) in expected.items()}
    missing = sorted(set(wanted) - set(found))
    extra = sorted(set(found) - set(wanted))
    differ = sorted(f"{n} is {found[n][0]}{list(found[n][1])}, source {wanted[n][0]}{list(wanted[n][1])}"
                    for n in set(wanted) & set(found)
                    if (found[n][0], tuple(found[n][1])) != (wanted[n][0], tuple(wanted[n][1])))
    if missing:
        findings.problems.append(f"{model_dir}: tensor(s) of the source missing from the model: {few(missing)}")
    if extra:
        findings.problems.append(f"{model_dir}: tensor(s) not in the source: {few(extra)}")
    if differ:
        findings.problems.append(f"{model_dir}: dtype/shape differ from the source: {'; '.join(differ[:8])}")
    if not (missing or extra or differ):
        findings.checks.append(f"all {len(wanted)} tensor names, dtypes and shapes match the source")


def _check_config(findings: _Findings) -> list[str]:
    """config.json parses and names the model's architectures; returns them."""
    config_path = findings.model_dir / "config.json"
    if not config_path.is_file():
        findings.problems.append(f"{config_path}: missing")
    elif problem := architectures_problem(config_path):
        findings.problems.append(problem)
    else:
        architectures = read_json_object(config_path)["architectures"]
        findings.checks.append(f"config.json parses and names architectures {architectures}")
        return architectures
    return []


def _check_tokenizer(findings: _Findings, top: set[str]) -> list[str]:
    """A loadable vocabulary is present (rlkeep.export.layout.has_tokenizer); returns the tokenizer files."""
    tokenizer_files = sorted(n for n in top if n in TOKENIZER_FILES)
    if has_tokenizer(top):
        findings.checks.append(f"tokenizer present: {', '.join(tokenizer_files)}")
    else:
        findings.problems.append(f"{findings.model_dir}: no tokenizer ({TOKENIZER_REQUIREMENT})")
    return tokenizer_files


def _check_other_json(findings: _Findings, top: set[str]) -> None:
    """Every other top-level JSON file (generation config, tokenizer config, ...) parses."""
    for name in sorted(n for n in top if n.endswith(".json") and n not in (INDEX_NAME, "config.json")):
        if problem := json_problem(findings.model_dir / name):
            findings.problems.append(problem)


def _collect_digests(findings: _Findings, pending: Mapping[str, Future[str]]) -> list[dict[str, Any]]:
    """Path, size and sha256 of every file (hashed meanwhile by the pool)."""
    file_report = []
    for relative, future in pending.items():
        try:
            digest = future.result()
        except (OSError, RlkeepError) as error:
            findings.problems.append(f"{findings.model_dir / relative}: cannot be hashed: {error}")
            continue
        file_report.append({"path": relative, "size": (findings.model_dir / relative).stat().st_size,
                            "sha256": digest})
    return file_report


def _dtype_name(dtype: Any) -> str:
    """A safetensors dtype name from itself or a torch/numpy dtype (torch.bfloat16 -> BF16)."""
    text = str(dtype)
    if text in DTYPE_BYTES:
        return text
    return DTYPE_ALIASES.get(text.removeprefix("torch.").removeprefix("numpy."), text)


def _check_index(model_dir: Path, top: set[str], problems: list[str]) -> tuple[dict[str, str] | None, Any, list[str]]:
    index_path = model_dir / INDEX_NAME
    try:
        index = read_json_object(index_path)
    except RlkeepError as error:
        problems.append(str(error))
        return None, None, []
    metadata, weight_map = index.get("metadata"), index.get("weight_map")
    if not isinstance(metadata, dict):
        problems.append(f"{index_path}: no 'metadata' object (transformers refuses such an index)")
        metadata = {}
    total = metadata.get("total_size")
    if type(total) is not int:
        problems.append(f"{index_path}: metadata.total_size {total!r} is not an integer byte count")
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        problems.append(f"{index_path}: 'weight_map' must map tensor names to shard file names")
        return None, total, []
    shards = sorted(set(weight_map.values()))
    for name in shards:
        if "/" in name:
            problems.append(f"{index_path}: shard {name!r} is nested, not beside the index")
        elif not (model_dir / name).is_file():
            problems.append(f"{model_dir / name}: shard named by the index is missing")
    stray = sorted((n for n in top if SHARD_NAME.fullmatch(n) and n not in shards))
    if stray:
        problems.append(f"{index_path}: shard file(s) not named by the index: {few(stray)}")
    if list(weight_map) != sorted(weight_map):
        problems.append(f"{index_path}: weight_map is not sorted (transformers writes sort_keys=True)")
    return weight_map, total, [s for s in shards if "/" not in s and (model_dir / s).is_file()]


def _reference_reader_problem(path: Path) -> str | None:
    """Second opinion from the safetensors library itself (it mmaps; reads no tensor data)."""
    try:
        from safetensors import safe_open
    except ImportError:
        return None
    try:
        with safe_open(str(path), framework="numpy") as handle:
            list(handle.keys())
    except Exception as error:  # SafetensorError is not exported under a stable name
        return f"{path}: the safetensors reader refuses it: {error}"
    return None


def architectures_problem(config_path: Path) -> str | None:
    try:
        value = read_json_object(config_path).get("architectures")
    except RlkeepError as error:
        return str(error)
    if isinstance(value, list) and value and all(isinstance(a, str) and a for a in value):
        return None
    return f"{config_path}: field 'architectures' must be a non-empty list of class names, found {value!r}"


def json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{path}: not valid JSON: {error}"
    return None
