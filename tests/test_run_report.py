"""Run analysis (rlkeep/run_report.py) against numbers computed by hand."""
from __future__ import annotations

import pytest

from rlkeep.run_report import category_summaries, markdown, timing_tree, trial_analysis

# step 1: 100 s; generate 60 + train 30 + sync 5 = 95 -> 5 s unattributed, 0 overlap
# step 2: 200 s; generate 150 + train 60 + sync 10 = 220 -> 0 unattributed, 20 s overlap (async generation)
# step 3: no timing/step: left out of the tree; its save_checkpoints (outside the step) still counts
ROWS = [
    {"global_step": 1, "timing/step": 100, "timing/generate": 60, "timing/policy_train": 30, "timing/sync_weights": 5,
     "reward/avg_raw_reward": 0.2},
    {"global_step": 2, "timing/step": 200, "timing/generate": 150, "timing/policy_train": 60, "timing/sync_weights": 10,
     "timing/save_checkpoints": 30, "reward/avg_raw_reward": 0.4},
    {"global_step": 3, "timing/step": "", "timing/save_checkpoints": 15, "reward/avg_raw_reward": "nan"},
]

# trial durations 100 + 50 = 150 s; phases env 10+5, agent_setup 5+5, agent_execution 70+30, verifier 10+5
TRIALS = [
    {"trial": "a", "reward": "1.0", "exception_type": "", "n_episodes": "4", "trial_duration": "100",
     "environment_setup_duration": "10", "agent_setup_duration": "5", "agent_execution_duration": "70",
     "verifier_duration": "10"},
    {"trial": "b", "reward": "0.0", "exception_type": "", "n_episodes": "2", "trial_duration": "50",
     "environment_setup_duration": "5", "agent_setup_duration": "5", "agent_execution_duration": "30",
     "verifier_duration": "5"},
    {"trial": "c", "reward": "", "exception_type": "AgentTimeoutError", "n_episodes": "4", "trial_duration": "",
     "environment_setup_duration": "", "agent_setup_duration": "", "agent_execution_duration": "",
     "verifier_duration": ""},
]


def test_timing_shares_of_step_time() -> None:
    tree = timing_tree(ROWS)
    assert tree["steps"] == 2 and tree["step_seconds"] == 300
    assert tree["spans"]["generate"] == {"seconds": 210, "share": pytest.approx(0.7)}
    assert tree["spans"]["policy_train"] == {"seconds": 90, "share": pytest.approx(0.3)}
    assert tree["spans"]["sync_weights"] == {"seconds": 15, "share": pytest.approx(0.05)}
    assert tree["unattributed"] == {"seconds": 5, "share": pytest.approx(5 / 300)}
    assert tree["overlap"] == {"seconds": 20, "share": pytest.approx(20 / 300)}
    assert tree["outside_step"] == {"save_checkpoints": {"seconds": 45, "count": 2,
                                                         "share_of_step_time": pytest.approx(0.15)}}
    assert timing_tree([{"reward/avg_raw_reward": 1}]) is None


def test_trial_phase_shares_turns_exceptions_and_reward() -> None:
    analysis = trial_analysis(TRIALS)
    assert analysis["duration_seconds"] == 150
    assert {name: v["share"] for name, v in analysis["phases"].items()} == {
        "environment_setup": pytest.approx(0.1), "agent_setup": pytest.approx(10 / 150),
        "agent_execution": pytest.approx(100 / 150), "verifier": pytest.approx(0.1)}
    assert analysis["other"] == {"seconds": 10, "share": pytest.approx(10 / 150)}
    assert analysis["turns"] == {"distribution": {2: 1, 4: 2}, "mean": pytest.approx(10 / 3)}
    assert analysis["turns_by_outcome"] == {"exception": 4, "failure": 2, "success": 4}
    assert analysis["exceptions"] == {"AgentTimeoutError": 1}
    assert analysis["reward_mean"] == 0.5 and analysis["success_rate"] == 0.5 and analysis["with_reward"] == 2
    assert trial_analysis([]) is None


def test_category_summaries_skip_missing_and_nan() -> None:
    reward = category_summaries(ROWS)["reward"]
    assert reward == [{"metric": "reward/avg_raw_reward", "mean": pytest.approx(0.3), "std": pytest.approx(0.1),
                       "min": 0.2, "max": 0.4, "count": 2}]


def test_sections_say_when_data_is_absent() -> None:
    text = markdown([], None)
    assert "Not available: no step logged timing/step." in text
    assert "Not available: no trial table" in text
    full = markdown(ROWS, TRIALS)
    assert "| timing/generate | 210 | 70.0% |" in full and "| overlap (span time beyond the step) | 20 | 6.7% |" in full
    assert "| agent_execution phase | 100 | 66.7% |" in full and "Not available" not in full


def test_training_progression_has_one_row_per_step() -> None:
    from rlkeep.run_report import progression

    headers, table = progression(ROWS)
    assert headers == ["step", "reward (reward/avg_raw_reward)", "step time (timing/step)"]
    assert table == [["1", "0.200", "100"], ["2", "0.400", "200"], ["3", "", ""]]
    assert progression([{"global_step": 1}]) is None


