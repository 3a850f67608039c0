"""Job records (`records/<job>.yaml`, docs/contract.md §3): load once, validate, never guess.

Every problem is reported as one message naming the file, the field and what was expected.
Nothing the runbook says must not be invented (namespace, base model, selection rule,
destinations) is ever defaulted: absent means "not applicable" or "stop and ask".
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from rlkeep.errors import RecordError
from rlkeep.readable import did_you_mean, plural
from rlkeep.kinds import DEFAULT_KIND, KIND_SECTIONS, KINDS, KindSpec, spec_for
from rlkeep.urls import join_url

# What a record's `scheduler:` asks of the record itself: the shape of its chain's job ids, each
# with the words a record error uses, and whether it must name a `cluster:`. Data here, so a record
# is checked without importing a scheduler (rlkeep.scheduler imports this module);
# tests/test_records.py keeps its keys equal to rlkeep.scheduler.SCHEDULERS and the schema's enum.
IRIS_JOB_ID = re.compile(r"^(/[A-Za-z0-9][A-Za-z0-9._-]*){2,}$")
SLURM_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


def expected_iris_job_id(job_id: str, user: str, scheduler: str) -> str | None:
    """None when job_id is an Iris job id in user's namespace; else what was expected."""
    user_prefix = f"/{user}/"
    if not IRIS_JOB_ID.fullmatch(job_id):
        return f"expected an Iris job id like {user_prefix}<job> (scheduler is {scheduler})"
    if not job_id.startswith(user_prefix):
        return f"expected an Iris job id in the user's namespace, starting with {user_prefix}"
    return None


def expected_slurm_job_id(job_id: str) -> str | None:
    """None when job_id is a SLURM job id or array task id; else what was expected."""
    if not SLURM_JOB_ID.fullmatch(job_id):
        return "expected a SLURM job id like 12345 or an array task like 12345_7 (scheduler is slurm)"
    return None


# {scheduler: (job_id, user) -> None when job_id has that scheduler's shape, else what was expected}
CHAIN_ID_CHECKS: dict[str, Callable[[str, str], str | None]] = {
    "iris": lambda job_id, user: expected_iris_job_id(job_id, user, "iris"),
    "none": lambda job_id, user: expected_iris_job_id(job_id, user, "none"),
    "slurm": lambda job_id, user: expected_slurm_job_id(job_id),
}
CLUSTER_REQUIRED = frozenset({"iris"})  # a record naming one of these schedulers must name its cluster

DEFAULT_LAYOUT = {"logs": "logs", "traces": "trace_jobs", "ckpts": "ckpts", "exports": "exports"}

_EXPECTED_BY_FIELD = {
    "job": "a name matching ^[A-Za-z0-9][A-Za-z0-9._-]*$ equal to the file stem",
    "user": "an Iris namespace matching ^[A-Za-z0-9][A-Za-z0-9._-]*$",
    "kind": "one of: " + ", ".join(KINDS) + " (default rl)",
    "scheduler": "one of: iris, slurm, none",
    "cluster": "an Iris cluster name such as cw-us-east-02a",
    "chain": "a list of Iris job ids like /<user>/<job> (scheduler iris or none) or SLURM job ids like 12345 "
             "or 12345_7 (scheduler slurm), oldest first",
    "chain_excludes": "a list of job ids, in the shape of the chain's, of jobs that look like attempts of this run "
                      "but are not (each once, none also in chain)",
    "store": "an absolute store URL: s3://bucket/prefix or file:///absolute/path",
    "archive.dest": "s3://bucket/prefix, file:///absolute/path or hf://datasets/<org>/<name>",
    "base_model": "a Hub model id like Qwen/Qwen3-8B",
    "publish.model": "a Hub repo id like org/name",
    "publish.traces": "a Hub dataset id like org/name",
    "tracker_url": "an http(s) URL",
    "checkpoint.rule.kind": "one of: ema_max, latest, step",
    "checkpoint.rule.min_step": "the declared warm-up: an integer step >= 1; earlier checkpoints are not eligible",
    "store_region": "the store bucket's region, e.g. us-east-02a (as the provider names it)",
    "archive.region": "the archive destination's region, e.g. us-east-02a (as the provider names it)",
    "register.url": "sqlite:///path or postgresql://...",
}


