"""Iris access through the stand-in `iris` executable (real CLI shape, real output formats)."""
from __future__ import annotations

import pytest

from rlkeep.errors import SchedulerError
from rlkeep.scheduler import IrisCli, parse_summary_text, stop_pending_retries

CHAIN = ["/demo/rl", "/demo/rl-r1"]


def job(state: str, **extra) -> dict:
    return {"state": state, "exit_code": None if state == "pending" else 1, "failure_count": 1, "preemption_count": 2,
            "submitted_ms": 1774890000000, "task_count": 1, "completed_count": 0, "tasks": [], "log_lines": [], **extra}


def standard_state() -> dict:
    return {"jobs": {
        "/demo/rl": job("failed"),
        "/demo/rl-r1": job("pending"),
        "/demo/rl-r1/eval": job("pending"),
        "/demo/rl-r10": job("pending"),
        "/demo/rl-other": job("pending"),
        "/someoneelse/rl-r1": job("pending"),
    }}


def test_summary_json_and_text_agree(iris, monkeypatch) -> None:
    iris.write_state(standard_state())
    cli = IrisCli("cw-test")
    as_json = cli.summary("/demo/rl")
    monkeypatch.setenv("IRIS_STANDIN_NO_JSON", "1")
    as_text = cli.summary("/demo/rl")
    assert (as_json.state, as_json.failure_count, as_json.preemption_count, as_json.exit_code) == ("failed", 1, 2, 1)
    assert (as_text.state, as_text.failure_count, as_text.preemption_count, as_text.exit_code) == ("failed", 1, 2, 1)
    assert as_json.source == "json" and as_text.source == "text"
    assert ["--cluster=cw-test", "job", "summary", "/demo/rl", "--json"] in iris.calls()


def test_only_the_exact_pending_retries_of_the_chain_are_stopped(iris) -> None:
    iris.write_state(standard_state())
    cli = IrisCli("cw-test")
    chain = [{"id": job_id, "state": cli.summary(job_id).state} for job_id in CHAIN]
    stopped = stop_pending_retries(cli, chain)
    assert [s["id"] for s in stopped] == ["/demo/rl-r1"]
    assert iris.stop_calls() == [["--cluster=cw-test", "job", "stop", "/demo/rl-r1", "--no-include-children"]]
    states = {job_id: j["state"] for job_id, j in iris.state()["jobs"].items()}
    assert states == {"/demo/rl": "failed", "/demo/rl-r1": "killed", "/demo/rl-r1/eval": "pending",
                      "/demo/rl-r10": "pending", "/demo/rl-other": "pending", "/someoneelse/rl-r1": "pending"}


def test_a_running_attempt_is_an_error_and_nothing_is_stopped(iris) -> None:
    state = standard_state()
    state["jobs"]["/demo/rl"]["state"] = "running"
    iris.write_state(state)
    cli = IrisCli("cw-test")
    chain = [{"id": job_id, "state": cli.summary(job_id).state} for job_id in CHAIN]
    with pytest.raises(SchedulerError, match="attempt /demo/rl is still running"):
        stop_pending_retries(cli, chain)
    assert iris.stop_calls() == []


def test_full_logs_are_never_truncated_by_the_line_cap(iris, monkeypatch) -> None:
    lines = [f"[17:05:{i % 60:02d}] task=/demo/rl/0 | line {i}" for i in range(2500)]
    iris.write_state({"jobs": {"/demo/rl": job("failed", log_lines=lines)}})
    import rlkeep.scheduler as scheduler

    monkeypatch.setattr(scheduler, "LOG_LINE_CAP", 1000)
    text = IrisCli("cw-test").logs("/demo/rl")
    assert text.splitlines() == lines
    caps = [argv[argv.index("--max-lines") + 1] for argv in iris.calls() if "logs" in argv]
    assert caps == ["1000", "10000"]
    assert all("--no-tail" in argv for argv in iris.calls() if "logs" in argv)


def test_log_cap_limit_is_an_error(iris, monkeypatch) -> None:
    iris.write_state({"jobs": {"/demo/rl": job("failed", log_lines=["x"] * 50)}})
    import rlkeep.scheduler as scheduler

    monkeypatch.setattr(scheduler, "LOG_LINE_CAP", 10)
    monkeypatch.setattr(scheduler, "LOG_LINE_CAP_MAX", 10)
    with pytest.raises(SchedulerError, match="reached the 10-line cap; refusing a truncated log"):
        IrisCli("cw-test").logs("/demo/rl")


def test_controller_down_is_a_clear_error(iris, monkeypatch) -> None:
    iris.write_state(standard_state())
    monkeypatch.setenv("IRIS_STANDIN_FAIL", "summary")
    with pytest.raises(SchedulerError, match="job summary /demo/rl --json` exited 1: Error: failed to connect"):
        IrisCli("cw-test").summary("/demo/rl")


def test_missing_iris_command(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SchedulerError, match="`iris` command is not on PATH"):
        IrisCli("cw-test").summary("/demo/rl")


def test_text_summary_without_state_line_is_an_error() -> None:
    with pytest.raises(SchedulerError, match="no 'State:"):
        parse_summary_text("/demo/rl", "garbage\n")
