"""rlkeep.snakemake_process: install() switches the patches on only on a proven Snakemake and
unless RLKEEP_NO_PATCHES says otherwise; the installed Snakemake still has the shape they act on; in
a real invocation of the pipeline the process leaves its heap out of the last collection and the
rescheduling timers the finished scheduler left are cancelled (and no other timer), and with the
switch set neither happens while the run's results stay the same; a step started under the shell
prefix holds a Ctrl-C that came while it started until its own handler takes it (no traceback).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlkeep import snakemake_process
from rlkeep.snakemake_process import cancel_rescheduling_timers
from rlkeep_dev.example.kinds import write_datagen_run
from tests.conftest import REPO, run_snakemake, write_record
from tests.reliability.support import default_signal_actions
from tests.support.memory import exit_facts, exit_facts_script

JOB = "dg-noop"


def test_the_switch_names_all_patches_or_some() -> None:
    assert snakemake_process.switched_off({}) == frozenset()
    assert snakemake_process.switched_off({"RLKEEP_NO_PATCHES": "0"}) == frozenset()
    assert snakemake_process.switched_off({"RLKEEP_NO_PATCHES": "1"}) == frozenset(snakemake_process.PATCHES)
    assert snakemake_process.switched_off({"RLKEEP_NO_PATCHES": "final_collection"}) == {"final_collection"}
    assert snakemake_process.switched_off({"RLKEEP_NO_PATCHES": "yes"}) == frozenset(snakemake_process.PATCHES)


INSTALL = """
import atexit, json, sys
registered = []
atexit.register = lambda function, *a, **k: registered.append(function.__name__)
from rlkeep import snakemake_process as p
on = p.install(snakemake_version=sys.argv[1])
print(json.dumps({"on": sorted(on), "exit_handlers": registered}))
"""


def installed(version: str, switch: str = "") -> tuple[dict, str]:
    result = subprocess.run([sys.executable, "-c", INSTALL, version], capture_output=True, text=True, check=True,
                            env={**os.environ, "RLKEEP_NO_PATCHES": switch})
    return json.loads(result.stdout), result.stderr


def test_install_switches_the_patches_on_only_on_a_proven_version_and_unless_switched_off() -> None:
    proven = sorted(snakemake_process.PROVEN_SNAKEMAKE_VERSIONS)[0]
    assert installed(proven) == ({"on": sorted(snakemake_process.PATCHES),
                                  "exit_handlers": ["skip_final_collection"]}, "")
    assert installed(proven, "1") == ({"on": [], "exit_handlers": []}, "")
    assert installed(proven, "final_collection") == ({"on": ["rescheduling_timers"], "exit_handlers": []}, "")
    state, said = installed("99.0.0")
    assert state == {"on": [], "exit_handlers": []}  # an unproven version runs Snakemake as it ships
    assert said.count("\n") == 1 and "Snakemake 99.0.0 is not among the versions" in said


def test_the_workflow_reads_fall_back_to_the_answer_that_costs_only_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkeep.settled import planning_is_forced

    workflow = SimpleNamespace()  # a Snakemake without the attributes read
    assert snakemake_process.dag_settings(workflow) is None and planning_is_forced(None)
    monkeypatch.setattr(sys, "argv", ["snakemake", "--profile", "local", "x/DONE"])
    assert snakemake_process.is_main_process(workflow)
    monkeypatch.setattr(sys, "argv", ["python", "-m", "snakemake", "--mode", "remote", "x/DONE"])
    assert not snakemake_process.is_main_process(workflow)
    assert not snakemake_process.is_main_process(SimpleNamespace(is_main_process=False))


def test_the_lock_pins_a_snakemake_version_the_patches_are_proven_on() -> None:
    from importlib.metadata import version

    pins = [line.split("==")[1].strip() for line in (REPO / "requirements.lock").read_text().splitlines()
            if line.startswith("snakemake==")]
    assert pins and pins[0] in snakemake_process.PROVEN_SNAKEMAKE_VERSIONS
    assert version("snakemake") == pins[0]  # the suite runs on the version it proves


def watched_snakemake_script() -> str:
    """exit_facts_script("snakemake"), also writing to FACTS_FILE + ".timers" how many timers were
    still pending when the interpreter began to shut down (before it joins the threads left)."""
    watch = (
        "import json, sys, threading\n"
        "TIMERS_FILE = sys.argv[1] + '.timers'\n"
        "def at_shutdown():\n"
        "    pending = sum(1 for thread in threading.enumerate()\n"
        "                  if isinstance(thread, threading.Timer) and not thread.finished.is_set())\n"
        "    with open(TIMERS_FILE, 'w') as out:\n"
        "        json.dump(pending, out)\n"
        "threading._register_atexit(at_shutdown)\n"
    )
    return watch + exit_facts_script("snakemake")


@pytest.mark.parametrize("switch", ["", "1"], ids=["patched", "RLKEEP_NO_PATCHES=1"])
def test_a_real_invocation_freezes_its_heap_and_leaves_no_timer_unless_switched_off(
        tmp_path: Path, data_root: Path, switch: str) -> None:
    run = write_datagen_run(tmp_path / "runs" / JOB, job=JOB, n_trials=12)
    write_record(data_root, run.record(store_url=f"file://{run.root}"))
    first = run_snakemake(data_root, f"{JOB}/DONE", env={"RLKEEP_NO_PATCHES": switch})
    assert first.returncode == 0, first.stderr[-3000:]
    patched = switch == ""
    facts_file = tmp_path / "facts.json"

    def invoke(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", watched_snakemake_script(), str(facts_file), "--snakefile", str(REPO / "Snakefile"),
             "--profile", str(REPO / "profiles" / "local"), f"{JOB}/DONE", *extra],
            cwd=data_root, capture_output=True, text=True, timeout=300,
            env={**os.environ, "RLKEEP_NO_PATCHES": switch})

    no_op = invoke()
    assert no_op.returncode == 0 and "Nothing to be done" in no_op.stdout + no_op.stderr, no_op.stderr[-3000:]
    frozen = exit_facts(facts_file)["frozen_objects"]
    # the heap Snakemake built, left out of the last collection (none without the patches)
    assert frozen > 10_000 if patched else frozen == 0

    # a run of a job leaves the scheduler's rate-limit timer, cancelled once it finished (waited out without)
    forced = invoke("--forcerun", "done")
    assert forced.returncode == 0 and "1 of 1 steps (100%) done" in forced.stdout + forced.stderr, forced.stderr[-3000:]
    pending = json.loads(facts_file.with_name("facts.json.timers").read_text())
    assert pending == 0 if patched else pending <= 1  # unpatched: the last one, unless it fired meanwhile

    # a changed param still reruns its step: the authority reclaim reads from its params
    granted = invoke("-n", "--config", f"reclaim_authorized={JOB}")
    assert granted.returncode == 0, granted.stderr[-3000:]
    plan = granted.stdout + granted.stderr
    assert "rule reclaim:" in plan and "Params have changed since last execution" in plan, plan[-3000:]


def test_the_timers_of_the_installed_schedulers_rate_limit_are_cancelled_and_no_other_timer() -> None:
    """The timer is made by the installed Snakemake's own JobScheduler method (its shape is what
    the cancel recognises); without the cancel, the interpreter waits it out before exit handlers."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    released = threading.Semaphore(0)
    scheduler = SimpleNamespace(_open_jobs=released)
    before = set(threading.enumerate())
    JobScheduler._schedule_reevalutation(scheduler, 30)  # as after a scheduling round (1 s by default)
    made = [thread for thread in threading.enumerate() if thread not in before]
    assert len(made) == 1 and isinstance(made[0], threading.Timer) and not made[0].daemon
    other = threading.Timer(30, lambda: None)
    other.start()
    try:
        assert cancel_rescheduling_timers() == 1
        made[0].join(timeout=5)
        assert not made[0].is_alive()  # ended at once, without releasing the finished scheduler
        assert not released.acquire(blocking=False)
        assert other.is_alive()  # a timer of anyone else is left alone
    finally:
        other.cancel()
    assert cancel_rescheduling_timers() == 0