@dataclass(frozen=True)
class JobRecord:
    path: Path
    job: str
    user: str
    scheduler: str
    cluster: str | None
    chain: tuple[str, ...]
    store: str
    layout: dict[str, str]
    checkpoint_interval: int | None
    selection_rule: dict[str, Any] | None
    behavior_break_step: int | None
    tracker_url: str | None = None
    base_model: str | None = None
    publish: dict[str, Any] | None = None
    register: dict[str, Any] | None = None
    archive: dict[str, Any] | None = None
    kind: str = DEFAULT_KIND
    store_region: str | None = None  # declared; None: ask the store, else unknown (rlkeep.regions)
    chain_excludes: tuple[str, ...] = ()  # look-alikes the operator declared not to be attempts
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def attempts(self) -> list[str]:
        """Attempt slugs in chain order: the last component of each chain id."""
        return [attempt_slug(job_id) for job_id in self.chain]

    def store_url(self, component: str) -> str:
        """URL of a layout component under the run's store root (e.g. 'traces')."""
        return join_url(self.store, self.layout[component])

    def url_of(self, key: str) -> str:
        """URL of a key (or a prefix) under the run's store root, for messages and evidence."""
        return join_url(self.store, key)

    @property
    def spec(self) -> KindSpec:
        """The kind's component map (rlkeep.kinds): the trace tree, archive trees, record sections."""
        return spec_for(self.kind)

    def section(self, name: str) -> dict[str, Any] | None:
        value = self.raw.get(name)
        return dict(value) if isinstance(value, dict) else value


def attempt_slug(job_id: str) -> str:
    return job_id.rstrip("/").rsplit("/", 1)[-1]


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    text = resources.files("rlkeep").joinpath("schemas/record.schema.json").read_text()
    return json.loads(text)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    """Built once per process: planning validates every record of a campaign."""
    return jsonschema.Draft202012Validator(_schema())


# libyaml's safe loader where PyYAML was built with it (the wheels are): ~10x the pure-Python one
# on the records a campaign plans over; same types, same error marks.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _field_name(error: jsonschema.ValidationError) -> str:
    name = ""
    for item in error.absolute_path:
        name += f"[{item}]" if isinstance(item, int) else (f".{item}" if name else str(item))
    return name


def _describe(error: jsonschema.ValidationError, path: Path) -> str:
    field_name = _field_name(error)
    if error.validator == "required":
        missing = error.message.split("'")[1]
        name = f"{field_name}.{missing}" if field_name else missing
        return f"{path}: field '{name}' is missing; expected {_expected(name)}"
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        where = f"'{field_name}'" if field_name else "the top level"
        known = sorted(error.schema.get("properties", {}))
        return (f"{path}: unknown key {', '.join(repr(u) for u in unknown)} in {where}"
                f"{_suggestions(unknown, known)}; expected only: {', '.join(known)}")
    generic = field_name.split("[")[0]
    got = json.dumps(error.instance) if not isinstance(error.instance, dict) else "a mapping"
    return f"{path}: field '{field_name}' is {got}; expected {_expected(generic, error)}"


def _suggestions(unknown: list[str], known: list[str]) -> str:
    """`(did you mean 'chain'?)` for each unknown key within two edits of a known one."""
    guesses = [f"{name!r} for {key!r}" if len(unknown) > 1 else repr(name)
               for key in unknown if (name := did_you_mean(str(key), known))]
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


def _expected(name: str, error: jsonschema.ValidationError | None = None) -> str:
    if name in _EXPECTED_BY_FIELD:
        return _EXPECTED_BY_FIELD[name]
    if error is not None:
        if error.validator == "type":
            return f"a value of type {error.validator_value}"
        if error.validator == "enum":
            return "one of: " + ", ".join(map(str, error.validator_value))
        if error.validator in {"minimum", "exclusiveMinimum", "maximum"}:
            return f"a number ({error.message})"
        if error.validator == "pattern":
            return f"a string matching {error.validator_value}"
        return error.message
    return "a value (see docs/contract.md §3)"


