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
    assert table == [["1", "0.2", "100"], ["2", "0.4", "200"], ["3", "", ""]]
    assert progression([{"global_step": 1}]) is None
