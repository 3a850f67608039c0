"""Iris access through the strict stand-in `iris`, against every emulated CLI version.

Each test runs the real rlkeep code (capability detection, state parsing, exact stops, log
completeness) against the stand-in executable of one version (a..f, docs/reference.md, iris CLI).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlkeep_dev.devserver.iris import VERSIONS
from rlkeep.errors import BlockedError, SchedulerError
from rlkeep.scheduler import (
    GONE,
    IrisCli,
    JobGoneError,
    choose_forms,
    parse_help,
    parse_summary_text,
    refuse_while_unrecorded_attempts_run,
    stop_pending_retries,
    unrecorded_attempts,
)
from tests.conftest import IrisStandin

CHAIN = ["/demo/rl", "/demo/rl-r1"]

# what capability detection must choose, per version
EXPECTED_FORMS = {
    "a": ("iris job list --prefix {prefix}", "iris job stop {job} --no-include-children",
          "iris job logs {job} --max-lines {n}"),
    "b": ("iris job summary {job} --json", "iris job stop {job} --no-include-children",
          "iris job logs {job} --no-tail --max-lines {n}"),
    "c": ("iris job summary {job}", "iris job stop {job} --no-include-children",
          "iris job logs {job} --no-tail --max-lines {n}"),
    "d": ("iris job summary {job}", "iris job stop {job}", "iris job logs {job} --no-tail --max-lines {n}"),
    "e": ("iris job describe {job}", "iris job cancel {job} --exact", "iris job logs {job} --no-tail --max-lines {n}"),
    "f": ("iris job describe {job}", "iris job cancel {job}", None),
}
PRINTS_EXIT = {"b", "c", "d", "e"}  # a lists states only; f's describe prints the State line only


def job(state: str, **extra) -> dict:
    return {"state": state, "exit_code": 1 if state == "failed" else 0, "failure_count": 1, "preemption_count": 2,
            "submitted_ms": 1774890000000, "task_count": 1, "completed_count": 0, "tasks": [], "log_lines": [],
            **extra}


def standard_state() -> dict:
    return {"jobs": {
        "/demo/rl": job("failed"),
        "/demo/rl-r1": job("pending"),
        "/demo/rl-r10": job("pending"),  # a prefix stop of rl-r1 would hit it
        "/demo/rl-other": job("pending"),
        "/demo/unrelated": job("pending"),
        "/demo/unrelated/eval": job("pending"),
        "/someoneelse/rl-r1": job("pending"),
        "/demo/rl-old": job("failed", deleted=True),  # retention
    }}


@pytest.fixture(autouse=True)
def fresh_detection():
    IrisCli._forms_cache.clear()
    yield
    IrisCli._forms_cache.clear()


@pytest.fixture(params=VERSIONS)
def viris(request, tmp_path, monkeypatch) -> IrisStandin:
    standin = IrisStandin(tmp_path / "iris", request.param)
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    return standin


def chain_entries(cli: IrisCli, ids=CHAIN) -> list[dict]:
    return [cli.entry(job_id) for job_id in ids]


# --------------------------------------------------------------------------- the stand-in is strict


@pytest.mark.parametrize("version,argv,message", [
    ("c", ["job", "summary", "/demo/rl", "--json"], "Error: No such option: --json"),
    ("e", ["job", "summary", "/demo/rl"], "Error: No such command 'summary'."),
    ("f", ["job", "stop", "/demo/rl"], "Error: No such command 'stop'."),
    ("a", ["job", "logs", "/demo/rl", "--no-tail"], "Error: No such option: --no-tail"),
    ("f", ["job", "logs", "/demo/rl", "--no-tail"], "Error: No such option: --no-tail"),
    ("f", ["job", "logs", "/demo/rl", "--max-lines", "100001"],
     "Error: Invalid value for '--max-lines': 100001 is not in the range 1<=x<=100000."),
    ("d", ["job", "stop", "/demo/rl", "--no-include-children"], "Error: No such option: --no-include-children"),
    ("f", ["job", "cancel", "/demo/rl", "--exact"], "Error: No such option: --exact"),
    ("b", ["job", "summary"], "Error: Missing argument 'JOB_ID'."),
])
def test_the_stand_in_rejects_what_its_version_lacks_as_click_does(tmp_path, monkeypatch, version, argv,
                                                                    message) -> None:
    standin = IrisStandin(tmp_path / "iris", version)
    standin.write_state(standard_state())
    result = subprocess.run([str(standin.bin_dir / "iris"), "--cluster=cw-test", *argv], capture_output=True,
                            text=True, env={**os.environ, **standin.env()})
    assert result.returncode == 2
    assert result.stderr.rstrip().endswith(message)
    assert result.stderr.startswith("Usage: iris job")
    assert standin.states() == {k: v["state"] for k, v in standard_state()["jobs"].items()}


def test_help_parsing_reads_commands_wrapped_options_and_pairs() -> None:
    commands, _ = parse_help("Usage: iris job [OPTIONS] COMMAND [ARGS]...\n\nOptions:\n  --help  Show.\n\n"
                             "Commands:\n  cancel    Cancel a job.\n  describe  Describe one job.\n")
    assert set(commands) == {"cancel", "describe"}
    _, options = parse_help("Usage: x\n\nOptions:\n  --include-children / --no-include-children\n"
                            "                                  Terminate child jobs (default: include).\n"
                            "  -f, --follow                    Stream logs continuously.\n"
                            "  --max-lines INTEGER RANGE       Maximum number.\n")
    assert set(options) == {"--include-children", "--no-include-children", "-f", "--follow", "--max-lines"}
    assert "child jobs" in options["--no-include-children"]


# --------------------------------------------------------------------------- capability detection


def test_capability_detection_picks_each_versions_forms(viris) -> None:
    forms = IrisCli("cw-test").forms.to_json()
    status, stop, head = EXPECTED_FORMS[viris.version]
    assert (forms["summary"], forms["stop"], forms["logs"]["head"]) == (status, stop, head)
    if viris.version == "f":
        assert forms["logs"]["one_end"] == "iris job logs {job} --max-lines {n}"  # its --tail follows: never used
    helps = [argv for argv in viris.calls() if "--help" in argv]
    assert helps[0] == ["--cluster=cw-test", "job", "--help"] and len(helps) == len(viris.calls())
    IrisCli("cw-test").forms  # cached for the process: no second round of --help calls
    assert len(viris.calls()) == len(helps)


@pytest.mark.parametrize("version,removed,missing", [
    ("b", "stop:--no-include-children,kill:--no-include-children", "exact stop"),
    ("c", "stop:--no-include-children,kill:--no-include-children", "exact stop"),
    ("d", "stop:--prefix,kill:--prefix", "exact stop"),
    ("e", "cancel:--exact", "exact stop"),
    ("f", "describe,list", "way to read a job's state"),
])
def test_a_cli_without_the_needed_form_is_refused_naming_it(tmp_path, monkeypatch, version, removed, missing) -> None:
    standin = IrisStandin(tmp_path / "iris", version)
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IRIS_STANDIN_REMOVE", removed)
    standin.write_state(standard_state())
    cli = IrisCli("cw-test")
    with pytest.raises(SchedulerError, match=f"offers no {missing}"):
        stop_pending_retries(cli, [{"id": "/demo/rl-r1", "state": "pending"}]) if missing == "exact stop" \
            else cli.summary("/demo/rl")
    assert standin.stop_calls() == []
    assert standin.states()["/demo/rl-r1"] == "pending"


def test_without_json_the_text_summary_is_read(tmp_path, monkeypatch) -> None:
    standin = IrisStandin(tmp_path / "iris", "b")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    standin.write_state(standard_state())
    as_json = IrisCli("cw-test").summary("/demo/rl")
    IrisCli._forms_cache.clear()
    monkeypatch.setenv("IRIS_STANDIN_REMOVE", "summary:--json")
    as_text = IrisCli("cw-test").summary("/demo/rl")
    assert (as_json.source, as_text.source) == ("summary --json", "summary")
    assert (as_json.state, as_json.failure_count, as_json.exit_code) == (as_text.state, as_text.failure_count,
                                                                        as_text.exit_code) == ("failed", 1, 1)


# --------------------------------------------------------------------------- chain capture


def test_capture_reads_states_without_inventing_times_or_exits(viris) -> None:
    viris.write_state(standard_state())
    failed, pending, gone = chain_entries(IrisCli("cw-test"), ["/demo/rl", "/demo/rl-r1", "/demo/rl-old"])
    assert (failed["state"], pending["state"], gone["state"]) == ("failed", "pending", GONE)
    assert failed["exit_code"] == (1 if viris.version in PRINTS_EXIT else None)
    assert pending["exit_code"] is None and "no exit yet" in pending["exit_code_reason"]  # the CLI prints exit=0
    for entry in (failed, pending, gone):
        assert entry["submitted_ms"] is None and entry["started_ms"] is None and entry["finished_ms"] is None
        assert "no submitted/started/finished times" in entry["times_reason"]
    assert pending["queued_retry"] is (True if viris.version in PRINTS_EXIT else None)
    assert "not found" in gone["reason"] or "does not list" in gone["reason"]


def test_a_gone_job_is_gone_for_every_command(viris) -> None:
    viris.write_state(standard_state())
    cli = IrisCli("cw-test")
    with pytest.raises(JobGoneError):
        cli.logs("/demo/rl-old")
    assert stop_pending_retries(cli, [{"id": "/demo/rl-old", "state": GONE}]) == []
    assert viris.stop_calls() == []


# --------------------------------------------------------------------------- exact stops


def test_only_the_exact_pending_attempts_of_the_chain_are_stopped(viris) -> None:
    viris.write_state(standard_state())
    cli = IrisCli("cw-test")
    stopped = stop_pending_retries(cli, chain_entries(cli))
    assert [s["id"] for s in stopped] == ["/demo/rl-r1"] and stopped[0]["state_after"] == "killed"
    assert viris.stop_calls() == [viris.exact_stop("/demo/rl-r1")]
    before = {k: v["state"] for k, v in standard_state()["jobs"].items()}
    assert viris.states() == {**before, "/demo/rl-r1": "killed"}


def test_a_pending_attempt_with_an_unrelated_unfinished_child_is_not_stopped(viris) -> None:
    state = standard_state()
    state["jobs"]["/demo/rl-r1/eval"] = job("running")
    state["jobs"]["/demo/rl-r1/done"] = job("succeeded")
    viris.write_state(state)
    cli = IrisCli("cw-test")
    with pytest.raises(SchedulerError, match=r"nothing was stopped.*/demo/rl-r1: /demo/rl-r1/eval \(running\)"):
        stop_pending_retries(cli, chain_entries(cli))
    assert viris.stop_calls() == []
    assert viris.states() == {k: v["state"] for k, v in state["jobs"].items()}


def test_a_cli_that_cannot_list_children_stops_nothing(tmp_path, monkeypatch) -> None:
    standin = IrisStandin(tmp_path / "iris", "b")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IRIS_STANDIN_REMOVE", "list")
    standin.write_state(standard_state())
    cli = IrisCli("cw-test")
    with pytest.raises(SchedulerError, match="cannot list the children of /demo/rl-r1.*nothing was stopped"):
        stop_pending_retries(cli, chain_entries(cli))
    assert standin.stop_calls() == []
    assert unrecorded_attempts(cli, "demo", "rl", CHAIN) == ([], "not checked: the installed iris CLI has no `job list`")


def test_a_running_attempt_is_an_error_and_nothing_is_stopped(viris) -> None:
    state = standard_state()
    state["jobs"]["/demo/rl"]["state"] = "running"
    viris.write_state(state)
    cli = IrisCli("cw-test")
    with pytest.raises(SchedulerError, match="attempt /demo/rl is still running"):
        stop_pending_retries(cli, chain_entries(cli))
    assert viris.stop_calls() == []


def test_an_id_the_record_does_not_name_is_never_stopped(viris) -> None:
    viris.write_state(standard_state())
    cli = IrisCli("cw-test")
    entries = chain_entries(cli, ["/demo/rl", "/demo/rl-r1", "/demo/rl-r10"])
    stopped = stop_pending_retries(cli, entries, named=set(CHAIN))
    assert [s["id"] for s in stopped] == ["/demo/rl-r1"]
    assert viris.states()["/demo/rl-r10"] == "pending"


def test_a_cancel_that_returns_early_is_polled_within_a_bound(tmp_path, monkeypatch) -> None:
    standin = IrisStandin(tmp_path / "iris", "f")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IRIS_STANDIN_CANCEL_LAG", "3")
    standin.write_state(standard_state())
    cli = IrisCli("cw-test")
    stopped = stop_pending_retries(cli, chain_entries(cli), wait_s=10, poll_s=0.01)
    assert stopped[0]["state_after"] == "killed"
    reads = [argv for argv in standin.calls() if argv[2:4] == ["describe", "/demo/rl-r1"]]
    assert len(reads) >= 3  # the state before, then polls until the cancel landed

    standin.write_state(standard_state())
    monkeypatch.setenv("IRIS_STANDIN_CANCEL_LAG", "1000")
    with pytest.raises(SchedulerError, match=r"still pending 0.2s afterwards"):
        stop_pending_retries(cli, chain_entries(cli), wait_s=0.2, poll_s=0.01)


    # the pauses between looks start short and double up to poll_s: a cancel that lands after a
    # few looks is seen in well under one poll_s, and a slow one is not asked more than each poll_s
    import rlkeep.scheduler.iris as iris_module

    pauses: list[float] = []
    real_sleep = iris_module.time.sleep

    def sleep(seconds: float) -> None:  # only the poll's pauses (subprocess waits sleep too)
        if sys._getframe(1).f_code.co_name == "_wait_until_ended":
            pauses.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(iris_module.time, "sleep", sleep)
    standin.write_state(standard_state())
    monkeypatch.setenv("IRIS_STANDIN_CANCEL_LAG", "8")
    stopped = stop_pending_retries(cli, chain_entries(cli), wait_s=600, poll_s=2.0)
    assert stopped[0]["state_after"] == "killed"
    assert pauses[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0] and set(pauses[6:]) <= {2.0}, pauses


# --------------------------------------------------------------------------- unrecorded attempts


def test_unrecorded_attempts_are_listed_block_checkpoint_reads_and_are_never_stopped(viris) -> None:
    state = standard_state()
    state["jobs"].update({"/demo/rl-r2": job("pending", failure_count=0), "/demo/rl_retry": job("failed"),
                          "/demo/rl/eval": job("pending"), "/someoneelse/rl-r2": job("pending")})
    viris.write_state(state)
    cli = IrisCli("cw-test")
    found, how = unrecorded_attempts(cli, "demo", "rl", CHAIN)
    assert {u["id"]: u["state"] for u in found} == {"/demo/rl-r2": "pending", "/demo/rl_retry": "failed",
                                                    "/demo/rl-r10": "pending", "/demo/rl-other": "pending"}
    assert how.startswith("listed with iris job list")
    with pytest.raises(BlockedError, match=r"(?s)/demo/rl-r2 \(pending\).*records/rl.yaml:\n  - /demo/rl-other\n"):
        refuse_while_unrecorded_attempts_run({"unrecorded": found}, "records/rl.yaml")
    refuse_while_unrecorded_attempts_run({"unrecorded": [u for u in found if u["state"] == "failed"]}, "r.yaml")
    stop_pending_retries(cli, chain_entries(cli), named=set(CHAIN))
    assert [argv[3] for argv in viris.stop_calls()] == ["/demo/rl-r1"]
    assert viris.states()["/demo/rl-r2"] == "pending"


# --------------------------------------------------------------------------- logs


def lines(job_id: str, n: int) -> list[str]:
    return [f"[17:{i // 60 % 60:02d}:{i % 60:02d}] task={job_id}/0 | line {i}" for i in range(n)]


def test_a_short_log_is_proven_complete_where_the_cli_can_prove_it(viris) -> None:
    viris.write_state({"jobs": {"/demo/rl": job("failed", log_lines=lines("/demo/rl", 30))}})
    fetch = IrisCli("cw-test").logs("/demo/rl")
    assert len(fetch.text.splitlines()) == 30
    if viris.version == "f":
        assert fetch.complete is None and "does not prove" in fetch.detail
    else:
        assert fetch.complete is True and "returned the same 30 lines" in fetch.detail
    asked = [int(argv[argv.index("--max-lines") + 1]) for argv in viris.calls() if "logs" in argv and "--help" not in argv]
    assert asked and all(n <= 100_000 for n in asked)


def test_fewer_lines_than_asked_from_a_clamping_server_is_not_taken_as_complete(viris, monkeypatch) -> None:
    monkeypatch.setenv("RLKEEP_IRIS_LOG_MAX_LINES", "50")
    monkeypatch.setenv("IRIS_STANDIN_SERVER_MAX_LINES", "40")  # clamps silently below what was asked
    viris.write_state({"jobs": {"/demo/rl": job("failed", log_lines=lines("/demo/rl", 45))}})
    fetch = IrisCli("cw-test").logs("/demo/rl")
    assert fetch.complete is not True
    assert fetch.complete is False or "does not prove" in fetch.detail


@pytest.mark.parametrize("version", ["d", "f"])
def test_a_log_longer_than_the_per_call_cap_is_never_taken_as_complete(tmp_path, monkeypatch, version) -> None:
    standin = IrisStandin(tmp_path / "iris", version)
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RLKEEP_IRIS_LOG_MAX_LINES", "1000000")  # rlkeep still never asks more than 100,000
    standin.write_state({"jobs": {"/demo/rl": job("failed", log_lines=lines("/demo/rl", 100_010))}})
    fetch = IrisCli("cw-test").logs("/demo/rl")
    assert fetch.complete is False and fetch.text is None
    assert "100,000" in fetch.detail
    asked = {argv[argv.index("--max-lines") + 1] for argv in standin.calls() if "logs" in argv and "--help" not in argv}
    assert asked == {"100000"}


# --------------------------------------------------------------------------- errors


def test_controller_down_is_a_clear_error(viris, monkeypatch) -> None:
    viris.write_state(standard_state())
    monkeypatch.setenv("IRIS_STANDIN_FAIL", "controller")
    with pytest.raises(SchedulerError, match="exited 1: Error: failed to connect") as raised:
        IrisCli("cw-test").summary("/demo/rl")
    assert not isinstance(raised.value, JobGoneError)


def test_missing_iris_command(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SchedulerError, match="`iris` command is not on PATH"):
        IrisCli("cw-test").summary("/demo/rl")


def test_text_summary_without_state_line_is_an_error() -> None:
    with pytest.raises(SchedulerError, match="no 'State:"):
        parse_summary_text("/demo/rl", "garbage\n")


def test_choose_forms_never_takes_a_children_stop_without_the_exact_flag() -> None:
    forms = choose_forms({"stop": "", "logs": ""}, {"stop": {"--include-children": ""}, "logs": {}})
    assert forms.stop is None and "exact stop" in forms.missing["stop"]
    assert forms.status is None and "logs" in forms.missing


def test_jobs_another_record_names_are_that_runs_not_unrecorded(tmp_path, monkeypatch) -> None:
    standin = IrisStandin(tmp_path / "iris", "d")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    standin.write_state(standard_state())
    found, _ = unrecorded_attempts(IrisCli("cw-test"), "demo", "rl", CHAIN, {"/demo/rl-other": "rl-other"})
    assert [u["id"] for u in found] == ["/demo/rl-r10"]
