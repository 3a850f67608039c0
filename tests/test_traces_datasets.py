"""The staged trace dataset loads with Hugging Face `datasets` (the test extra pins it; never a product
dependency) and yields the Features Harbor 0.26's export has: `conversations` a list of {role, content}
strings and every other column a string (`conversations_sharegpt` a list of {from, value} when asked),
whether loaded as parquet files or as the staged folder with its dataset card."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlkeep.traces import SHAREGPT_COLUMN, column_names
from tests.support.trace_trials import agent, export, user, write_trial

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
