"""rlkeep's trace dataset against Harbor 0.26's own exporter, row by row and column by column.

Harbor needs Python >= 3.12, so it lives in an environment of its own (never in .venv):
RLKEEP_HARBOR_PYTHON names its interpreter, else `make harbor-env` builds
~/.cache/rlkeep-bench/harbor. Harbor's `export_traces` runs in that interpreter on the same
fixture trees as tests/test_traces_harbor.py (every edge case of issue 21) plus one trial with a
planted credential; the only difference allowed is the redaction of credentials, which rlkeep
always applies and Harbor does not.

Two things are compared as sets rather than in order, because Harbor's order is not a property
of the data: Harbor lists trials in file-system walk order and puts all subagent rows after all
main rows; rlkeep sorts by trial. And Harbor builds its table with `Dataset.from_list`, which
keeps only the columns of the first row, so `tool_definitions` and `trace_source` exist in its
output only when the first row has them; where Harbor has no such column rlkeep's value must be
the empty one (null, `main`), and a one-trial tree with native tools checks `tool_definitions`.
The Features `datasets.load_dataset` gives for the staged folder are compared with the Features of
Harbor's table, column by column over Harbor's columns (`tool_definitions` is inferred from the data
on both sides).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rlkeep.errors import RlkeepError
from rlkeep.redaction import Redactor
from tests.support.trace_trials import (
    NATIVE_TOOLS_TRIAL, TOOLS, agent, export, user, write_dangling_continuation_trial, write_image_trial,
    write_message_parts_trial, write_native_tools_trial, write_reordered_continuations_trial,
    write_text_parts_trial, write_trial,
)

DEFAULT_HARBOR_PYTHON = Path.home() / ".cache" / "rlkeep-bench" / "harbor" / "bin" / "python"
TOKEN = "hf" + "_" + "Q7mZ" * 8 + "x9"
# (episodes, Harbor's success_filter, rlkeep's filter)
RUNS = [("all", None, "none"), ("last", "success", "success"), ("all", "failure", "failure")]

HARBOR_SCRIPT = r"""
import json, sys
from harbor.utils.traces_utils import export_traces
jobs = json.loads(sys.argv[1])
out = {}
for key, (root, episodes, success_filter) in jobs.items():
    try:
        ds = export_traces(root, episodes=episodes, success_filter=success_filter, to_sharegpt=True,
                           include_instruction=True, include_verifier_output=True, use_rich_progress=False)
    except Exception as error:
        out[key] = {"error": type(error).__name__, "message": str(error)}
        continue
    out[key] = {"columns": list(ds.column_names), "rows": ds.to_list(), "features": ds.features.to_dict()}
with open(sys.argv[2], "w") as handle:
    json.dump(out, handle)