def validate_record_data(data: Any, path: Path) -> JobRecord:
    """Validate parsed YAML; raise RecordError naming the file and the first bad field."""
    if data is None:
        raise RecordError(f"{path}: the record is empty; expected a YAML mapping of record fields (job, scheduler, "
                          "chain, ...; see docs/contract.md §3)")
    if not isinstance(data, dict):
        raise RecordError(f"{path}: expected a YAML mapping of record fields, got {type(data).__name__}")
    errors = sorted(_validator().iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        raise RecordError(_describe(errors[0], path))

    expected_stem = path.name.removesuffix(".yaml").removesuffix(".yml")
    if data["job"] != expected_stem:
        raise RecordError(
            f"{path}: field 'job' is {data['job']!r} but the file is named {path.name}; "
            f"expected job: {expected_stem}"
        )
    if data["scheduler"] in CLUSTER_REQUIRED and not data.get("cluster"):
        raise RecordError(f"{path}: field 'cluster' is missing; expected an Iris cluster name when scheduler is "
                          f"{data['scheduler']}")
    expected_id = CHAIN_ID_CHECKS[data["scheduler"]]
    _check_chain(data, expected_id, path)
    _check_chain_excludes(data, expected_id, path)
    spec = spec_for(data.get("kind"))
    _check_kind_sections(data, spec, path)

    checkpoint = data.get("checkpoint") or {}
    rule = checkpoint.get("rule")
    if rule is not None:
        kind = rule["kind"]
        if kind == "ema_max":
            for needed in ("metric", "alpha"):
                if needed not in rule:
                    raise RecordError(f"{path}: field 'checkpoint.rule.{needed}' is missing; expected it for rule kind ema_max")
        if kind == "step" and "step" not in rule:
            raise RecordError(f"{path}: field 'checkpoint.rule.step' is missing; expected the step number for rule kind step")
        allowed = {"kind", "min_step"} | {"ema_max": {"metric", "alpha"}, "latest": set(), "step": {"step"}}[kind]
        extra = set(rule) - allowed
        if extra:
            raise RecordError(f"{path}: unknown key {', '.join(map(repr, sorted(extra)))} in 'checkpoint.rule' for kind "
                              f"{kind}{_suggestions(sorted(extra), sorted(allowed))}; expected only: "
                              f"{', '.join(sorted(allowed))}")
        if kind == "step" and "min_step" in rule and rule["step"] < rule["min_step"]:
            raise RecordError(f"{path}: field 'checkpoint.rule.step' is {rule['step']}, before the declared warm-up "
                              f"checkpoint.rule.min_step {rule['min_step']}; expected a step at or after min_step")

    register = data.get("register")
    if register and register.get("authorized") and not register.get("url"):
        raise RecordError(f"{path}: field 'register.url' is missing; expected the registry URL when register.authorized is true")
    _check_base_model(data, path)

    layout = _layout(data, spec, path)
    return JobRecord(
        path=path,
        job=data["job"],
        user=data["user"],
        scheduler=data["scheduler"],
        cluster=data.get("cluster"),
        chain=tuple(data["chain"]),
        store=data["store"].rstrip("/"),
        layout=layout,
        checkpoint_interval=checkpoint.get("interval"),
        selection_rule=dict(rule) if rule is not None else None,
        behavior_break_step=checkpoint.get("behavior_break_step"),
        tracker_url=data.get("tracker_url"),
        base_model=data.get("base_model"),
        publish=dict(data["publish"]) if data.get("publish") else None,
        register=dict(register) if register else None,
        archive=dict(data["archive"]) if data.get("archive") else None,
        kind=spec.name,
        store_region=data.get("store_region"),
        chain_excludes=tuple(data.get("chain_excludes") or ()),
        raw=data,
    )


IdCheck = Callable[[str, str], str | None]  # a value of CHAIN_ID_CHECKS


def _check_chain(data: dict[str, Any], expected_id: IdCheck, path: Path) -> None:
    """Job ids in the shape the record's scheduler expects (CHAIN_ID_CHECKS); no repeats."""
    for index, job_id in enumerate(data["chain"]):
        expected = expected_id(job_id, data["user"])
        if expected is not None:
            raise RecordError(f"{path}: field 'chain[{index}]' is {job_id!r}; {expected}")
    slugs = [attempt_slug(job_id) for job_id in data["chain"]]
    if len(set(slugs)) != len(slugs):
        raise RecordError(f"{path}: field 'chain' names two attempts with the same last component; expected distinct attempts")
    if len(set(data["chain"])) != len(data["chain"]):
        raise RecordError(f"{path}: field 'chain' lists a job id twice; expected each attempt once")


def _check_chain_excludes(data: dict[str, Any], expected_id: IdCheck, path: Path) -> None:
    """Declared non-attempts: shaped like the chain's ids, and never one the chain names (both at once
    would leave rlkeep to guess which the operator meant)."""
    for index, job_id in enumerate(data.get("chain_excludes") or ()):
        if job_id in data["chain"]:
            raise RecordError(f"{path}: field 'chain_excludes[{index}]' is {job_id!r}, which 'chain' also names; "
                              "expected a job that is not an attempt of this run: remove it from one of the two")
        expected = expected_id(job_id, data["user"])
        if expected is not None:
            raise RecordError(f"{path}: field 'chain_excludes[{index}]' is {job_id!r}; {expected}")


def _check_kind_sections(data: dict[str, Any], spec: KindSpec, path: Path) -> None:
    """Sections that only some kinds have; publish destinations the kind can have; rl's required ones."""
    for section in KIND_SECTIONS:
        if section in data and section not in spec.record_sections:
            raise RecordError(f"{path}: field '{section}' does not apply to a {spec.name} run ({spec.description}); "
                              f"expected no {section} section for kind {spec.name}")
    if "checkpoint" in spec.record_sections and "checkpoint" not in data:
        raise RecordError(f"{path}: field 'checkpoint' is missing; expected checkpoint.interval for kind {spec.name}")
    publish = data.get("publish")
    if publish:
        extra = sorted(set(publish) - spec.publish_fields - {"private"})
        if extra:
            raise RecordError(f"{path}: field 'publish.{extra[0]}' does not apply to a {spec.name} run; expected only "
                              f"{', '.join(f'publish.{f}' for f in sorted(spec.publish_fields))} for kind {spec.name}")
        for needed in sorted(spec.publish_fields - set(publish)):
            raise RecordError(f"{path}: field 'publish.{needed}' is missing; expected {_expected(f'publish.{needed}')} "
                              f"(kind {spec.name} publishes {', '.join(sorted(spec.publish_fields))})")
    if spec.trace_tree is None and "traces" in (data.get("layout") or {}):
        raise RecordError(f"{path}: field 'layout.traces' does not apply to a {spec.name} run (it has no trace tree); "
                          f"expected no layout.traces for kind {spec.name}")


def _check_base_model(data: dict[str, Any], path: Path) -> None:
    """Publishing a model and registering one state its exact base model (contract §3: publication
    and registration need it; the runbook: never invent one), so a record that asks for either names it."""
    if "base_model" in data:
        return
    asks = [what for what, asked in (("publish.model names a model to publish", "model" in (data.get("publish") or {})),
                                     ("register.authorized is true", (data.get("register") or {}).get("authorized")))
            if asked]
    if asks:
        raise RecordError(f"{path}: field 'base_model' is missing; expected {_expected('base_model')} because "
                          f"{' and '.join(asks)} (rlkeep never guesses a base model)")


def _layout(data: dict[str, Any], spec: KindSpec, path: Path) -> dict[str, str]:
    """Layout defaults of the kind; a kind without a trace tree has no `traces` entry."""
    layout = dict(DEFAULT_LAYOUT)
    if spec.trace_tree is None:
        layout.pop("traces")
    else:
        layout["traces"] = spec.trace_tree
    layout.update(data.get("layout") or {})
    return layout


class RecordRefused(RecordError):
    """A record that reads as YAML but that validation refuses (a field, a key, a value)."""


def load_record(path: str | Path) -> JobRecord:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"{path}: no such job record; expected records/<job>.yaml under the data root") from None
    except UnicodeDecodeError as error:
        raise RecordError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise RecordError(f"{path}: not valid YAML{where}: {getattr(error, 'problem', error)}") from None
    try:
        return validate_record_data(data, path)
    except RecordError as error:
        raise RecordRefused(str(error)) from None


def record_path(records_dir: str | Path, job: str) -> Path:
    return Path(records_dir) / f"{job}.yaml"


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep validate-record",
                                     description="Validate job records, each alone; exit 1 if any is refused.")
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    refused = 0
    for path in args.paths:
        try:
            record = load_record(path)
        except RecordError as error:
            refused += 1
            print(f"rlkeep: {error}", file=sys.stderr)
            continue
        print(f"{path}: ok ({record.job}, {len(record.chain)} attempts, scheduler {record.scheduler})")
    if refused:
        print(f"rlkeep: {refused} of {plural(len(args.paths), 'record')} refused", file=sys.stderr)
    return 1 if refused else 0
