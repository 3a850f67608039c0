"""The metric surface: every serialization on real-shaped logs, chain order, supersession,
trial results, outputs and the `rlkeep metrics` command."""
from __future__ import annotations

import csv
import io
import json
import math
import tracemalloc
from pathlib import Path

import pytest

from rlkeep import cli
from rlkeep.errors import RlkeepError
from rlkeep.metrics import (
    Surface,
    build_surface,
    detect_serialization,
    ema_series,
    iter_result_files,
    numeric_series,
    parse_log,
    parse_log_file,
    NoMetricsError,
    parse_log_stream,
    read_metrics_csv,
    trials_from_results,
    write_outputs,
)

LOGS = Path(__file__).parent / "data" / "logs"
E = "\x1b"
RAY = "(skyrl_entrypoint pid=2211) "


def fixture_text(name: str) -> str:
    return (LOGS / name).read_text()


def reward_by_step(rows):
    return {row["global_step"]: row["reward/avg_raw_reward"] for row in rows}


def wandb_line(step: int, reward: float, kind: str = "train") -> str:
    payload = json.dumps({"reward/avg_raw_reward": reward, "trainer/global_step": step}, sort_keys=True)
    return (f"{RAY}{E}[32m2026-03-30 17:05:45.123{E}[0m | {E}[1mINFO    {E}[0m | "
            f"skyrl_train.trainer:_log_metrics_stdout:1951 - WANDB_MIRROR kind={kind} step={step} metrics={payload}{E}[0m\n")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# --------------------------------------------------------------------------- serializations

def test_fixtures_carry_the_reference_bytes():
    console = (LOGS / "skyrl_console.out").read_bytes()
    # the console logger's trailing space after "Step N:", forced colours and Ray prefixes
    assert b"\x1b[1mStep 5: \n(skyrl_entrypoint pid=2211) {'generate/avg_num_tokens': '9137.2500',\n" in console
    assert b"'trainer/global_step': 5}\x1b[0m\n" in console
    mirror = (LOGS / "wandb_mirror.out").read_bytes()
    assert b'"reward/avg_pass_at_8": NaN' in mirror and b"}\x1b[0m\n" in mirror


def test_wandb_mirror_train_rows_feed_the_surface_and_eval_rows_stay_apart():
    parsed = parse_log(fixture_text("wandb_mirror.out"), "wandb_mirror.out")
    assert parsed.serialization == "wandb-json"
    assert reward_by_step(parsed.rows) == {1: 0.125, 2: 0.3203, 3: 0.25}
    step2 = parsed.rows[1]
    assert math.isnan(step2["reward/avg_pass_at_8"]) and step2["policy/policy_entropy"] == 0.8123
    assert parsed.rows[2]["timing/step"] == 530.0  # no trainer/global_step: step= decides
    assert [row["line"] for row in parsed.rows] == [7, 9, 11]
    assert parsed.eval_rows == [{"global_step": 2, "line": 10, "eval/all/avg_score": 0.2812,
                                 "eval/all/pass_at_8": 0.5, "trainer/global_step": 2}]


def test_console_blocks_with_ansi_ray_prefixes_and_an_interleaved_actor():
    parsed = parse_log(fixture_text("skyrl_console.out"), "skyrl_console.out")
    assert parsed.serialization == "skyrl-console"
    first, second = parsed.rows
    assert first == {"global_step": 5, "line": 2, "generate/avg_num_tokens": 9137.25,
                     "generate/num_timeout_trajectories": 3, "policy/policy_entropy": 0.8123,
                     "reward/avg_raw_reward": 0.3203, "timing/step": 540.2, "trainer/global_step": 5}
    # '0.0000' (a 1e-06 learning rate stringified to 4 decimals) stays a number
    assert second["policy/policy_lr"] == 0.0 and second["global_step"] == 6
    # "Step 6: Batch generation complete ..." is a progress line, not a block
    assert len(parsed.rows) == 2


def test_iris_job_log_prefixes_are_stripped_including_attempt_variant():
    parsed = parse_log(fixture_text("iris_console.out"), "iris_console.out")
    assert parsed.serialization == "skyrl-console"
    assert reward_by_step(parsed.rows) == {41: 0.5, 42: 0.5312}


def test_legacy_python_dicts_single_and_wrapped():
    parsed = parse_log(fixture_text("python_dict.out"), "python_dict.out")
    assert parsed.serialization == "python-dict"
    assert [row["global_step"] for row in parsed.rows] == [20, 40, 60]
    assert parsed.rows[1]["async/staleness_mean"] == 0.5 and parsed.rows[1]["line"] == 3
    # pprint writes non-finite floats as bare nan; a key after trainer/global_step is kept
    assert math.isnan(parsed.rows[2]["reward/avg_raw_reward"])
    assert parsed.rows[2]["trainer/tokens_per_second_per_gpu"] == 1834.2


def test_json_lines_need_a_step_key():
    parsed = parse_log(fixture_text("json_lines.out"), "json_lines.out")
    assert parsed.serialization == "json-lines"
    assert reward_by_step(parsed.rows) == {1: 0.125, 2: 0.25, 3: 0.375}
    plain = parse_log('{"step": 4, "loss": 1.5}\n{"step": 5, "loss": 1.25}\n', "plain.jsonl")
    assert [(row["global_step"], row["loss"]) for row in plain.rows] == [(4, 1.5), (5, 1.25)]