"""


def harbor_python() -> Path:
    named = os.environ.get("RLKEEP_HARBOR_PYTHON")
    candidate = Path(named) if named else DEFAULT_HARBOR_PYTHON
    if not candidate.exists():
        pytest.skip(f"no Harbor environment ({candidate} does not exist): run `make harbor-env` (builds "
                    "harbor==0.26.0 into ~/.cache/rlkeep-bench/harbor from a Python >= 3.12) or set "
                    "RLKEEP_HARBOR_PYTHON to an interpreter that can import harbor and datasets")
    return candidate


def build_edge_cases(root: Path) -> None:
    """Every edge case of issue 21 in one tree (continuations chained out of file-name order, a
    dangling reference, text-part lists among them), plus a planted credential."""
    write_trial(root, "two-users__AAAAAAA", [
        user(1, "You are an AI assistant."), user(2, "Task: print 42."),
        agent(3, "echo 42", observation=[{"content": "42"}]), agent(4, "done"),
    ], stdout="out\n", stderr="err\n")
    prompt = user(1, "You are an AI assistant. Task: sort a file.")
    write_trial(root, "summarized__BBBBBBB", [
        prompt, agent(2, "ls", observation=[{"content": "a.txt"}]),
        agent(3, "cat a.txt", observation=[{"content": "3\n1\n2"}]),
    ], continuations=[[
        dict(prompt, is_copied_context=True), user(2, "Summary: a.txt holds 3 numbers."),
        agent(3, "sort a.txt", observation=[{"content": "1\n2\n3"}]), agent(4, "done"),
    ]])
    write_trial(root, "multi-part__CCCCCCC", [
        user(1, "Task"),
        agent(2, "run two commands", observation=[{"source_call_id": "a", "content": "first output"},
                                                  {"source_call_id": "b", "content": [{"type": "text",
                                                                                       "text": "second"}]}]),
        agent(3, "</think>orphaned close", observation=[{"content": ""}]),
        agent(4, "done"),
    ], stdout=None)
    write_native_tools_trial(root)
    write_reordered_continuations_trial(root)
    write_dangling_continuation_trial(root)
    write_text_parts_trial(root)
    sub = {"schema_version": "ATIF-v1.6", "agent": {"name": "terminus-2-summarizer", "version": "1",
                                                     "model_name": "hosted_vllm/summarizer"},
           "steps": [{"step_id": 1, "source": "system", "message": "You summarize."},
                     user(2, "Summarize the work."),
                     agent(3, "Summary: tests pass.", observation=[{"content": "ok"}])]}
    write_trial(root, "with-subagent__EEEEEEE", [
        user(1, "Task"),
        agent(2, "summarize", observation=[{"content": "Summary: tests pass.", "subagent_trajectory_ref": [
            {"session_id": "s-1", "trajectory_path": "trajectory.summarization-1-summary.json"}]}]),
        agent(3, "done"),
    ], extra_files={"agent/trajectory.summarization-1-summary.json": sub})
    steps = [user(1, "Task"), agent(2, "working")]
    write_trial(root, "timed-out__FFFFFFF", steps, reward=1.0, exception="AgentTimeoutError")
    write_trial(root, "failed__HHHHHHH", steps, reward=0.0, stderr="AssertionError\n")
    write_trial(root, "no-reward__OOOOOOO", steps, reward=None)
    for name, rewards in (("other-key__PPPPPPP", {"score": 1.0}), ("text-reward__QQQQQQQ", {"reward": "1"}),
                          ("word-reward__RRRRRRR", {"reward": "pass"})):
        write_trial(root, name, steps)
        result_path = root / name / "result.json"
        result = json.loads(result_path.read_text())
        result_path.write_text(json.dumps(dict(result, verifier_result={"rewards": rewards})))
    coloured = "\x1b[01;32mroot@box\x1b[00m:/app# ls\r\nDownloading  10%\rDownloading 100%"
    write_trial(root, "coloured__IIIIIIII", [user(1, "Task"), agent(2, "ls", observation=[{"content": coloured}]),
                                             agent(3, "done")], stdout="\x1b[32m1 passed\x1b[0m")
    write_trial(root, "leaky__JJJJJJJ", [user(1, f"  Task: use HF_TOKEN={TOKEN}  "),
                                          agent(2, "export", observation=[{"content": f"HF_TOKEN={TOKEN}"}]),
                                          agent(3, "done")])


def run_harbor(python: Path, jobs: dict[str, tuple[str, str, str | None]], tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "harbor.json"
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf-home"), HF_DATASETS_OFFLINE="1", PYTHONPATH="")
    done = subprocess.run([str(python), "-c", HARBOR_SCRIPT, json.dumps(jobs), str(out)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, f"Harbor's exporter failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return json.loads(out.read_text())


def keyed(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    found = {(row["trial_name"], row.get("trace_source") or "main", row["episode"]): row for row in rows}
    assert len(found) == len(rows), "two rows share trial, trace source and episode"
    return found


def redacted(value: Any, redactor: Redactor) -> Any:
    """Harbor's value with credentials redacted as rlkeep redacts them."""
    if isinstance(value, str):
        return redactor.redact_text(value)[0]
    if isinstance(value, list):
        return [redacted(item, redactor) for item in value]
    if isinstance(value, dict):
        return {key: redacted(item, redactor) for key, item in value.items()}
    return value


def compare(harbor: dict[str, Any], ours: dict[str, list[dict]], label: str) -> int:
    """Assert every Harbor row and column equals rlkeep's up to redaction; return how many values
    differed only by redaction."""
    redactor = Redactor()
    theirs = keyed(harbor["rows"])
    mine = keyed([row for rows in ours.values() for row in rows])
    my_order = list(next(iter(mine.values())))
    assert [name for name in my_order if name in harbor["columns"]] == harbor["columns"], (
        f"{label}: column order {my_order} against Harbor's {harbor['columns']}")
    assert sorted(mine) == sorted(theirs), f"{label}: different row sets"
    assert theirs, f"{label}: Harbor exported nothing"
    redaction_only = 0
    for key, their_row in theirs.items():
        my_row = mine[key]
        for column in my_row:
            if column not in harbor["columns"]:
                empty = "main" if column == "trace_source" else None
                assert my_row[column] == empty, f"{label} {key}: Harbor has no {column}, rlkeep {my_row[column]!r}"
                continue
            theirs_value, my_value = their_row[column], my_row[column]
            if column == "trace_source" and theirs_value is None:
                theirs_value = "main"
            if my_value == theirs_value:
                continue
            assert my_value == redacted(theirs_value, redactor), (
                f"{label} {key} column {column}:\nHarbor {theirs_value!r}\nrlkeep {my_value!r}")
            redaction_only += 1
        assert set(harbor["columns"]) <= set(my_row), f"{label}: rlkeep lacks {set(harbor['columns']) - set(my_row)}"
    return redaction_only


