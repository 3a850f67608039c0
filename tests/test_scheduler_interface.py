"""rlkeep.scheduler's one interface: every scheduler a record may name has its class, and the
pipeline steps ask it instead of branching on the name. The Iris and SLURM classes run the real
stand-in executables in tests/test_scheduler.py, tests/test_kinds.py and the pipeline tests."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlkeep.errors import SchedulerError
from rlkeep.records import load_record
from rlkeep.report import terminal_state
from rlkeep.scheduler import (SCHEDULERS, IrisScheduler, NoScheduler, SlurmScheduler, capture_chain_step,
                              scheduler_for, stop_each, stop_retries_step)
from rlkeep.context import StepContext
from rlkeep.scheduler.interface import StopJournal, states_asked_again, stopped_earlier

SCHEMA = Path(__file__).resolve().parents[1] / "scripts" / "rlkeep" / "schemas" / "record.schema.json"


def record_file(tmp_path: Path, scheduler: str) -> Path:
    chain = ["4815101", "4815170_3"] if scheduler == "slurm" else ["/demo/k", "/demo/k-r1"]
    data = {"job": "k", "user": "demo", "scheduler": scheduler, "chain": chain, "store": "file:///data/k",
            "checkpoint": {"interval": 5}, **({"cluster": "cw-test"} if scheduler == "iris" else {})}
    path = tmp_path / "records" / "k.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_scheduler_a_record_may_name_has_its_class(tmp_path: Path) -> None:
    allowed = json.loads(SCHEMA.read_text())["properties"]["scheduler"]["enum"]
    assert set(SCHEDULERS) == set(allowed)
    expected = {"iris": IrisScheduler, "slurm": SlurmScheduler, "none": NoScheduler}
    for name in allowed:
        scheduler = scheduler_for(load_record(record_file(tmp_path, name)))
        assert type(scheduler) is expected[name] and scheduler.name == name


def test_scheduler_none_captures_unknown_states_and_stops_nothing(tmp_path: Path) -> None:
    record = load_record(record_file(tmp_path, "none"))
    job_dir = tmp_path / "k"
    ctx = StepContext(job="k", record=record, data_root=tmp_path, inputs={"chain": job_dir / "chain.json"},
                      outputs={"chain": job_dir / "chain.json", "retries": job_dir / "retries.json"})
    capture_chain_step(ctx)
    chain = json.loads((job_dir / "chain.json").read_text())
    assert [(a["slug"], a["state"]) for a in chain["attempts"]] == [("k", "unknown"), ("k-r1", "unknown")]
    assert chain["terminal"] is None and chain["scheduler"] == "none"
    stop_retries_step(ctx)
    retries = json.loads((job_dir / "retries.json").read_text())
    assert retries["status"] == "not_applicable" and retries["stopped"] == []


def test_the_one_stop_loop_confirms_each_stop_and_stops_at_the_first_that_did_not_end() -> None:
    calls: list[str] = []

    def stop(job_id: str) -> str:
        calls.append(job_id)
        return f"stopped {job_id}\n"

    def ended(job_id: str) -> dict:
        if job_id == "b":
            raise SchedulerError(f"{job_id} is still pending afterwards")
        return {"state": "killed"}

    pending = [{"id": "a", "state": "pending", "queued_retry": True}, {"id": "b", "state": "pending"},
               {"id": "c", "state": "pending"}]
    assert stop_each(pending[:1], stop, ended, lambda entry: {"queued_retry": entry["queued_retry"]}) == [
        {"id": "a", "state_before": "pending", "state_after": "killed", "stop_output": "stopped a",
         "queued_retry": True}]
    with pytest.raises(SchedulerError, match="b is still pending"):
        stop_each(pending, stop, ended)
    assert calls == ["a", "a", "b"]  # c is never stopped once b did not end


def test_a_stop_sent_before_the_step_was_killed_is_still_counted_as_ours_when_it_runs_again(tmp_path: Path) -> None:
    """The kill lands after the scheduler stopped the retry and before retries.json: on the rerun the
    retry reads as ended, and only the journal says rlkeep ended it. An attempt that ended with no
    stop of ours in the journal is not claimed; its state now is reported, not chain.json's."""
    journal = StopJournal(tmp_path / ".work" / "stop_retries" / "sent.json")
    journal.path.parent.mkdir(parents=True)

    def killed_after_sending(job_id: str) -> dict:
        raise KeyboardInterrupt  # the step dies while confirming: the stop itself went out

    captured = [{"id": "/demo/k", "state": "failed"}, {"id": "/demo/k-r1", "state": "pending"},
                {"id": "/demo/k-r2", "state": "pending"}]
    with pytest.raises(KeyboardInterrupt):
        stop_each(captured[1:2], lambda job_id: f"stopped {job_id}\n", killed_after_sending,
                  lambda entry: {"stop_form": f"iris job stop {entry['id']}"}, journal)
    now = [captured[0], {"id": "/demo/k-r1", "state": "killed"}, {"id": "/demo/k-r2", "state": "killed"}]
    assert stopped_earlier(captured, now, journal, frozenset({"killed", "failed"})) == [
        {"id": "/demo/k-r1", "state_before": "pending", "state_after": "killed", "stop_output": "stopped /demo/k-r1",
         "stop_form": "iris job stop /demo/k-r1", "sent_by_an_earlier_try": True}]
    states_now = states_asked_again(captured, now)
    assert states_now == {"/demo/k-r1": "killed", "/demo/k-r2": "killed"}
    chain = {"attempts": captured}
    assert terminal_state(chain, {"stopped": [], "states_now": states_now}) == "killed"
    assert terminal_state(chain, {"stopped": []}) == "pending"  # a retries.json from before states_now
    # still pending now: nothing claimed, whatever the journal holds
    assert stopped_earlier(captured, captured, journal, frozenset({"killed"})) == []
