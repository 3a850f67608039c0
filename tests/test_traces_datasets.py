"""The staged trace dataset loads with Hugging Face `datasets` (the test extra pins it; never a product
dependency) and yields the Features Harbor 0.26's export has: `conversations` a list of {role, content}
strings and every other column a string (`conversations_sharegpt` a list of {from, value} when asked),
whether loaded as parquet files or as the staged folder with its dataset card. `tool_definitions`, when
trials have definitions, is the list of structs `datasets` infers from them, as in Harbor's table
(a string column of nulls when none has; tests/test_traces_vs_harbor.py compares with Harbor's own)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkeep.traces import SHAREGPT_COLUMN, column_names
from tests.support.trace_trials import (
    NATIVE_TOOLS_TRIAL, TOOLS, agent, export, user, write_native_tools_trial, write_trial,
)

datasets = pytest.importorskip("datasets", reason="`datasets` is in the test extra (pip install -e '.[test]')")


def harbor_features(*, sharegpt: bool) -> "datasets.Features":
    """Harbor 0.26's export Features, written from its documented columns (formats.md section 4)."""
    text = datasets.Value("string")
    turns = {"conversations": datasets.List({"role": text, "content": text}),
             SHAREGPT_COLUMN: datasets.List({"from": text, "value": text})}
    return datasets.Features({name: turns.get(name, text) for name in column_names(sharegpt)})


@pytest.fixture()
def staged(tmp_path: Path) -> Path:
    root = tmp_path / "trace_jobs"
    for index in range(3):
        write_trial(root, f"t{index}__DSDSDSD", [user(1, "Task"), agent(2, f"answer {index}", observation=[
            {"content": "ok"}]), agent(3, "done")], reward=float(index % 2))
    return root


@pytest.mark.parametrize("sharegpt", [False, True])
def test_load_dataset_yields_harbors_features(staged: Path, tmp_path: Path, sharegpt: bool) -> None:
    out = tmp_path / "out"
    _, by_trial = export(staged, out, trials_per_shard=2, sharegpt=sharegpt)
    cache = tmp_path / "hf-cache"
    expected = harbor_features(sharegpt=sharegpt)
    as_parquet = datasets.load_dataset("parquet", data_dir=str(out / "data"), cache_dir=str(cache))["train"]
    as_folder = datasets.load_dataset(str(out), cache_dir=str(cache))["train"]
    for loaded in (as_parquet, as_folder):
        assert loaded.features == expected
        assert list(loaded.features) == list(expected)
        assert loaded.num_rows == sum(len(rows) for rows in by_trial.values()) == 3
        assert sorted(loaded["trial_name"]) == sorted(by_trial)
    first = as_folder[0]
    assert first["conversations"][0] == {"role": "user", "content": "Task"}


def test_tool_definitions_load_as_the_list_of_structs_datasets_infers(staged: Path, tmp_path: Path) -> None:
    """Harbor's table infers `tool_definitions` from the values (Dataset.from_list); the staged
    folder must load with that same feature, whichever shard the definitions are in."""
    write_native_tools_trial(staged)
    other = [{"type": "function", "function": {"name": "grep", "description": "search",
                                                "parameters": {"type": "object", "required": ["pattern"]}}}]
    write_trial(staged, "z-other-tools__ZZZZZZZ", [user(1, "Task"), agent(2, "done")],
                agent={"name": "openhands", "version": "1", "model_name": "m", "tool_definitions": other})
    out = tmp_path / "out"
    manifest, by_trial = export(staged, out, trials_per_shard=2)
    assert manifest["tool_definitions"] == {"type": "list_of_structs", "distinct_definitions": 2,
                                            "why": manifest["tool_definitions"]["why"]}
    rows = [{"tool_definitions": definitions} for definitions in (None, TOOLS, None, other)]
    expected = datasets.Dataset.from_list(rows).features["tool_definitions"]  # Harbor's inference
    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))["train"]
    assert loaded.features["tool_definitions"] == expected
    assert len(manifest["shards"]) == 3  # the definitions sit in two different shards
    by_name = {row["trial_name"]: row["tool_definitions"] for row in loaded}
    assert by_name[NATIVE_TOOLS_TRIAL][0]["function"]["name"] == "bash"
    assert by_name["z-other-tools__ZZZZZZZ"][0]["function"]["parameters"]["required"] == ["pattern"]
    assert by_name["t0__DSDSDSD"] is None
    assert by_trial[NATIVE_TOOLS_TRIAL][0]["tool_definitions"][0]["function"]["description"] is None


def test_definitions_parquet_cannot_hold_stay_json_text_and_the_manifest_says_so(staged: Path,
                                                                                 tmp_path: Path) -> None:
    empty = [{"type": "function", "function": {"name": "finish", "parameters": {"type": "object",
                                                                                  "properties": {}}}}]
    write_trial(staged, "empty-props__EEEEEEE", [user(1, "Task"), agent(2, "done")],
                agent={"name": "openhands", "version": "1", "model_name": "m", "tool_definitions": empty})
    manifest, by_trial = export(staged, tmp_path / "out")
    assert manifest["tool_definitions"]["type"] == "json_text" and "without fields" in manifest["tool_definitions"]["why"]
    (row,) = by_trial["empty-props__EEEEEEE"]
    assert json.loads(row["tool_definitions"]) == empty