STEP_STARTING = """
import os, signal, sys, time
os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C while the step is still starting (blocked: it waits)
time.sleep(0.2)
from rlkeep.errors import StepTerminated
from rlkeep.runner import stop_signals_raise
try:
    with stop_signals_raise():
        time.sleep(5)
except StepTerminated as stop:
    print(f"stopped by {stop.signum}")
    sys.exit(130)
print("not stopped")
"""


def test_a_step_started_under_the_prefix_holds_a_ctrl_c_until_its_own_handler_takes_it(tmp_path: Path) -> None:
    prefix = snakemake_process.step_prefix()
    assert prefix is not None and prefix.startswith(snakemake_process.SNAKEMAKE_BASH_PREFIX)
    script = tmp_path / "step.py"
    script.write_text(STEP_STARTING)
    # as from a terminal: a test runner's worker may have inherited SIGINT ignored
    held = subprocess.run(["bash", "-c", f"{prefix}{sys.executable} {script}"], capture_output=True, text=True,
                          timeout=60, preexec_fn=default_signal_actions)
    assert (held.returncode, held.stdout, held.stderr) == (130, f"stopped by {int(signal.SIGINT)}\n", "")
    # without the prefix the same Ctrl-C meets the start: a KeyboardInterrupt traceback on the terminal
    bare = subprocess.run(["bash", "-c", f"{snakemake_process.SNAKEMAKE_BASH_PREFIX}{sys.executable} {script}"],
                          capture_output=True, text=True, timeout=60, preexec_fn=default_signal_actions)
    assert bare.returncode != 0 and "KeyboardInterrupt" in bare.stderr and bare.stdout == ""


def test_no_prefix_where_env_cannot_block_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert snakemake_process.env_blocks_signals()  # coreutils 8.31 or later, as on the baseline machine
    assert snakemake_process.step_prefix(lambda: False) is None
    given: list[str] = []
    assert snakemake_process.hold_interrupt_in_steps(SimpleNamespace(prefix=given.append)) is True
    assert given == [snakemake_process.step_prefix()]
    monkeypatch.setattr(snakemake_process, "step_prefix", lambda: None)
    assert snakemake_process.hold_interrupt_in_steps(SimpleNamespace(prefix=given.append)) is False
    assert len(given) == 1  # Snakemake's own prefix stays where env cannot block