@pytest.mark.parametrize(("name", "expected"), [
    ("wandb_mirror.out", "wandb-json"), ("skyrl_console.out", "skyrl-console"),
    ("python_dict.out", "python-dict"), ("json_lines.out", "json-lines"),
])
def test_detect_serialization(name, expected):
    assert detect_serialization(fixture_text(name)) == expected


def test_mirror_wins_over_console_blocks_of_the_same_steps():
    text = fixture_text("skyrl_console.out") + wandb_line(5, 0.9)
    parsed = parse_log(text, "both.out")
    assert parsed.serialization == "wandb-json"
    assert reward_by_step(parsed.rows) == {5: 0.9}
    assert parsed.ignored_blocks == {"skyrl-console": 2}


@pytest.mark.parametrize("name", ["wandb_mirror.out", "skyrl_console.out", "python_dict.out",
                                  "json_lines.out", "iris_console.out"])
def test_streaming_in_tiny_chunks_matches_whole_text(name):
    whole = parse_log(fixture_text(name), name)
    streamed = parse_log_file(LOGS / name, source=name, chunk_bytes=37)
    assert repr(streamed.rows) == repr(whole.rows)  # repr: NaN != NaN
    assert streamed.serialization == whole.serialization
    assert streamed.eval_rows == whole.eval_rows


@pytest.mark.parametrize("name", ["skyrl_console.out", "iris_console.out", "wandb_mirror.out", "python_dict.out"])
def test_a_stream_split_anywhere_parses_the_same(name):
    data = (LOGS / name).read_bytes() + "(skyrl_entrypoint pid=2211) ünïcode nöise ✓\n".encode()
    whole = parse_log(data.decode(), name)
    for size in (1, 7, 64, 333):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        streamed = parse_log_stream(iter(chunks), name)
        assert repr(streamed.rows) == repr(whole.rows), size


def test_blocks_far_apart_in_a_large_file_keep_their_line_numbers(tmp_path):
    noise = "(AsyncVLLMInferenceEngine pid=3187) INFO Engine 000: Avg prompt throughput: 1.0 tokens/s\n" * 5000
    path = tmp_path / "big.out"
    path.write_text(noise + wandb_line(1, 0.1) + noise + wandb_line(2, 0.2))
    parsed = parse_log_file(path, chunk_bytes=4096)
    assert [(row["global_step"], row["line"]) for row in parsed.rows] == [(1, 5001), (2, 10002)]


# --------------------------------------------------------------------------- bad logs

def test_empty_log_is_an_error_naming_the_file():
    with pytest.raises(RlkeepError, match=r"attempt-0\.out: trainer log is empty"):
        parse_log("", "attempt-0.out")


def test_log_without_metric_blocks_is_an_error_naming_the_file():
    with pytest.raises(RlkeepError, match=r"noise\.out: no metric blocks found"):
        parse_log("INFO starting\nTraceback (most recent call last):\n", "noise.out")


def skipped(parsed) -> list[tuple[int, str, str]]:
    return [(entry.line, entry.kind, entry.reason) for entry in parsed.skipped]


def test_a_truncated_console_dict_is_skipped_and_named_by_line():
    parsed = parse_log_file(LOGS / "truncated_console.out", source="truncated_console.out")
    [(line, kind, reason)] = skipped(parsed)
    assert (line, kind) == (19, "skyrl-console") and reason.startswith("metric dict of 'Step 7:' is truncated")
    assert 7 not in parsed.steps and parsed.rows  # the cut step has no row; the others stay


def test_a_dict_cut_off_by_a_new_message_is_skipped():
    text = (f"{RAY}Step 3: \n{RAY}{{'reward/avg_raw_reward': '0.5000',\n"
            f"{RAY}INFO something else entirely\n{RAY}Step 4: \n{RAY}{{'reward/avg_raw_reward': '0.6000'}}\n")
    parsed = parse_log(text, "cut.out")
    assert parsed.steps == [4]
    assert [(line, kind) for line, kind, _ in skipped(parsed)] == [(1, "skyrl-console")]
    assert "is truncated" in parsed.skipped[0].reason


def test_a_broken_mirror_line_then_a_valid_one_gives_the_valid_rows():
    text = (wandb_line(1, 0.1) + 'WANDB_MIRROR kind=train step=2 metrics={"reward/avg_raw_reward": 0.2, "trai\n'
            + wandb_line(3, 0.3))
    parsed = parse_log(text, "bad.out")
    assert parsed.steps == [1, 3]
    [(line, kind, reason)] = skipped(parsed)
    assert (line, kind) == (2, "wandb-json") and reason.startswith("WANDB_MIRROR metrics are not valid JSON")


def test_a_truncated_legacy_dict_is_skipped():
    text = "{'async/staleness_max': 0, 'reward/avg_raw_reward': 0.2, 'trainer/global_step': 20}\n{'async/x': 1,\n"
    parsed = parse_log(text, "legacy.out")
    assert parsed.steps == [20] and [(line, kind) for line, kind, _ in skipped(parsed)] == [(2, "python-dict")]


