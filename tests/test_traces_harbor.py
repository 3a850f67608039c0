"""Harbor compatibility of the trace dataset: fixture trees for each edge case of issue 21, rows
checked against expectations written from Harbor 0.26's `traces export` behaviour.

The expectations below are written by hand; tests/test_traces_vs_harbor.py runs Harbor's own
exporter on the same trees (fixtures from here) and compares every row, which is how the first
guesses here (system role, tools block layout, multi-part observations, subagent labels) were
corrected.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rlkeep.errors import RlkeepError
from rlkeep.traces import COLUMNS, MANIFEST_NAME, SHAREGPT_COLUMN, CardInfo, cli_main
from tests.support.trace_trials import (
    MODEL, NATIVE_TOOLS_TRIAL, TOOLS, agent, atif, export, user, write_dangling_continuation_trial,
    write_image_trial, write_message_parts_trial, write_native_tools_trial, write_reordered_continuations_trial, write_text_parts_trial,
    write_trial,
)


def turns(row: dict) -> list[tuple[str, str]]:
    return [(turn["role"], turn["content"]) for turn in row["conversations"]]


# ----------------------------------------------------------------------------- edge cases

def test_consecutive_user_turns_stay_apart_and_model_is_written_as_is(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_trial(root, "two-users__AAAAAAA", [
        user(1, "You are an AI assistant."), user(2, "Task: print 42."),
        agent(3, "echo 42", observation=[{"content": "42"}]),
        agent(4, "done"),
    ], stdout="out\n", stderr="err\n")
    _, rows = export(root, tmp_path / "out", episodes="all")
    first, second = rows["two-users__AAAAAAA"]
    assert turns(first) == [("user", "You are an AI assistant."), ("user", "Task: print 42."),
                            ("assistant", "echo 42")]
    assert turns(second) == turns(first) + [("user", "42"), ("assistant", "done")]
    assert (first["episode"], second["episode"]) == ("episode-0", "episode-1")
    assert first["model"] == MODEL and first["model_provider"] == "hosted_vllm"
    assert first["instruction"] == "You are an AI assistant."
    assert first["verifier_output"] == "out\nerr\n"  # stdout + stderr joined with nothing
    assert first["result"] == "1.0" and first["run_id"] == "two-users__AAAAAAA"
    assert first["trace_source"] == "main" and first["tool_definitions"] is None


def test_continuation_rows_hold_what_the_model_saw_after_the_summary(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    prompt = user(1, "You are an AI assistant. Task: sort a file.")
    write_trial(root, "summarized__BBBBBBB", [
        prompt,
        agent(2, "ls", observation=[{"content": "a.txt"}]),
        agent(3, "cat a.txt", observation=[{"content": "3\n1\n2"}]),
    ], continuations=[[
        dict(prompt, is_copied_context=True),
        user(2, "Summary: a.txt holds 3 numbers."),
        agent(3, "sort a.txt", observation=[{"content": "1\n2\n3"}]),
        agent(4, "done"),
    ]])
    _, rows = export(root, tmp_path / "all", episodes="all")
    episodes = rows["summarized__BBBBBBB"]
    assert [row["episode"] for row in episodes] == [f"episode-{k}" for k in range(4)]
    assert turns(episodes[1]) == [("user", prompt["message"]), ("assistant", "ls"), ("user", "a.txt"),
                                  ("assistant", "cat a.txt")]
    post_summary = [("user", prompt["message"]), ("user", "Summary: a.txt holds 3 numbers."),
                    ("assistant", "sort a.txt")]
    assert turns(episodes[2]) == post_summary
    assert turns(episodes[3]) == post_summary + [("user", "1\n2\n3"), ("assistant", "done")]

    _, last = export(root, tmp_path / "last", episodes="last")
    (only,) = last["summarized__BBBBBBB"]
    assert only["episode"] == "episode-3" and turns(only) == turns(episodes[3])


def test_continuations_follow_continued_trajectory_ref_not_file_names(tmp_path: Path) -> None:
    """Harbor walks trajectory.json -> its continued_trajectory_ref -> ...; cont-10 before cont-2
    here, and cont-3, which nothing references, is not read."""
    root = tmp_path / "trace_jobs"
    write_reordered_continuations_trial(root)
    write_dangling_continuation_trial(root)
    manifest, rows = export(root, tmp_path / "all", episodes="all")
    episodes = rows["reordered__KKKKKKK"]
    assert [row["episode"] for row in episodes] == ["episode-0", "episode-1", "episode-2"]
    prompt = ("user", "Task: count the lines.")
    assert turns(episodes[1]) == [prompt, ("user", "Summary one."), ("assistant", "second context")]
    assert turns(episodes[2]) == [prompt, ("user", "Summary two."), ("assistant", "third context")]
    assert "never referenced" not in json.dumps(rows)
    (dangling,) = rows["dangling__LLLLLLL"]
    assert turns(dangling) == [("user", "Task"), ("assistant", "only context")]
    assert manifest["repairs"]["continuation_unreferenced"] == 1 and manifest["repairs"]["continuation_missing"] == 1
    _, last = export(root, tmp_path / "last", episodes="last")
    assert [row["episode"] for row in last["reordered__KKKKKKK"]] == ["episode-2"]


def test_a_continuation_chain_that_comes_back_is_malformed(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_trial(root, "cycle__SSSSSSS", [user(1, "Task"), agent(2, "first")],
                extra_files={"agent/trajectory.cont-1.json": atif([user(1, "Task"), agent(2, "second")],
                                                                  continued_trajectory_ref="trajectory.json")})
    path = root / "cycle__SSSSSSS" / "agent" / "trajectory.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), continued_trajectory_ref="trajectory.cont-1.json")))
    write_trial(root, "fine__TTTTTTT", [user(1, "Task"), agent(2, "done")])
    manifest, rows = export(root, tmp_path / "out", min_coverage=0.5)
    assert manifest["malformed"] == {"continuation_cycle": 1} and set(rows) == {"fine__TTTTTTT"}


def test_text_part_lists_give_their_first_part(tmp_path: Path) -> None:
    """Harbor's normalize_message_content: a list of content parts is its first part's text (for
    observations, where Harbor applies it, and for messages, where its documentation says so)."""
    root = tmp_path / "trace_jobs"
    write_text_parts_trial(root)
    write_message_parts_trial(root)
    _, rows = export(root, tmp_path / "out")
    (row,) = rows["text-parts__MMMMMMM"]
    assert turns(row) == [("user", "Task"), ("assistant", "ls"), ("user", "a.txt\nc.txt"), ("assistant", "done")]
    (row,) = rows["message-parts__UUUUUUU"]
    assert turns(row) == [("user", "Task in parts:"), ("assistant", "ls"), ("user", "a.txt"), ("assistant", "done")]


def test_an_image_part_refuses_the_export_as_harbor_does_unless_the_filter_leaves_it_out(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_image_trial(root, reward=0.0)
    write_trial(root, "solved__GGGGGGG", [user(1, "Task"), agent(2, "done")], reward=1.0)
    out = tmp_path / "out"
    with pytest.raises(RlkeepError) as caught:
        export(root, out)
    message = str(caught.value)
    assert "screenshot__NNNNNNN" in message and "agent/trajectory.json step 2 observation result 1" in message
    assert "image or audio" in message and not out.exists()  # nothing staged
    manifest, rows = export(root, out, filter="success")  # Harbor filters before it reads
    assert set(rows) == {"solved__GGGGGGG"} and manifest["trials_filtered_out"] == 1
    with pytest.raises(RlkeepError, match="screenshot__NNNNNNN"):
        export(root, tmp_path / "failures", filter="failure")


def test_multi_part_observation_joins_every_part_with_newlines(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_trial(root, "multi-part__CCCCCCC", [
        user(1, "Task"),
        agent(2, "run two commands", observation=[{"source_call_id": "a", "content": "first output"},
                                                  {"source_call_id": "b", "content": "second output"}]),
        agent(3, "done"),
    ])
    _, rows = export(root, tmp_path / "out")
    (row,) = rows["multi-part__CCCCCCC"]
    assert turns(row)[2] == ("user", "first output\nsecond output")


def test_native_tools_put_a_tools_block_before_the_system_text(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_native_tools_trial(root)
    _, rows = export(root, tmp_path / "out")
    (row,) = rows[NATIVE_TOOLS_TRIAL]
    block = "<tools>\n" + json.dumps(TOOLS, indent=2) + "\n</tools>"
    assert turns(row) == [
        ("user", block + "\n\nYou are a coding agent."),  # Harbor: a system step is a user turn
        ("user", "Fix the bug."),
        ("assistant", '<think>look first</think>\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n'
                      "</tool_call>"),
        ("user", "main.py"),
        ("assistant", 'fixed\n<tool_call>\n{"name": "finish", "arguments": {}}\n</tool_call>'),
    ]
    assert row["tool_definitions"] == TOOLS  # a list of structs, as in Harbor's table
    assert row["instruction"] == "You are a coding agent." and row["agent"] == "openhands"


def test_subagent_trajectories_get_rows_of_their_own(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    sub = {"schema_version": "ATIF-v1.6", "agent": {"name": "terminus-2-summarizer", "version": "1",
                                                     "model_name": MODEL},
           "steps": [user(1, "Summarize the work."), agent(2, "Summary: tests pass.")]}
    write_trial(root, "with-subagent__EEEEEEE", [
        user(1, "Task"),
        agent(2, "summarize", observation=[{"content": "Summary: tests pass.", "subagent_trajectory_ref": [
            {"session_id": "s-1", "trajectory_path": "trajectory.summarization-1-summary.json"}]}]),
        agent(3, "done"),
    ], extra_files={"agent/trajectory.summarization-1-summary.json": sub})
    manifest, rows = export(root, tmp_path / "out", episodes="all")
    found = rows["with-subagent__EEEEEEE"]
    assert [(row["trace_source"], row["episode"]) for row in found] == [
        ("main", "episode-0"), ("main", "episode-1"), ("summarization-1-summary", "episode-0")]
    assert turns(found[1])[2] == ("user", "Summary: tests pass.")  # no label inside the observation
    assert turns(found[2]) == [("user", "Summarize the work."), ("assistant", "Summary: tests pass.")]
    assert found[2]["trial_name"] == "with-subagent__EEEEEEE" and found[2]["result"] == "1.0"
    assert found[2]["agent"] == "terminus-2"  # the run's agent, not the subagent's name
    assert manifest["trials_exported"] == 1 and manifest["row_count"] == 3


def test_timed_out_trial_with_a_reward_is_its_exception_and_not_a_success(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    steps = [user(1, "Task"), agent(2, "working")]
    write_trial(root, "timed-out__FFFFFFF", steps, reward=1.0, exception="AgentTimeoutError")
    write_trial(root, "solved__GGGGGGG", steps, reward=1.0)
    write_trial(root, "failed__HHHHHHH", steps, reward=0.0)
    _, every = export(root, tmp_path / "all")
    assert every["timed-out__FFFFFFF"][0]["result"] == "AgentTimeoutError"
    assert every["solved__GGGGGGG"][0]["result"] == "1.0" and every["failed__HHHHHHH"][0]["result"] == "0.0"
    success, kept = export(root, tmp_path / "success", filter="success")
    assert set(kept) == {"solved__GGGGGGG"} and success["trials_filtered_out"] == 2
    _, failures = export(root, tmp_path / "failure", filter="failure")
    assert set(failures) == {"timed-out__FFFFFFF", "failed__HHHHHHH"}


def test_ansi_coloured_output_is_kept_as_the_model_saw_it_unless_cleaning_is_asked(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    coloured = "\x1b[01;32mroot@box\x1b[00m:/app# ls\r\nDownloading  10%\rDownloading 100%"
    write_trial(root, "coloured__IIIIIIII", [user(1, "Task"), agent(2, "ls", observation=[{"content": coloured}]),
                                             agent(3, "done")], stdout="\x1b[32m1 passed\x1b[0m")
    raw, rows = export(root, tmp_path / "raw")
    (row,) = rows["coloured__IIIIIIII"]
    assert turns(row)[2] == ("user", coloured) and row["verifier_output"] == "\x1b[32m1 passed\x1b[0m"
    assert raw["text_changes"] == {"credentials_redacted": True, "lone_surrogates_replaced": True,
                                   "terminal_noise_cleaned": False}
    cleaned, rows = export(root, tmp_path / "clean", clean_terminal_noise=True)
    (row,) = rows["coloured__IIIIIIII"]
    assert turns(row)[2] == ("user", "root@box:/app# ls\nDownloading 100%") and row["verifier_output"] == "1 passed"
    assert cleaned["text_changes"]["terminal_noise_cleaned"] is True and cleaned["repairs"]["terminal_noise"] >= 2
    saved = json.loads((tmp_path / "clean" / MANIFEST_NAME).read_text())
    assert saved["text_changes"]["terminal_noise_cleaned"] is True


def test_credentials_are_redacted_even_in_raw_text(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    token = "hf" + "_" + "Q7mZ" * 8 + "x9"
    write_trial(root, "leaky__JJJJJJJ", [user(1, "Task"),
                                          agent(2, "export", observation=[{"content": f"HF_TOKEN={token}"}])])
    manifest, rows = export(root, tmp_path / "out")
    assert token not in json.dumps(rows) and sum(manifest["redactions"].values()) >= 1
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"{sum(manifest['redactions'].values())} redaction(s)" in card and token not in card


# ----------------------------------------------------------------------------- files

def test_shard_names_and_huggingface_features_metadata(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    for index in range(5):
        write_trial(root, f"t{index}__KKKKKKK", [user(1, "Task"), agent(2, f"answer {index}")])
    manifest, _ = export(root, tmp_path / "out", trials_per_shard=2, sharegpt=True)
    names = sorted(path.name for path in (tmp_path / "out" / "data").iterdir())
    assert names == [f"train-{i:05d}-of-00003.parquet" for i in range(3)]
    assert [shard["name"] for shard in manifest["shards"]] == names
    value = {"dtype": "string", "_type": "Value"}
    expected = {"conversations": [{"role": value, "content": value}],
                **{name: value for name in COLUMNS[1:-1]},
                SHAREGPT_COLUMN: [{"from": value, "value": value}], "trace_source": value}
    for name in names:
        schema = pq.read_schema(tmp_path / "out" / "data" / name)
        features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
        assert features == expected and list(features) == schema.names == list(COLUMNS[:-1]) + [SHAREGPT_COLUMN, "trace_source"]
    row = pq.read_table(tmp_path / "out" / "data" / names[0]).to_pylist()[0]
    assert row[SHAREGPT_COLUMN] == [{"from": "human", "value": "Task"}, {"from": "gpt", "value": "answer 0"}]
    plain = pq.read_schema(export(root, tmp_path / "plain")[0] and tmp_path / "plain" / "data" /
                           "train-00000-of-00001.parquet")
    assert SHAREGPT_COLUMN not in plain.names
    assert SHAREGPT_COLUMN not in json.loads(plain.metadata[b"huggingface"])["info"]["features"]


def test_dataset_card_says_where_the_rows_come_from(tmp_path: Path) -> None:
    root = tmp_path / "trace_jobs"
    write_trial(root, "a__LLLLLLL", [user(1, "Task"), agent(2, "done")])
    write_trial(root, "b__MMMMMMM", [user(1, "Task"), agent(2, "done")], reward=0.0)
    info = CardInfo(job="rl-qwen3-swe-v3", dataset_repo="org/rl-traces", model_repo="org/rl-qwen3")
    manifest, _ = export(root, tmp_path / "out", filter="success", episodes="all", card=info)
    card = (tmp_path / "out" / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n- config_name: default\n") and "path: data/train-*" in card
    for fact in ("`rl-qwen3-swe-v3`", "[org/rl-qwen3](https://huggingface.co/org/rl-qwen3)",
                 "Trials with a result.json: 2", "Result coverage: 100.00%", "Episodes: `all`",
                 "Filter: `success`", "left out by the filter: 1", "0 redaction(s)"):
        assert fact in card, fact
    assert manifest["card"] == {"written": True, "name": "README.md"}
    again, _ = export(root, tmp_path / "again", filter="success", episodes="all", card=info)
    assert (tmp_path / "again" / "README.md").read_bytes() == card.encode()  # deterministic
    _, _ = export(root, tmp_path / "no-model", card=CardInfo(job="j"))
    assert "Policy model" not in (tmp_path / "no-model" / "README.md").read_text()


def test_cli_options_reach_the_export(tmp_path: Path, capsys) -> None:
    root = tmp_path / "trace_jobs"
    write_trial(root, "a__NNNNNNN", [user(1, "Task"), agent(2, "\x1b[1mdone\x1b[0m")])
    stage = tmp_path / "stage"
    assert cli_main(["--job-dir", str(root), "--repo-id", "org/traces", "--stage-only", str(stage),
                     "--sharegpt", "--clean-terminal-noise", "--job", "j1", "--model-repo", "org/model"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["text_changes"]["terminal_noise_cleaned"] is True
    (name,) = printed["shards"]
    row = pq.read_table(stage / "data" / name).to_pylist()[0]
    assert row[SHAREGPT_COLUMN][-1] == {"from": "gpt", "value": "done"}
    assert "[org/model]" in (stage / "README.md").read_text()
    with pytest.raises(Exception, match="model-repo"):
        cli_main(["--job-dir", str(root), "--repo-id", "org/traces", "--stage-only", str(stage),
                  "--model-repo", "not a repo"])