# ----------------------------------------------------------------------------- vLLM utilisation
# Two engines of one attempt, in the forms vLLM prints (V1 with an Engine index, a V1 line with
# Preemptions and an `n/a` cache, a V0 line with Swapped/Pending and the prefix cache on its own line).
# Second 17:05:40: engine A (pid 11) logs twice -> its last report counts (prompt 300, gen 30,
#   running 3, waiting 1, KV 30 %, prefix 60 %); engine B (pid 22): prompt 100, gen 10, running 1,
#   waiting 2, KV 10 %, prefix 20 %.  Sum: prompt 400, gen 40, running 4, waiting 3; means: KV 20, prefix 40.
# Second 17:05:45: engine A only, `Preemptions: 2` and KV `n/a`: prompt 50, gen 5, running 2, waiting 0,
#   KV absent, prefix 10 %.
# Second 17:05:50: a V0 engine (pid 33): prompt 7, gen 70, running 5, Pending 4 = waiting, KV 50 %, and
#   its separate prefix line GPU 25 %.
# A Ray-folded line adds 3 reports without numbers; a stat line without vLLM's time is left out.
VLLM_LOG = """\
(AsyncVLLMInferenceEngine pid=11, ip=10.0.0.1) INFO 03-30 17:05:40 [loggers.py:123] Engine 000: Avg prompt throughput: 200.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 9 reqs, Waiting: 9 reqs, GPU KV cache usage: 90.0%, Prefix cache hit rate: 90.0%
(AsyncVLLMInferenceEngine pid=11, ip=10.0.0.1) \x1b[32mINFO\x1b[0m 03-30 17:05:40 [loggers.py:123] Engine 000: Avg prompt throughput: 300.0 tokens/s, Avg generation throughput: 30.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 30.0%, Prefix cache hit rate: 60.0%
(AsyncVLLMInferenceEngine pid=22, ip=10.0.0.2) INFO 03-30 17:05:40 [loggers.py:123] Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 1 reqs, Waiting: 2 reqs, GPU KV cache usage: 10.0%, Prefix cache hit rate: 20.0%
(skyrl_entrypoint pid=5) 2026-03-30 17:05:42.000 | INFO | x:y:1 - unrelated line with throughput in it
(AsyncVLLMInferenceEngine pid=11, ip=10.0.0.1) INFO 03-30 17:05:45 [loggers.py:123] Engine 000: Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: n/a, Prefix cache hit rate: 10.0%
(AsyncVLLMInferenceEngine pid=33) INFO 03-30 17:05:50 metrics.py:455] Avg prompt throughput: 7.0 tokens/s, Avg generation throughput: 70.0 tokens/s, Running: 5 reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache usage: 50.0%, CPU KV cache usage: 0.0%.
(AsyncVLLMInferenceEngine pid=33) INFO 03-30 17:05:50 metrics.py:471] Prefix cache hit rate: GPU: 25.00%, CPU: 0.00%
(AsyncVLLMInferenceEngine pid=11, ip=10.0.0.1) INFO 03-30 17:05:55 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 1.0% [repeated 3x across cluster]
Engine 000: Avg prompt throughput: 9.0 tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 9 reqs, Waiting: 9 reqs
"""


def test_vllm_stats_per_second_across_engines() -> None:
    from rlkeep.vllm_stats import per_second, scan_lines, summary

    stats = scan_lines(VLLM_LOG.splitlines(), "a1")
    assert stats.untimed_lines == 1 and stats.repeated_reports == 3
    rows = per_second(stats)
    assert [(r["time"], r["engines"]) for r in rows] == [("03-30 17:05:40", 2), ("03-30 17:05:45", 1),
                                                         ("03-30 17:05:50", 1), ("03-30 17:05:55", 1)]
    assert rows[0] == {"attempt": "a1", "time": "03-30 17:05:40", "engines": 2, "source": "", "prompt_tokens_per_s": 400.0,
                       "generation_tokens_per_s": 40.0, "running_reqs": 4.0, "waiting_reqs": 3.0,
                       "kv_cache_usage_pct": pytest.approx(20.0), "prefix_cache_hit_rate_pct": pytest.approx(40.0)}
    assert rows[1]["kv_cache_usage_pct"] is None and rows[1]["prefix_cache_hit_rate_pct"] == 10.0
    assert (rows[2]["waiting_reqs"], rows[2]["kv_cache_usage_pct"], rows[2]["prefix_cache_hit_rate_pct"]) == (4, 50, 25)
    totals = summary(rows)
    assert totals["generation_tokens_per_s"] == {"mean": pytest.approx((40 + 5 + 70 + 1) / 4), "max": 70.0,
                                                 "seconds": 4}
    assert totals["kv_cache_usage_pct"] == {"mean": pytest.approx((20 + 50 + 1) / 3), "max": 50.0, "seconds": 3}


