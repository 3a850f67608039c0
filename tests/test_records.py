"""Job records: every bad-record case fails before any work, naming file, field and expectation."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlkeep.errors import RecordError
from rlkeep.records import load_record

GOOD = {
    "job": "rl-qwen3-swe-v3",
    "user": "benjaminfeuer",
    "scheduler": "iris",
    "cluster": "cw-us-east-02a",
    "chain": ["/benjaminfeuer/rl-qwen3-swe-v3", "/benjaminfeuer/rl-qwen3-swe-v3-r1"],
    "store": "s3://marin-us-east-02a/iris/rl-qwen3-swe-v3",
    "tracker_url": "https://wandb.ai/team/project/runs/abc123",
    "base_model": "Qwen/Qwen3-8B",
    "checkpoint": {"interval": 20, "rule": {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 0.3333},
                   "behavior_break_step": 140},
    "publish": {"model": "laion/rl-qwen3-swe-v3", "traces": "laion/rl-qwen3-swe-v3-traces", "private": True},
    "register": {"authorized": False, "url": "sqlite:///registry.db"},
    "archive": {"dest": "s3://bucket/archives/"},
}


def write(tmp_path: Path, data: object, name: str = "rl-qwen3-swe-v3") -> Path:
    path = tmp_path / "records" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_contract_example_loads_with_layout_defaults(tmp_path: Path) -> None:
    record = load_record(write(tmp_path, GOOD))
    assert record.attempts == ["rl-qwen3-swe-v3", "rl-qwen3-swe-v3-r1"]
    assert record.layout == {"logs": "logs", "traces": "trace_jobs", "ckpts": "ckpts", "exports": "exports"}
    assert record.store_url("traces") == "s3://marin-us-east-02a/iris/rl-qwen3-swe-v3/trace_jobs"
    assert record.selection_rule == {"kind": "ema_max", "metric": "reward/avg_raw_reward", "alpha": 0.3333}


def test_nothing_is_invented_when_optional_sections_are_absent(tmp_path: Path) -> None:
    minimal = {k: GOOD[k] for k in ("job", "user", "scheduler", "cluster", "chain", "store")}
    minimal["checkpoint"] = {"interval": 20}
    record = load_record(write(tmp_path, minimal))
    assert record.base_model is None
    assert record.selection_rule is None
    assert record.publish is None and record.register is None and record.archive is None


def mutate(path: str, value: object) -> dict:
    data = copy.deepcopy(GOOD)
    target = data
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[key]
    if value is KeyError:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return data


BAD_CASES = [
    ("missing field", mutate("store", KeyError), "field 'store' is missing", "s3://bucket/prefix"),
    ("missing interval", mutate("checkpoint.interval", KeyError), "field 'checkpoint.interval' is missing", "expected"),
    ("unknown key", {**GOOD, "namespace": "laion"}, "unknown key 'namespace'", "expected only"),
    ("unknown nested key", mutate("publish.destination", "x"), "unknown key 'destination' in 'publish'", "expected only"),
    ("bad job id", mutate("chain", ["/benjaminfeuer/rl-qwen3-swe-v3", "rl-qwen3-swe-v3-r1"]), "field 'chain[1]'", "Iris job ids"),
    ("job id outside the user", mutate("chain", ["/someoneelse/rl-qwen3-swe-v3"]), "field 'chain[0]'", "starting with /benjaminfeuer/"),
    ("relative store URL", mutate("store", "iris/rl-qwen3-swe-v3"), "field 'store'", "absolute store URL"),
    ("unknown rule kind", mutate("checkpoint.rule", {"kind": "best"}), "field 'checkpoint.rule.kind'", "ema_max, latest, step"),
    ("iris without cluster", mutate("cluster", KeyError), "field 'cluster' is missing", "Iris cluster name"),
    ("ema without metric", mutate("checkpoint.rule", {"kind": "ema_max", "alpha": 0.3}), "checkpoint.rule.metric", "ema_max"),
    ("step without step", mutate("checkpoint.rule", {"kind": "step"}), "checkpoint.rule.step", "step number"),
    ("shell metacharacters in job", mutate("job", "rl;rm -rf /"), "field 'job'", "file stem"),
    ("dotdot layout", mutate("layout", {"traces": "../other"}), "field 'layout.traces'", "matching"),
    ("authorized without url", mutate("register", {"authorized": True}), "field 'register.url' is missing", "registry URL"),
    ("interval zero", mutate("checkpoint.interval", 0), "field 'checkpoint.interval'", "minimum"),
    ("scheduler unknown", mutate("scheduler", "pbs"), "field 'scheduler'", "iris, slurm, none"),
]


@pytest.mark.parametrize("label,data,field_text,expected_text", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_record_names_file_field_and_expectation(tmp_path: Path, label: str, data: dict, field_text: str,
                                                     expected_text: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(RecordError) as caught:
        load_record(path)
    message = str(caught.value)
    assert str(path) in message
    assert field_text in message
    assert expected_text in message


def test_job_name_must_match_file_stem(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, name="other-name")
    with pytest.raises(RecordError, match=r"other-name.yaml: field 'job' is 'rl-qwen3-swe-v3' but the file is named other-name.yaml"):
        load_record(path)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "job: x\nchain: [unclosed\n")
    with pytest.raises(RecordError, match=r"not valid YAML at line \d+"):
        load_record(path)


def test_missing_record_file(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no such job record"):
        load_record(tmp_path / "records" / "nope.yaml")


def test_non_mapping_record(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="expected a YAML mapping"):
        load_record(write(tmp_path, "- a\n- b\n"))


def test_warm_up_min_step_is_optional_never_defaulted_and_checked(tmp_path: Path) -> None:
    assert "min_step" not in load_record(write(tmp_path, GOOD)).selection_rule
    data = copy.deepcopy(GOOD)
    data["checkpoint"]["rule"]["min_step"] = 40
    assert load_record(write(tmp_path, data)).selection_rule["min_step"] == 40
    data["checkpoint"]["rule"] = {"kind": "latest", "min_step": 0}
    with pytest.raises(RecordError, match=r"field 'checkpoint.rule.min_step' is 0; expected the declared warm-up"):
        load_record(write(tmp_path, data))
    data["checkpoint"]["rule"] = {"kind": "step", "step": 20, "min_step": 40}
    with pytest.raises(RecordError, match=r"rl-qwen3-swe-v3.yaml: field 'checkpoint.rule.step' is 20, before the "
                                          r"declared warm-up checkpoint.rule.min_step 40"):
        load_record(write(tmp_path, data))


SLURM_RECORD = {**{k: GOOD[k] for k in ("job", "user", "store", "checkpoint")}, "scheduler": "slurm",
                "chain": ["4815101", "4815170_3"]}
CHAIN_ID_CASES = [
    ("slurm record with an Iris id", {**SLURM_RECORD, "chain": ["4815101", "/benjaminfeuer/rl-qwen3-swe-v3"]},
     "field 'chain[1]' is '/benjaminfeuer/rl-qwen3-swe-v3'", "expected a SLURM job id like 12345"),
    ("none record with a SLURM id", {**mutate("scheduler", "none"), "chain": ["4815101"]},
     "field 'chain[0]' is '4815101'", "expected an Iris job id like /benjaminfeuer/<job> (scheduler is none)"),
    ("iris record with a SLURM id", mutate("chain", ["/benjaminfeuer/rl-qwen3-swe-v3", "4815101"]),
     "field 'chain[1]' is '4815101'", "expected an Iris job id like /benjaminfeuer/<job> (scheduler is iris)"),
    ("none record outside the user", {**mutate("scheduler", "none"), "chain": ["/someoneelse/rl-qwen3-swe-v3"]},
     "field 'chain[0]' is '/someoneelse/rl-qwen3-swe-v3'", "in the user's namespace, starting with /benjaminfeuer/"),
]


@pytest.mark.parametrize("label,data,field_text,expected_text", CHAIN_ID_CASES, ids=[c[0] for c in CHAIN_ID_CASES])
def test_a_chain_id_of_the_wrong_shape_names_the_file_the_field_and_the_schedulers_shape(
        tmp_path: Path, label: str, data: dict, field_text: str, expected_text: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(RecordError) as caught:
        load_record(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field_text}; expected"), message
    assert expected_text in message


def test_each_scheduler_has_its_job_id_shape_and_the_record_reads_it_without_a_scheduler() -> None:
    """rlkeep.records.CHAIN_ID_CHECKS holds one check per scheduler a record may name (the schema's enum, SCHEDULERS),
    and never compares a scheduler's name inside a check."""
    from rlkeep.records import CHAIN_ID_CHECKS, CLUSTER_REQUIRED
    from rlkeep.scheduler import SCHEDULERS

    enum = json.loads((Path(__file__).resolve().parents[1] / "scripts" / "rlkeep" / "schemas" / "record.schema.json").read_text())["properties"][
        "scheduler"]["enum"]
    own = {"iris": "/demo/rl-r1", "none": "/demo/rl-r1", "slurm": "4815170_3"}
    foreign = {"iris": "4815170_3", "none": "rl-r1", "slurm": "/demo/rl-r1"}
    assert set(SCHEDULERS) == set(own) == set(CHAIN_ID_CHECKS) == set(enum)
    assert CLUSTER_REQUIRED <= set(CHAIN_ID_CHECKS)
    for name, expected_id in CHAIN_ID_CHECKS.items():
        assert expected_id(own[name], "demo") is None, name
        expected = expected_id(foreign[name], "demo")
        assert expected is not None and expected.startswith("expected ") and f"scheduler is {name}" in expected
    assert CHAIN_ID_CHECKS["iris"]("/other/rl", "demo") == (
        "expected an Iris job id in the user's namespace, starting with /demo/")


def test_only_a_scheduler_that_needs_a_cluster_asks_for_one(tmp_path: Path) -> None:
    assert load_record(write(tmp_path, SLURM_RECORD)).cluster is None
    none_record = {k: v for k, v in mutate("scheduler", "none").items() if k != "cluster"}
    assert load_record(write(tmp_path, none_record)).scheduler == "none"


# --------------------------------------------------------------------------- base_model where it is needed


def without_base_model(**changes: object) -> dict:
    data = {key: value for key, value in copy.deepcopy(GOOD).items() if key != "base_model"}
    data.update(changes)
    return data


@pytest.mark.parametrize("label,data,because", [
    ("model published", without_base_model(register={"authorized": False}), "publish.model names a model to publish"),
    ("registration authorized", without_base_model(publish=None, register={"authorized": True, "url": "sqlite:///r.db"}),
     "register.authorized is true"),
    ("both", without_base_model(register={"authorized": True, "url": "sqlite:///r.db"}),
     "publish.model names a model to publish and register.authorized is true"),
], ids=["model published", "registration authorized", "both"])
def test_publishing_or_registering_a_model_without_base_model_is_refused_naming_the_field(
        tmp_path: Path, label: str, data: dict, because: str) -> None:
    data = {key: value for key, value in data.items() if value is not None}
    path = write(tmp_path, data)
    with pytest.raises(RecordError) as caught:
        load_record(path)
    assert str(caught.value) == (f"{path}: field 'base_model' is missing; expected a Hub model id like Qwen/Qwen3-8B "
                                 f"because {because} (rlkeep never guesses a base model)")


def test_base_model_is_not_asked_for_when_no_model_is_published_or_registered(tmp_path: Path) -> None:
    """Contract §3: optional; only publication (of the model) and registration need it."""
    unauthorized = without_base_model(register={"authorized": False})
    del unauthorized["publish"]
    assert load_record(write(tmp_path, unauthorized)).base_model is None
    datagen = {key: GOOD[key] for key in ("job", "user", "scheduler", "cluster", "chain", "store")}
    datagen.update(kind="datagen", publish={"traces": "laion/rl-qwen3-swe-v3-traces"})
    assert load_record(write(tmp_path, datagen)).publish == {"traces": "laion/rl-qwen3-swe-v3-traces"}


# --------------------------------------------------------------------------- rlkeep validate-record


def validate_record(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkeep", "validate-record", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def test_validate_record_reports_every_file_each_alone_and_fails_if_any_is_refused(tmp_path: Path) -> None:
    good = [write(tmp_path, {**GOOD, "job": name}, name=name) for name in ("rl-a", "rl-c")]
    typo = write(tmp_path, {**GOOD, "job": "rl-b", "stroe": "s3://x/y"}, name="rl-b")
    unbased = write(tmp_path, without_base_model(job="rl-d"), name="rl-d")
    broken = write(tmp_path, "job: rl-e\nchain: [unclosed\n", name="rl-e")

    result = validate_record(good[0], typo, unbased, broken, good[1])
    assert result.returncode == 1, result
    assert result.stdout.splitlines() == [f"{path}: ok ({path.stem}, 2 attempts, scheduler iris)" for path in good]
    errors = result.stderr.splitlines()
    assert errors[0].startswith(f"rlkeep: {typo}: unknown key 'stroe'")
    assert errors[1].startswith(f"rlkeep: {unbased}: field 'base_model' is missing")
    assert errors[2].startswith(f"rlkeep: {broken}: not valid YAML at line 3")
    assert errors[3:] == ["rlkeep: 3 of 5 records refused"]
    assert "Traceback" not in result.stderr

    assert validate_record(*good).returncode == 0