def test_messy_lines_around_valid_ones_never_block():
    valid = [wandb_line(s, 0.1 * s).encode() for s in (1, 2, 3, 4, 5)]
    messy = b"".join([
        b"loading 10%\rloading 55%\r" + valid[0],                                   # 1: \r progress bar before it
        b"\x1b[32m(skyrl_entrypoint pid=7, ip=10.0.0.2)\x1b[0m " + valid[1],         # 2: ANSI colour, Ray prefix
        valid[2].rstrip(b"\n") + b" \x1b[32m[repeated 2x across cluster]\x1b[0m\n",  # 3: Ray de-duplication
        b'WANDB_MIRROR kind=train step=9 metrics={"reward/avg_raw_reward": \xe2\x82\n',  # 4: partial UTF-8, cut
        b'WANDB_MIRROR kind=train step=8 metrics={"reward/avg(raylet) INFO spill\n',    # 5: another process's
        b'": 0.2}\n',                                                                  # 6:   line inside it
        valid[3],                                                                      # 7
        valid[4].rstrip(b"\n")[:-7] + b"\0" * 64])                                     # 8: cut, then NULs
    parsed = parse_log_stream([messy], "messy.out")
    assert parsed.steps == [1, 2, 3, 4]
    assert [(line, kind) for line, kind, _ in skipped(parsed)] == [(4, "wandb-json"), (5, "wandb-json"),
                                                                 (8, "wandb-json")]


def test_a_log_whose_only_metric_line_was_cut_has_no_parsable_metric_line():
    cut = wandb_line(1, 0.1)[:-12].encode() + b"\0" * 300
    with pytest.raises(NoMetricsError, match=r"cut\.out: no parsable metric line \(1 skipped, the first at line 1") as caught:
        parse_log_stream([cut], "cut.out")
    assert caught.value.reason == "no_parsable_metric_line" and caught.value.skipped[0].line == 1


def test_mirror_with_only_eval_rows_is_an_error():
    with pytest.raises(RlkeepError, match=r"eval\.out: wandb-json metric lines found but none is a training row"):
        parse_log(wandb_line(2, 0.3, kind="eval"), "eval.out")


# --------------------------------------------------------------------------- the surface

def chain_logs(*attempts: tuple[str, dict[int, float]]) -> list[tuple[str, str, str]]:
    return [(slug, f"{slug}.out", "".join(wandb_line(step, value) for step, value in steps.items()))
            for slug, steps in attempts]


def test_chain_order_is_the_callers_not_file_name_order():
    # "-r10" sorts before "-r9": a sorted() chain would let r9 (older) overwrite r10
    logs = chain_logs(("rl-swe", {1: 0.1, 2: 0.2}), ("rl-swe-r9", {2: 0.3, 3: 0.4}), ("rl-swe-r10", {3: 0.5, 4: 0.6}))
    surface = build_surface(logs)
    assert [(row["global_step"], row["attempt"], row["reward/avg_raw_reward"]) for row in surface.rows] == [
        (1, "rl-swe", 0.1), (2, "rl-swe-r9", 0.3), (3, "rl-swe-r10", 0.5), (4, "rl-swe-r10", 0.6)]
    assert [info["attempt"] for info in surface.files] == ["rl-swe", "rl-swe-r9", "rl-swe-r10"]
    reordered = build_surface(sorted(logs))
    assert reward_by_step(reordered.rows)[3] == 0.4  # proves the order given is what counts


def test_later_attempt_supersedes_every_row_from_its_resume_point():
    logs = chain_logs(("run", {step: step / 100 for step in range(1, 46)}),
                      ("run-r1", {41: 0.9, 42: 0.91}))
    surface = build_surface(logs)
    assert surface.steps() == list(range(1, 43))
    assert {row["attempt"] for row in surface.rows if row["global_step"] > 40} == {"run-r1"}
    superseded = {row["global_step"]: row for row in surface.superseded}
    assert sorted(superseded) == [41, 42, 43, 44, 45]
    assert superseded[41]["attempt"] == "run" and superseded[41]["superseded_by"] == "run-r1"
    assert superseded[41]["reason"] == "re-logged by later attempt run-r1"
    assert superseded[44]["reason"] == "after the resume point (step 41) of later attempt run-r1"
    assert superseded[44]["reward/avg_raw_reward"] == 0.44


def test_same_step_twice_in_one_attempt_merges_and_keeps_the_overwritten_block():
    text = wandb_line(1, 0.1) + 'WANDB_MIRROR kind=train step=1 metrics={"timing/step": 5.0}\n' + wandb_line(1, 0.7)
    surface = build_surface([("a", "a.out", text)])
    assert surface.rows == [{"global_step": 1, "line": 3, "attempt": "a", "source": "a.out",
                             "reward/avg_raw_reward": 0.7, "timing/step": 5.0, "trainer/global_step": 1}]
    (old,) = surface.superseded
    assert old["reward/avg_raw_reward"] == 0.1 and "same log" in old["reason"]


def test_an_attempt_listed_twice_is_an_error():
    with pytest.raises(RlkeepError, match="attempt 'a' appears twice"):
        build_surface(chain_logs(("a", {1: 0.1}), ("a", {2: 0.2})))


def test_ema_series_hand_computed():
    assert ema_series([0.2, 0.8], 1 / 3) == pytest.approx([0.2, 0.4])
    assert ema_series([0.0, 1.0, 1.0], 1 / 3) == pytest.approx([0.0, 1 / 3, 5 / 9])