def test_vllm_section_numbers_and_absence() -> None:
    from rlkeep.run_report import render_markdown, vllm_sections
    from rlkeep.vllm_stats import per_second, scan_lines

    stats = scan_lines(VLLM_LOG.splitlines(), "a1")
    text = render_markdown(vllm_sections(per_second(stats), untimed_lines=1, repeated_reports=3))
    assert "| generation throughput (tokens/s, all engines) | 29.0 | 70.0 | 4 |" in text  # (40+5+70+1)/4 = 29
    assert "| running requests (all engines) | 3.00 | 5.00 | 4 |" in text  # (4+2+5+1)/4 = 3
    assert "3 engine reports were folded by Ray" in text and "1 stat line without a time field is left out" in text
    absent = render_markdown(vllm_sections([]))
    assert "## vLLM utilisation" in absent and "Not available: the logs read carry no vLLM stat line" in absent


# ----------------------------------------------------------------------------- batch errors
# Attempt one: step 1 had two batches (32/32; then 29/32 with 2 timeouts + 1 exit error, 2 masked),
# logged by WANDB_MIRROR; step 2 one batch 30/32 (2 timeouts, 2 masked) before a console `Step 2:`;
# then a batch that no step's metrics followed (the attempt died): step None, 0/32, 32 failed.
BATCH_LOG = """\
(skyrl_entrypoint pid=5) 2026-03-30 17:05:40.000 | INFO | harbor_generator:generate:231 - Batch generation complete: 32/32 successful, 0 failed instances, 0 masked
(skyrl_entrypoint pid=5) \x1b[32m2026-03-30 17:06:40.000\x1b[0m | INFO | harbor_generator:generate:231 - \x1b[1mException breakdown: {'AgentTimeoutError': 2, 'NonZeroAgentExitCodeError': 1}\x1b[0m
(skyrl_entrypoint pid=5) 2026-03-30 17:06:40.000 | INFO | harbor_generator:generate:231 - Batch generation complete: 29/32 successful, 3 failed instances, 2 masked
2026-03-30 17:07:00.000 | INFO | trainer:_log_metrics_stdout:1951 - WANDB_MIRROR kind=eval step=1 metrics={"eval/all/avg_score": 0.5}
2026-03-30 17:07:00.000 | INFO | trainer:_log_metrics_stdout:1951 - WANDB_MIRROR kind=train step=1 metrics={"trainer/global_step": 1}
Exception breakdown: {'AgentTimeoutError': 2}
Batch generation complete: 30/32 successful, 2 failed instances, 2 masked
Exception breakdown: {broken
(skyrl_entrypoint pid=5) 2026-03-30 17:09:00.000 | INFO | tracking:log:97 - Step 2: 
Batch generation complete: 0/32 successful, 32 failed instances, 0 masked
"""


def test_batch_errors_per_step_and_totals() -> None:
    from rlkeep.batch_errors import rows, scan_lines, totals

    errors = scan_lines(BATCH_LOG.splitlines(), "a1")
    assert errors.unreadable_breakdowns == 1
    columns, table = rows(errors)
    assert columns == ["attempt", "step", "source", "batches", "instances", "successful", "failed", "masked",
                       "AgentTimeoutError", "NonZeroAgentExitCodeError"]
    assert table == [
        {"attempt": "a1", "step": 1, "source": "", "batches": 2, "instances": 64, "successful": 61, "failed": 3, "masked": 2,
         "AgentTimeoutError": 2, "NonZeroAgentExitCodeError": 1},
        {"attempt": "a1", "step": 2, "source": "", "batches": 1, "instances": 32, "successful": 30, "failed": 2, "masked": 2,
         "AgentTimeoutError": 2, "NonZeroAgentExitCodeError": 0},
        {"attempt": "a1", "step": None, "source": "", "batches": 1, "instances": 32, "successful": 0, "failed": 32, "masked": 0,
         "AgentTimeoutError": 0, "NonZeroAgentExitCodeError": 0},
    ]
    assert totals(table, columns) == {"batches": 4, "instances": 128, "successful": 91, "failed": 37, "masked": 4,
                                      "AgentTimeoutError": 4, "NonZeroAgentExitCodeError": 1}


def test_batch_error_sections_render_shares_and_absence() -> None:
    from rlkeep.batch_errors import rows, scan_lines
    from rlkeep.run_report import batch_error_sections, render_markdown

    columns, table = rows(scan_lines(BATCH_LOG.splitlines(), "a1"))
    text = render_markdown(batch_error_sections(columns, table, unreadable_breakdowns=1))
    assert "| after the last logged step | a1 | 1 | 32 | 0 | 32 | 0 | 0 | 0 |" in text
    assert "| failed | 37 | 28.9% |" in text  # 37 of 128 instances
    assert "| AgentTimeoutError | 4 | 3.1% |" in text
    assert "1 `Exception breakdown` lines did not parse" in text
    assert "Not available: the logs read carry no `Batch generation complete" in render_markdown(
        batch_error_sections([], []))