def test_rows_match_harbors_exporter_up_to_redaction(tmp_path: Path) -> None:
    python = harbor_python()
    root = tmp_path / "trace_jobs"
    build_edge_cases(root)
    tools_root = tmp_path / "tools_only"
    write_native_tools_trial(tools_root)
    jobs = {f"{episodes}-{mine}": (str(root), episodes, theirs) for episodes, theirs, mine in RUNS}
    jobs["tools-only"] = (str(tools_root), "all", None)
    media_root = tmp_path / "media"
    write_image_trial(media_root, reward=0.0)
    write_text_parts_trial(media_root)
    jobs.update({f"media-{mine}": (str(media_root), "all", theirs) for _, theirs, mine in RUNS})
    message_parts_root = tmp_path / "message_parts"
    write_message_parts_trial(message_parts_root)
    jobs["message-parts"] = (str(message_parts_root), "all", None)
    harbor = run_harbor(python, jobs, tmp_path)
    assert all("error" not in harbor[key] for key in jobs if not key.startswith(("media-", "message-parts"))), harbor
    # Harbor documents text content (normalize_message_content) but stops on a message given as parts;
    # rlkeep's rows for it are checked against the documented rule in test_traces_harbor.py.
    assert harbor["message-parts"].get("error") == "TypeError", harbor["message-parts"]

    assert TOKEN in json.dumps(harbor["all-none"]["rows"])  # Harbor keeps the credential ...
    differences = 0
    for episodes, _, mine in RUNS:
        label = f"{episodes}-{mine}"
        _, ours = export(root, tmp_path / label, episodes=episodes, filter=mine, sharegpt=True)
        assert TOKEN not in json.dumps(ours)  # ... rlkeep never does
        differences += compare(harbor[label], ours, label)
        redacted_trials = {key[0] for key, row in keyed(harbor[label]["rows"]).items() if TOKEN in json.dumps(row)}
        assert redacted_trials <= {"leaky__JJJJJJJ"}
    assert differences > 0, "the planted credential never made a difference: redaction was not exercised"

    assert "tool_definitions" in harbor["tools-only"]["columns"]
    manifest, ours = export(tools_root, tmp_path / "tools-out", episodes="all", sharegpt=True)
    assert compare(harbor["tools-only"], ours, "tools-only") == 0
    (first, _) = ours[NATIVE_TOOLS_TRIAL]
    assert first["tool_definitions"] == TOOLS and manifest["tool_definitions"]["type"] == "list_of_structs"
    assert_same_features(harbor["tools-only"], tmp_path / "tools-out", tmp_path)
    assert_same_features(harbor["all-none"], tmp_path / "all-none", tmp_path)
    check_media(harbor, media_root, tmp_path)


def assert_same_features(harbor: dict[str, Any], staged: Path, tmp_path: Path) -> None:
    """`datasets.load_dataset` on the staged folder gives Harbor's Features for Harbor's columns."""
    datasets = pytest.importorskip("datasets", reason="`datasets` is in the test extra")
    theirs = datasets.Features.from_dict(harbor["features"])
    loaded = datasets.load_dataset(str(staged), cache_dir=str(tmp_path / "hf-cache"))["train"].features
    for column in harbor["columns"]:
        assert loaded[column] == theirs[column], f"{staged.name} {column}: {loaded[column]} against Harbor's {theirs[column]}"


def check_media(harbor: dict[str, Any], media_root: Path, tmp_path: Path) -> None:
    """An image part: Harbor refuses the export unless its filter leaves the trial out; so does rlkeep."""
    for _, _, mine in RUNS:
        theirs = harbor[f"media-{mine}"]
        if mine == "success":  # the image trial failed: filtered out before anything is read
            _, ours = export(media_root, tmp_path / f"media-{mine}", episodes="all", filter=mine, sharegpt=True)
            assert compare(theirs, ours, f"media-{mine}") == 0
            continue
        assert theirs.get("error") == "MultimodalExportError", theirs
        with pytest.raises(RlkeepError, match="screenshot__NNNNNNN.*image or audio"):
            export(media_root, tmp_path / f"media-{mine}", episodes="all", filter=mine, sharegpt=True)