def test_numeric_series_errors_name_metric_file_and_line():
    surface = build_surface([("a", "a.out", wandb_line(1, 0.1) +
                              'WANDB_MIRROR kind=train step=2 metrics={"reward/avg_raw_reward": "n/a"}\n')])
    with pytest.raises(RlkeepError, match=r"'reward/avg_raw_reward' has a non-numeric value 'n/a' at step 2 \(a\.out:2\)"):
        numeric_series(surface.rows, "reward/avg_raw_reward")
    with pytest.raises(RlkeepError, match=r"metric 'reward/avg_pass_at_8' is absent .*available: reward/avg_raw_reward"):
        numeric_series(surface.rows, "reward/avg_pass_at_8")


# --------------------------------------------------------------------------- trials

EXAMPLE_RESULT = {
    "id": "8b1f2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    "task_name": "codecontests-1234",
    "trial_name": "codecontests-1234__Xk3pQ9a",
    "trial_uri": "file:///mnt/local_storage/trials_run/codecontests-1234__Xk3pQ9a",
    "task_id": {"path": "/data/harbor/CodeContests/codecontests-1234"},
    "source": None,
    "task_checksum": "9d2f4c1b7a0e58c3b6d1e4f2a7c9b0e13f5a8d6c2b4e7f9a1c3d5e7f9b2a4c6e",
    "config": {"agent": {"name": "terminus-2", "model_name": "hosted_vllm/Qwen3-8B",
                         "kwargs": {"max_turns": 32, "collect_rollout_details": True,
                                    "llm_kwargs": {"extra_body": {"cache_salt": "Qwen3-8B@12"}}}}, "job_id": None},
    "agent_info": {"name": "terminus-2", "version": "2.0.0", "model_info": {"name": "Qwen3-8B", "provider": "hosted_vllm"}},
    "agent_result": {"n_input_tokens": 18234, "n_cache_tokens": 0, "n_output_tokens": 2210, "cost_usd": None,
                     "rollout_details": [{"prompt_token_ids": [[151644, 8948]], "completion_token_ids": [[40, 151645]],
                                          "logprobs": [[-0.01, -0.4]]}],
                     "metadata": {"n_episodes": 2, "api_request_times_msec": [812.4, 640.1], "summarization_count": 0}},
    "verifier_result": {"rewards": {"reward": 1.0}},
    "exception_info": None,
    "started_at": "2026-03-30T17:04:11.512345Z",
    "finished_at": "2026-03-30T17:05:45.512345Z",
    "environment_setup": {"started_at": "2026-03-30T17:04:11.512345Z", "finished_at": "2026-03-30T17:04:25.512345Z"},
    "agent_setup": {"started_at": "2026-03-30T17:04:25.512345Z", "finished_at": "2026-03-30T17:04:30.512345+00:00"},
    "agent_execution": {"started_at": "2026-03-30T17:04:30.512345Z", "finished_at": "2026-03-30T17:05:31.512345Z"},
    "verifier": None,
}


def failed_result() -> dict:
    result = json.loads(json.dumps(EXAMPLE_RESULT))
    result.update(trial_name="codecontests-77__Ab12Cd3", task_name="codecontests-77", verifier_result=None,
                  exception_info={"exception_type": "AgentTimeoutError",
                                  "exception_message": "Agent execution timed out after 1200.0 seconds",
                                  "exception_traceback": "Traceback \"quoted\" \\ …", "occurred_at": "2026-03-30T17:24:31.901122"})
    result["agent_setup"] = {"started_at": "2026-03-30T17:04:25", "finished_at": "2026-03-30T17:04:30Z"}
    return result


def test_trial_rows_from_harbor_result_json():
    ok = json.dumps(EXAMPLE_RESULT, indent=4).encode()
    failed = json.dumps(failed_result(), indent=4, ensure_ascii=False).encode()
    rows = trials_from_results([("codecontests-77__Ab12Cd3", failed), ("codecontests-1234__Xk3pQ9a", ok)])
    assert [row["trial"] for row in rows] == ["codecontests-1234__Xk3pQ9a", "codecontests-77__Ab12Cd3"]
    good, bad = rows
    assert good == {"trial": "codecontests-1234__Xk3pQ9a", "task": "codecontests-1234", "reward": 1.0,
                    "exception_type": None, "n_input_tokens": 18234, "n_output_tokens": 2210, "n_episodes": 2,
                    "trial_duration": 94.0, "environment_setup_duration": 14.0, "agent_setup_duration": 5.0,
                    "agent_execution_duration": 61.0, "verifier_duration": None, "error": None}
    assert bad["reward"] is None and bad["exception_type"] == "AgentTimeoutError" and bad["error"] is None
    assert bad["agent_setup_duration"] is None  # naive start, zoned finish: not guessed


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "empty"),
    (b"   \n", "empty"),
    (json.dumps(EXAMPLE_RESULT).encode()[:-40], "truncated"),
    (b'{"task_name": "x", "verifier_result": {"rewards": {"reward": 1.0}} oops}', "invalid-json"),
    (b"[1, 2, 3]", "not-an-object"),
    (b'{"task_name": "x", "verifier_result": [1]}', "unexpected-shape"),
    (b'{"task_name": "x"} trailing', "invalid-json"),
])
def test_malformed_result_json_is_counted_by_reason_not_fatal(data, reason):
    good = json.dumps(EXAMPLE_RESULT).encode()
    rows = trials_from_results([("bad", data), ("good", good)])
    by_trial = {row["trial"]: row for row in rows}
    assert by_trial["bad"]["error"].split(":")[0] == reason
    assert by_trial["good"]["reward"] == 1.0


def test_huge_rollout_details_are_skipped_not_decoded(tmp_path):
    result = json.loads(json.dumps(EXAMPLE_RESULT))
    turn = {"prompt_token_ids": [list(range(151000, 151000 + 4000))] * 40,
            "completion_token_ids": [list(range(4000))] * 40, "logprobs": [[-0.0123] * 4000] * 40}
    result["agent_result"]["rollout_details"] = [turn] * 2  # indent 4 as harbor writes: ~30 MB
    path = tmp_path / "trace_jobs" / "big__Zz9Yy8x" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result, indent=4))
    size = path.stat().st_size
    assert size > 20_000_000
    tracemalloc.start()
    (row,) = trials_from_results(iter_result_files(tmp_path / "trace_jobs"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert row["n_input_tokens"] == 18234 and row["reward"] == 1.0 and row["error"] is None
    assert peak < size / 20  # never materialised: json.loads of it would take many times its size


# --------------------------------------------------------------------------- outputs and CLI

def sample_surface() -> Surface:
    return build_surface([
        ("rl-swe", "rl-swe.out", fixture_text("wandb_mirror.out")),
        ("rl-swe-r1", "rl-swe-r1.out", "".join(wandb_line(step, step / 10) for step in range(3, 8))),
    ])


def test_write_outputs_files_columns_and_deterministic_bytes(tmp_path):
    surface = sample_surface()
    trials = trials_from_results([("t1", json.dumps(EXAMPLE_RESULT).encode()),
                                  ("t2", json.dumps(failed_result()).encode()), ("t3", b"{")])
    first, second = tmp_path / "one", tmp_path / "two"
    for out in (first, second):
        write_outputs(surface, trials, out, candidates=[2, 4], selected_step=4, behavior_break_step=6, job="rl-swe")
    names = {"metrics.csv", "superseded.csv", "eval.csv", "attempts.json", "trials.csv", "trials.md", "report.md",
             "reward.png"}
    assert {path.name for path in first.iterdir()} == names  # no temp files left behind
    for name in names - {"reward.png"}:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    header = (first / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:2] == ["global_step", "attempt"] and header[2:] == sorted(header[2:])
    rows = read_csv(first / "metrics.csv")
    assert [(r["global_step"], r["attempt"]) for r in rows] == [("1", "rl-swe"), ("2", "rl-swe")] + [
        (str(step), "rl-swe-r1") for step in range(3, 8)]
    assert rows[1]["reward/avg_pass_at_8"] == "nan"
    (old,) = read_csv(first / "superseded.csv")
    assert (old["global_step"], old["attempt"], old["superseded_by"]) == ("3", "rl-swe", "rl-swe-r1")
    trial_rows = read_csv(first / "trials.csv")
    assert [r["trial"] for r in trial_rows] == ["t1", "t2", "t3"] and trial_rows[2]["error"].startswith("truncated")
    report = (first / "report.md").read_text()
    for expected in ("| 1 | rl-swe | rl-swe.out | wandb-json | 1-3 | 2 |", "## Progression", "## Trial outcomes",
                     "malformed result.json by reason: truncated: 1", "| AgentTimeoutError | 1 |",
                     "success (reward > 0): 1 = 50.0%", "Behavior break: step 6", "## Timing"):
        assert expected in report, expected
    png = (first / "reward.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_cli_metrics_in_chain_order(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rl-swe-r9.out").write_text("".join(wandb_line(s, 0.1) for s in (1, 2, 3)))
    (logs / "rl-swe-r10.out").write_text("".join(wandb_line(s, 0.9) for s in (3, 4)))
    traces = tmp_path / "trace_jobs"
    (traces / "codecontests-1234__Xk3pQ9a").mkdir(parents=True)
    (traces / "codecontests-1234__Xk3pQ9a" / "result.json").write_text(json.dumps(EXAMPLE_RESULT, indent=4))
    (traces / "unfinished__Qq1Ww2e" / "agent").mkdir(parents=True)
    out = tmp_path / "metrics"
    status = cli.main(["metrics", str(logs / "rl-swe-r9.out"), str(logs / "rl-swe-r10.out"),
                       "--out", str(out), "--results-dir", str(traces)])
    assert status == 0
    rows = read_csv(out / "metrics.csv")
    assert [(r["global_step"], r["attempt"], r["reward/avg_raw_reward"]) for r in rows] == [
        ("1", "rl-swe-r9", "0.1"), ("2", "rl-swe-r9", "0.1"), ("3", "rl-swe-r10", "0.9"), ("4", "rl-swe-r10", "0.9")]
    assert [r["trial"] for r in read_csv(out / "trials.csv")] == ["codecontests-1234__Xk3pQ9a"]
    assert "4 steps, 1 superseded rows, 1 trials" in capsys.readouterr().out


def test_cli_metrics_skips_a_broken_line_before_a_valid_one(tmp_path, capsys):
    log = tmp_path / "rl-swe.out"
    log.write_bytes(wandb_line(1, 0.1).encode() + b'WANDB_MIRROR kind=train step=2 metrics={"reward/avg_r\n'
                    + wandb_line(2, 0.2).encode())
    out = tmp_path / "out"
    assert cli.main(["metrics", str(log), "--out", str(out)]) == 0
    assert [(r["global_step"], r["reward/avg_raw_reward"]) for r in read_csv(out / "metrics.csv")] == [("1", "0.1"), ("2", "0.2")]
    printed = capsys.readouterr().out
    assert f"{log}:2: skipped wandb-json line: WANDB_MIRROR metrics are not valid JSON" in printed
    assert "1 unparsable metric lines skipped" in printed
    assert json.loads((out / "attempts.json").read_text())["skipped_lines"]["count"] == 1


def test_cli_metrics_names_an_attempt_whose_only_line_was_cut(tmp_path, capsys):
    cut, resumed = tmp_path / "rl-swe.out", tmp_path / "rl-swe-r1.out"
    cut.write_bytes(wandb_line(1, 0.1).encode()[:-20] + b"\0" * 100)
    resumed.write_text(wandb_line(1, 0.3) + wandb_line(2, 0.4))
    out = tmp_path / "out"
    assert cli.main(["metrics", str(cut), str(resumed), "--out", str(out)]) == 0
    assert [(r["global_step"], r["attempt"]) for r in read_csv(out / "metrics.csv")] == [("1", "rl-swe-r1"), ("2", "rl-swe-r1")]
    printed = capsys.readouterr().out
    assert f"{cut}: no metrics (no_parsable_metric_line), no rows" in printed and f"{cut}:1: skipped wandb-json" in printed


def test_cli_reports_a_bad_log_by_name(tmp_path, capsys):
    empty = tmp_path / "rl-swe.out"
    empty.write_text("")
    assert cli.main(["metrics", str(empty), "--out", str(tmp_path / "out")]) == 1
    assert f"rlkeep: {empty}: trainer log is empty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert cli.main(["metrics", str(tmp_path / "missing.out"), "--out", str(tmp_path / "out")]) == 1
    assert "missing.out: trainer log does not exist" in capsys.readouterr().err


def test_surface_rows_hold_provenance_for_error_messages():
    surface = sample_surface()
    row = next(row for row in surface.rows if row["global_step"] == 2)
    assert (row["attempt"], row["source"], row["line"]) == ("rl-swe", "rl-swe.out", 9)


def test_console_dict_on_the_header_line_and_eval_blocks_merge_into_the_step():
    text = (f"{RAY}{E}[1mStep 3: {{'reward/avg_raw_reward': '0.5000', 'trainer/global_step': 3}}{E}[0m\n"
            f"{RAY}{E}[1mStep 3: \n{RAY}{{'eval/all/avg_score': '0.2500',\n{RAY} 'trainer/global_step': 3}}{E}[0m\n")
    parsed = parse_log(text, "inline.out")
    assert parsed.serialization == "skyrl-console"
    surface = build_surface([("a", "inline.out", text)])
    assert surface.rows == [{"global_step": 3, "line": 2, "attempt": "a", "source": "inline.out",
                             "reward/avg_raw_reward": 0.5, "eval/all/avg_score": 0.25, "trainer/global_step": 3}]
    assert surface.superseded == []  # no value was overwritten, so nothing was replaced


def test_mirror_lines_behind_iris_prefixes():
    text = "".join(f"[17:05:4{step}] task=/benjaminfeuer/rl-qwen3-swe-v3/0 attempt=1 | {wandb_line(step, step / 4)}"
                   for step in (1, 2))
    parsed = parse_log(text, "iris.out")
    assert parsed.serialization == "wandb-json" and reward_by_step(parsed.rows) == {1: 0.25, 2: 0.5}


def test_a_dict_without_header_or_async_key_is_not_a_metric_block():
    with pytest.raises(RlkeepError, match="no metric blocks found"):
        detect_serialization(f"{RAY}{{'lr': 0.1, 'batch_size': 64}}\n{RAY}config: {{'a': 1}}\n", "cfg.out")


def test_metrics_csv_reads_back_into_surface_rows_with_csv_locations(tmp_path):
    surface = build_surface([("a", "a.out", wandb_line(1, 0.1) + wandb_line(2, 0.2) + wandb_line(10, 0.3))])
    write_outputs(surface, [], tmp_path)
    rows = read_metrics_csv(tmp_path / "metrics.csv")
    assert [(r["global_step"], r["reward/avg_raw_reward"], r["line"]) for r in rows] == [(1, 0.1, 2), (2, 0.2, 3), (10, 0.3, 4)]
    assert numeric_series(rows, "reward/avg_raw_reward") == [(1, 0.1), (2, 0.2), (10, 0.3)]  # 10 after 2: numeric order
    text = (tmp_path / "metrics.csv").read_text().replace("0.2,2", "oops,2")
    (tmp_path / "metrics.csv").write_text(text)
    with pytest.raises(RlkeepError, match=r"non-numeric value 'oops' at step 2 \(.*metrics\.csv:3\)"):
        numeric_series(read_metrics_csv(tmp_path / "metrics.csv"), "reward/avg_raw_reward")


def add_member(tar, name: str, data: bytes) -> None:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_metric_surface_and_trial_table_steps_read_their_own_tars(tmp_path, monkeypatch):
    import tarfile

    from rlkeep import metrics
    from rlkeep.context import StepContext
    from rlkeep.records import load_record

    job = "rl-swe"
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / f"{job}.yaml").write_text(
        f"job: {job}\nuser: benjaminfeuer\nscheduler: none\nchain:\n  - /benjaminfeuer/{job}-r9\n  - /benjaminfeuer/{job}-r10\n"
        f"store: file://{tmp_path}/store\ncheckpoint:\n  interval: 20\n  behavior_break_step: 4\n")
    logs, traces = tmp_path / "logs.tar", tmp_path / "trace_jobs.tar"
    with tarfile.open(logs, "w") as tar:  # r10 first in the tar, and "-r10" sorts before "-r9"
        add_member(tar, f"attempts/{job}-r10/trainer.log", "".join(wandb_line(s, 0.9) for s in (3, 4)).encode())
        add_member(tar, f"attempts/{job}-r9/trainer.log", fixture_text("wandb_mirror.out").encode())
        add_member(tar, "store/logs/other.txt", b"not a trainer log")
    with tarfile.open(traces, "w") as tar:
        add_member(tar, "codecontests-1234__Xk3pQ9a/result.json", json.dumps(EXAMPLE_RESULT, indent=4).encode())
        add_member(tar, "codecontests-1234__Xk3pQ9a/agent/trajectory.json", b"{}")
        add_member(tar, "codecontests-77__Ab12Cd3/result.json", json.dumps(failed_result(), indent=4).encode())
    monkeypatch.setattr(metrics.step, "IN_MEMORY_RESULT_BYTES", 2000)  # the larger result.json goes through mmap
    out = tmp_path / job / "metrics"
    record = load_record(tmp_path / "records" / f"{job}.yaml")
    surface = StepContext(job=job, record=record, data_root=tmp_path, inputs={"logs": logs},
                          outputs={name.split(".")[0]: out / name for name in metrics.SURFACE_FILES})
    metrics.metric_surface_step(surface)  # no trace tarball among its inputs, and it needs none
    rows = read_csv(out / "metrics.csv")
    assert [(r["global_step"], r["attempt"]) for r in rows] == [("1", f"{job}-r9"), ("2", f"{job}-r9"),
                                                              ("3", f"{job}-r10"), ("4", f"{job}-r10")]
    report = (out / "report.md").read_text()
    assert "Behavior break: step 4" in report and "See trials.md" in report
    assert not (out / "trials.csv").exists()
    assert json.loads((out / "attempts.json").read_text())["attempts_without_metrics"] == []

    trial_ctx = StepContext(job=job, record=record, data_root=tmp_path, inputs={"traces": traces},
                            outputs={"trials": out / "trials.csv", "report": out / "trials.md"})
    metrics.trial_table_step(trial_ctx)
    trials = read_csv(out / "trials.csv")
    assert [(t["trial"], t["reward"], t["exception_type"]) for t in trials] == [
        ("codecontests-1234__Xk3pQ9a", "1.0", ""), ("codecontests-77__Ab12Cd3", "", "AgentTimeoutError")]
    assert "| AgentTimeoutError | 1 |" in (out / "trials.md").read_text()
    assert list((tmp_path / job / ".work" / "trial_table").iterdir()) == []  # the spilled copy is gone


def dead_chain_context(tmp_path, logs_by_attempt: dict[str, bytes], states: dict[str, str] | None = None):
    """A record whose chain is logs_by_attempt's keys, logs.tar holding those logs, its manifest."""
    import tarfile

    from rlkeep import metrics
    from rlkeep.context import StepContext
    from rlkeep.records import load_record
    from rlkeep.sync import line_count

    chain = "".join(f"  - /u/{slug}\n" for slug in logs_by_attempt)
    (tmp_path / "rl-swe.yaml").write_text(
        f"job: rl-swe\nuser: u\nscheduler: none\nchain:\n{chain}store: file://{tmp_path}/store\ncheckpoint:\n  interval: 2\n")
    logs = tmp_path / "logs.tar"
    with tarfile.open(logs, "w") as tar:
        for slug, data in logs_by_attempt.items():
            add_member(tar, f"attempts/{slug}/trainer.log", data)
    manifest = tmp_path / "logs.manifest.json"
    manifest.write_text(json.dumps({"attempts": [
        {"attempt": slug, "state": (states or {}).get(slug), "bytes": len(data), "lines": line_count(data)}
        for slug, data in logs_by_attempt.items()]}))
    out = tmp_path / "rl-swe" / "metrics"
    return StepContext(job="rl-swe", record=load_record(tmp_path / "rl-swe.yaml"), data_root=tmp_path,
                       inputs={"logs": logs, "logs_manifest": manifest},
                       outputs={name.split(".")[0]: out / name for name in metrics.SURFACE_FILES}), out


TRACEBACK_ONLY = (b"Traceback (most recent call last):\n  File \"/app/main.py\", line 12, in <module>\n"
                  b"    init_cuda()\nRuntimeError: CUDA error: uncorrectable ECC error encountered\n")


def test_dead_attempts_are_named_and_add_no_rows(tmp_path):
    from rlkeep import metrics

    logs = {"rl-swe": "".join(wandb_line(s, 0.1 * s) for s in (1, 2, 3, 4)).encode(),
            "rl-swe-r1": TRACEBACK_ONLY,
            "rl-swe-r2": b"",
            "rl-swe-r3": "".join(wandb_line(s, 0.5) for s in (3, 4, 5)).encode()}
    ctx, out = dead_chain_context(tmp_path, logs, {"rl-swe": "failed", "rl-swe-r1": "failed", "rl-swe-r2": "killed",
                                                   "rl-swe-r3": "succeeded"})
    metrics.metric_surface_step(ctx)
    rows = read_csv(out / "metrics.csv")
    assert [(r["global_step"], r["attempt"]) for r in rows] == [
        ("1", "rl-swe"), ("2", "rl-swe"), ("3", "rl-swe-r3"), ("4", "rl-swe-r3"), ("5", "rl-swe-r3")]
    assert {r["attempt"] for r in read_csv(out / "superseded.csv")} == {"rl-swe"}  # the dead ones replace nothing
    attempts = json.loads((out / "attempts.json").read_text())
    assert attempts["chain"] == list(logs)
    assert [(e["attempt"], e["reason"], e["state"], e["bytes"], e["lines"]) for e in attempts["attempts_without_metrics"]] == [
        ("rl-swe-r1", "no_metric_blocks", "failed", len(TRACEBACK_ONLY), 4), ("rl-swe-r2", "empty", "killed", 0, 0)]
    report = (out / "report.md").read_text()
    assert "- Attempts (chain order): 4, 2 without metrics" in report
    assert "| 2 | rl-swe-r1 | logs.tar:attempts/rl-swe-r1/trainer.log | none (no_metric_blocks) | none | 0 | - |" in report
    assert "## Attempts without metrics" in report and "| rl-swe-r2 | empty | killed | 0 | 0 |" in report


def test_a_chain_without_any_metrics_fails_naming_every_attempt(tmp_path):
    from rlkeep import metrics

    ctx, out = dead_chain_context(tmp_path, {"rl-swe": TRACEBACK_ONLY, "rl-swe-r1": b"\n"})
    with pytest.raises(RlkeepError, match=r"no attempt of the chain logged metrics: rl-swe \(no_metric_blocks\), "
                                          r"rl-swe-r1 \(empty\).*nothing to select"):
        metrics.metric_surface_step(ctx)
    assert not out.exists()


def test_a_truncated_metric_block_is_skipped_and_counted_in_the_outputs(tmp_path):
    from rlkeep import metrics

    good = "".join(wandb_line(s, 0.1) for s in (1, 2)).encode()
    truncated = b"Step 3: \n{'policy/grad_norm': '0.1000',\n 'reward/avg_raw_reward': '0.2"
    ctx, out = dead_chain_context(tmp_path, {"rl-swe": good, "rl-swe-r1": truncated})
    metrics.metric_surface_step(ctx)
    assert [r["global_step"] for r in read_csv(out / "metrics.csv")] == ["1", "2"]
    attempts = json.loads((out / "attempts.json").read_text())
    assert [(e["attempt"], e["reason"], e["skipped_lines"]) for e in attempts["attempts_without_metrics"]] == [
        ("rl-swe-r1", "no_parsable_metric_line", 1)]
    summary = attempts["skipped_lines"]
    assert summary["count"] == 1 and summary["by_attempt"] == {"rl-swe-r1": {"skyrl-console": 1}}
    assert summary["named"][0]["source"] == "logs.tar:attempts/rl-swe-r1/trainer.log" and summary["named"][0]["line"] == 1
    report = (out / "report.md").read_text()
    assert "## Skipped log lines" in report and "| logs.tar:attempts/rl-swe-r1/trainer.log:1 | skyrl-console |" in report


def test_a_chain_whose_every_metric_line_was_cut_still_blocks(tmp_path):
    from rlkeep import metrics

    cut = wandb_line(1, 0.1)[:-9].encode()
    ctx, out = dead_chain_context(tmp_path, {"rl-swe": cut, "rl-swe-r1": cut + b"\0" * 64})
    with pytest.raises(RlkeepError, match=r"no attempt of the chain logged metrics: rl-swe \(no_parsable_metric_line\), "
                                          r"rl-swe-r1 \(no_parsable_metric_line\)"):
        metrics.metric_surface_step(ctx)
    assert not out.exists()


def test_an_unreadable_logs_tar_blocks_with_the_reason(tmp_path):
    from rlkeep import metrics

    ctx, _ = dead_chain_context(tmp_path, {"rl-swe": b"x" * 2000})
    ctx.inputs["logs"].write_bytes(ctx.inputs["logs"].read_bytes()[:700])  # cut inside the member
    with pytest.raises(RlkeepError, match=r"logs\.tar"):
        metrics.metric_surface_step(ctx)


def test_metric_surface_step_names_a_missing_attempt_log(tmp_path):
    import tarfile

    from rlkeep import metrics
    from rlkeep.context import StepContext
    from rlkeep.records import load_record

    (tmp_path / "rl-swe.yaml").write_text(
        "job: rl-swe\nuser: u\nscheduler: none\nchain:\n  - /u/rl-swe\n  - /u/rl-swe-r1\n"
        f"store: file://{tmp_path}/store\ncheckpoint:\n  interval: 20\n")
    logs = tmp_path / "logs.tar"
    with tarfile.open(logs, "w") as tar:
        add_member(tar, "attempts/rl-swe/trainer.log", wandb_line(1, 0.5).encode())
    ctx = StepContext(job="rl-swe", record=load_record(tmp_path / "rl-swe.yaml"), data_root=tmp_path,
                      inputs={"logs": logs}, outputs={"metrics": tmp_path / "m" / "metrics.csv"})
    with pytest.raises(RlkeepError, match=r"logs\.tar: no attempts/rl-swe-r1/trainer\.log"):
        metrics.metric_surface_step(ctx)
