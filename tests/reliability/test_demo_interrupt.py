"""`rlkeep demo` stopped by Ctrl-C, then the same command (issue 28): Ctrl-C as a terminal sends it (SIGINT
to the demo's whole process group) at five points of the run; each time the demo says what it did without a
traceback, Snakemake has released its lock, the services are stopped, and the command the demo printed,
followed as printed, goes on with the Hub on another port; the last one reaches a DONE equal to an
uninterrupted run's but for times and addresses. The closing hint of a finished demo is followed as printed
too, and reaches a reclaimed DONE.

Points are conditions on what the run has visibly done, all armed at once; each attempt is stopped at the
first one it reaches and the next goes on from there (as tests/reliability/test_kill_resume.py), so five
stops cost about one run plus five restarts of the services.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlkeep.jsonio import read_json
from tests.reliability.support import JOB, default_signal_actions, leftovers, output_problems, stable_done

DEMO = [sys.executable, "-m", "rlkeep", "demo", "--data-root", "demo-data"]
RUN_BOUND_SECONDS = 900
STOP_BOUND_SECONDS = 120  # Snakemake waits for its jobs; each step bounds its own clean-up at 30 s
HUB_URL = re.compile(r"Hub on (http://127\.0\.0\.1:(\d+))")


@dataclass
class Demo:
    """One `rlkeep demo` process in its own process group, as a terminal's foreground job."""

    process: subprocess.Popen[bytes]
    out: Path

    @classmethod
    def start(cls, command: list[str], cwd: Path, name: str) -> "Demo":
        out = cwd / f"{name}.out"
        with open(out, "wb") as handle:
            process = subprocess.Popen(command, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=default_signal_actions)
        return cls(process, out)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise

    def hub_port(self) -> int | None:
        found = HUB_URL.search(self.output())
        return int(found.group(2)) if found else None


def printed_command(output: str, after: str) -> list[str]:
    """The command on the line after `after`, as the demo printed it for the operator to type."""
    lines = output.splitlines()
    index = next(i for i, line in enumerate(lines) if after in line)
    return shlex.split(lines[index + 1])


def services_of(data_root: Path) -> list[str]:
    """Processes still running from this data root's services (SeaweedFS keeps its folder on its command line)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data_root / ".services") in text:
            found.append(text)
    return found


def stable(data_root: Path) -> dict:
    return stable_done(types.SimpleNamespace(job_dir=data_root / JOB, data_root=data_root, record={"job": JOB},
                                             bucket="runs"))


def hold_port(port: int, stack: ExitStack) -> None:
    """Keep a finished attempt's Hub port taken, so the next attempt's Hub cannot get it again."""
    holder = stack.enter_context(socket.socket())
    try:
        holder.bind(("127.0.0.1", port))
        holder.listen()
    except OSError:
        pass  # taken by someone else meanwhile: just as unavailable


@dataclass
class StopPoint:
    name: str
    reached: Callable[[dict[str, int]], bool]  # given the step log sizes when the attempt started


def stop_points(data_root: Path) -> list[StopPoint]:
    job_dir = data_root / JOB

    def grew(step: str) -> Callable[[dict[str, int]], bool]:
        def reached(sizes: dict[str, int]) -> bool:
            try:
                return (job_dir / "logs" / f"{step}.log").stat().st_size > sizes.get(step, 0)
            except FileNotFoundError:
                return False
        return reached

    services = data_root / ".services"
    return [
        StopPoint("seeding the store (before Snakemake)",
                  lambda s: (services / "s3" / "weed.log").is_file() and not (services / "seeded.json").is_file()),
        StopPoint("mid sync_traces", lambda s: (job_dir / "sync" / ".trace_jobs.tar.part").is_file()),
        StopPoint("mid archive", lambda s: grew("archive")(s) and not (job_dir / "archive" / "MANIFEST").is_file()),
        StopPoint("mid publish_model",
                  lambda s: grew("publish_model")(s) and not (job_dir / "verify" / "model_upload.json").is_file()),
        StopPoint("mid link_model_card",
                  lambda s: grew("link_model_card")(s) and not (job_dir / "verify" / "model.json").is_file()),
    ]


def log_sizes(job_dir: Path) -> dict[str, int]:
    logs = job_dir / "logs"
    return {path.stem: path.stat().st_size for path in logs.glob("*.log")} if logs.is_dir() else {}


@dataclass
class CleanDemo:
    cwd: Path
    first: Demo
    done: dict  # the first run's DONE, stable fields (before the hint reclaimed)
    hint: Demo


@pytest.fixture(scope="module")
def clean_demo(tmp_path_factory: pytest.TempPathFactory) -> CleanDemo:
    """An uninterrupted demo, then its closing hint followed as printed (from the same directory)."""
    cwd = tmp_path_factory.mktemp("clean-demo")
    first = Demo.start(DEMO, cwd, "first")
    assert first.wait(RUN_BOUND_SECONDS) == 0, first.output()[-5000:]
    done = stable(cwd / "demo-data")
    hint = Demo.start(printed_command(first.output(), "needs explicit authority for this job"), cwd, "hint")
    assert hint.wait(RUN_BOUND_SECONDS) == 0, hint.output()[-5000:]
    return CleanDemo(cwd, first, done, hint)


def test_the_demo_closing_hint_works_as_printed_and_reaches_a_reclaimed_done(clean_demo: CleanDemo) -> None:
    hint = printed_command(clean_demo.first.output(), "needs explicit authority for this job")
    assert hint[1:] == ["demo", "--data-root", "demo-data", "--config", f"reclaim_authorized={JOB}"], hint
    assert clean_demo.hint.hub_port() != clean_demo.first.hub_port()  # the services were started again
    data_root = clean_demo.cwd / "demo-data"
    done = read_json(data_root / JOB / "DONE")
    assert done["reclaimed"]["status"] == "completed" and done["reclaimed"]["keys"] > 0, done["reclaimed"]
    assert done["steps"]["reclaim"] == "completed" and done["remaining_work"] == []
    assert "needs explicit authority" not in clean_demo.hint.output()  # nothing left to hint at
    assert services_of(data_root) == []
    assert not any((data_root / ".snakemake" / "locks").glob("*"))


def test_ctrl_c_at_five_points_then_the_printed_command_ends_like_an_uninterrupted_demo(
        clean_demo: CleanDemo, tmp_path: Path) -> None:
    data_root = tmp_path / "demo-data"
    points = stop_points(data_root)
    command, stops, ports = DEMO, [], []
    with ExitStack() as held_ports:
        for number in range(len(points) + 2):
            sizes = log_sizes(data_root / JOB)
            demo = Demo.start(command, tmp_path, f"attempt-{number}")
            fired = None
            try:
                while demo.process.poll() is None and fired is None:
                    fired = next((point for point in points if point.reached(sizes)), None)
                    time.sleep(0.005)
                if fired is not None:
                    os.killpg(demo.process.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
                status = demo.wait(STOP_BOUND_SECONDS if fired else RUN_BOUND_SECONDS)
            except BaseException:
                if demo.process.poll() is None:
                    os.killpg(demo.process.pid, signal.SIGKILL)
                raise
            output = demo.output()
            port = demo.hub_port()
            if port is not None:
                assert port not in ports, f"attempt {number}: the Hub is on port {port} again"
                ports.append(port)
                hold_port(port, held_ports)
            if fired is None:
                assert status == 0, output[-5000:]
                break
            where = f"SIGINT at {fired.name}"
            assert status == 128 + signal.SIGINT, f"{where}: {output[-4000:]}"
            assert "Traceback" not in output, f"{where}: {output[-6000:]}"
            assert services_of(data_root) == [], where
            assert not any((data_root / ".snakemake" / "locks").glob("*")), f"{where}: Snakemake kept its lock"
            if (data_root / JOB).is_dir():
                assert leftovers(data_root / JOB) == [] and output_problems(data_root / JOB) == [], where
            command = printed_command(output, "To go on, run the same command")
            assert command[1:] == DEMO[3:], command  # the same command, as the operator can type it
            points.remove(fired)
            stops.append(where)
        else:
            pytest.fail(f"the demo did not finish after {len(stops)} stops: {stops}")
    assert points == [], f"points not reached: {[p.name for p in points]}; stopped at {stops}"
    assert len(ports) >= len(stops)  # every attempt after the seeding point started its own Hub
    assert stable(data_root) == clean_demo.done
    assert [(w["step"], w["status"]) for w in clean_demo.done["remaining_work"]] == [("reclaim", "awaiting_authority")]


STEP_IMPORTING_SLOWLY = """
import sys
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
from rlkeep.runner import RuleProcess

# what a rule's adapter (scripts/steps/<rule>.py) does, with the job Snakemake would give it
process = RuleProcess(SimpleNamespace(rule="sync_logs", log=[sys.argv[1] + "/sync_logs.log"]))
sys.__stdout__.write("OPENED\\n")
sys.__stdout__.flush()
with process.importing():
    import slow_module
process.run(slow_module.step)
"""


def test_ctrl_c_while_a_step_imports_its_module_is_a_stop_not_a_traceback(tmp_path: Path) -> None:
    """A step's module may take seconds to import (torch for an export); Ctrl-C then must end the step
    as it ends a working one: its message, status 130, no traceback in the log Snakemake shows."""
    (tmp_path / "slow_module.py").write_text(
        "import sys, time\nsys.__stdout__.write('IMPORTING\\n')\nsys.__stdout__.flush()\ntime.sleep(60)\n"
        "def step(ctx):\n    pass\n")
    child = subprocess.Popen([sys.executable, "-c", STEP_IMPORTING_SLOWLY, str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=default_signal_actions)
    try:
        assert child.stdout.readline().strip() == "OPENED"
        assert child.stdout.readline().strip() == "IMPORTING"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 128 + signal.SIGINT
    finally:
        if child.poll() is None:
            child.kill()
    said = (tmp_path / "sync_logs.log").read_text() + child.stderr.read()
    assert "stopped by SIGINT" in said and "rerun the same command" in said and "Traceback" not in said, said


CHILD_CLEANING_UP = """
import os, signal, subprocess, sys, time
from pathlib import Path
record = Path(sys.argv[1])
deadline = time.monotonic() + 30  # a test that never signals must not leave these processes behind
if len(sys.argv) > 2:  # the job: records its signal and ends as a stopped step does
    def on_job_signal(signum, frame):
        Path(sys.argv[2]).write_text(signal.Signals(signum).name)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_job_signal)
    signal.signal(signal.SIGINT, on_job_signal)
    record.with_suffix(".job").touch()
    time.sleep(30)
    sys.exit(0)
def on_signal(signum, frame):  # the Snakemake stand-in: records its signal, waits for its job, cleans up
    with open(record, "a") as handle:
        handle.write(f"{signal.Signals(signum).name} group={os.getpgid(0) == os.getpid()}\\n")
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
job = subprocess.Popen([sys.executable, __file__, str(record), str(record.with_suffix(".jobsignal"))])
while not record.with_suffix(".job").is_file() and time.monotonic() < deadline:
    time.sleep(0.01)
record.with_suffix(".ready").touch()
while not record.is_file() and time.monotonic() < deadline:
    time.sleep(0.01)
job.wait()
time.sleep(1.5)  # its clean-up, which a second signal or a SIGKILL would cut short
sys.exit(7)
"""

DRIVER = """
import sys
from pathlib import Path
from rlkeep_dev.interrupts import run_to_its_end
ended = run_to_its_end([sys.executable, sys.argv[1], sys.argv[2]], cwd=Path.cwd(), env=None)
print(f"ended {ended.returncode} {ended.stopped_by}", flush=True)
"""


@pytest.mark.parametrize("signals", [(signal.SIGINT, signal.SIGINT), (signal.SIGHUP,)], ids=["ctrl-c-twice", "hup"])
def test_the_first_stop_signal_reaches_the_child_and_its_jobs_once_and_its_clean_up_is_waited_for(
        tmp_path: Path, signals: tuple[int, ...]) -> None:
    """Snakemake (here a stand-in) gets SIGINT once, its jobs SIGTERM, whatever stop the demo got and
    however often; the demo waits for it and returns its status."""
    child = tmp_path / "child.py"
    child.write_text(CHILD_CLEANING_UP)
    record = tmp_path / "signals.txt"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(child), str(record)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=default_signal_actions)
    try:
        deadline = time.monotonic() + 60
        while not record.with_suffix(".ready").is_file() and time.monotonic() < deadline:
            time.sleep(0.01)
        for signum in signals:
            driver.send_signal(signum)  # to the demo alone, as `kill -INT <pid>` does
            while not record.is_file() and time.monotonic() < deadline:
                time.sleep(0.01)
        out, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert record.read_text() == "SIGINT group=True\n"  # once, in its own process group
    assert record.with_suffix(".jobsignal").read_text() == "SIGTERM"
    assert out == f"ended 7 {int(signals[0])}\n", err  # the child's own status: it was not killed
    assert "Traceback" not in err
    assert ("another signal is not passed on" in err) == (len(signals) > 1), err


STEP_THEN_SLOW_EXIT = """
import sys, time
from pathlib import Path
from rlkeep.context import StepContext
from rlkeep.runner import run_step

target = Path(sys.argv[1])
def write(ctx):
    target.write_text("whole")

ctx = StepContext(job="j", record=None, data_root=target.parent, inputs={}, outputs={"out": target})
status = run_step("sync_logs", write, ctx, process_ends=True)
print("RETURNED", status, flush=True)
time.sleep(3)  # the interpreter's own teardown, which can take this long on a loaded machine
sys.exit(status)
"""


def test_a_stop_after_the_step_finished_keeps_its_outputs_and_its_success(tmp_path: Path) -> None:
    """Killed by a stop once its outputs were whole, the job would fail with its outputs present;
    Snakemake's next run then forces it and plans nothing downstream of an ancient() input of it."""
    target = tmp_path / "out.txt"
    child = subprocess.Popen([sys.executable, "-c", STEP_THEN_SLOW_EXIT, str(target)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=default_signal_actions)
    try:
        assert child.stdout.readline().strip() == "RETURNED 0"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0, child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
    assert target.read_text() == "whole"


SERVICE_STARTING = """
import os, signal, subprocess, sys
from rlkeep_dev.interrupts import Stopped, stops_deferred, stops_raise

try:
    with stops_raise():
        with stops_deferred():
            service = subprocess.Popen(["sleep", "60"], start_new_session=True)
            if sys.argv[1] == "ctrl-c":
                os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C to the demo ...
                os.kill(service.pid, signal.SIGINT)  # ... which also reached the service as it was spawned
            else:
                service.kill()  # the service failed on its own
            if service.wait() != 0:
                raise RuntimeError(f"the service exited with {service.returncode}")
except Stopped as stop:
    print(f"stopped by {stop} after {type(stop.__cause__).__name__}: {stop.__cause__}")
"""


@pytest.mark.parametrize("cause", ["ctrl-c", "its own failure"])
def test_a_service_killed_by_the_ctrl_c_that_came_while_it_started_is_a_stop(tmp_path: Path, cause: str) -> None:
    """Seen in CI: Ctrl-C at the demo's seeding point also killed `weed mini` (SIGINT, -2) as it was
    spawned, and the demo printed that failure's traceback and exit status 1 instead of stopping."""
    ran = subprocess.run([sys.executable, "-c", SERVICE_STARTING, cause], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, preexec_fn=default_signal_actions)
    if cause == "ctrl-c":
        assert ran.stdout == "stopped by SIGINT after RuntimeError: the service exited with -2\n", ran.stderr
        assert ran.returncode == 0, ran.stderr
    else:  # no stop came: the failure is the service's own and is shown as it is
        assert ran.stdout == "" and ran.returncode == 1
        assert "RuntimeError: the service exited with -9" in ran.stderr, ran.stderr


def test_ctrl_c_prints_a_few_lines_naming_what_stopped_and_the_command_that_goes_on(tmp_path: Path) -> None:
    """After Ctrl-C the operator reads at most 10 lines: what was stopped, where Snakemake's whole output
    is, the command that goes on; that command, followed as printed, reaches DONE."""
    job_dir = tmp_path / "demo-data" / JOB
    demo = Demo.start(DEMO, tmp_path, "stopped")
    try:
        while demo.process.poll() is None and not (job_dir / "logs" / "sync_traces.log").is_file():
            time.sleep(0.005)
        time.sleep(0.5)  # the step is under way
        before = len(demo.output().splitlines())
        os.killpg(demo.process.pid, signal.SIGINT)
        assert demo.wait(STOP_BOUND_SECONDS) == 128 + signal.SIGINT, demo.output()[-4000:]
    finally:
        if demo.process.poll() is None:
            os.killpg(demo.process.pid, signal.SIGKILL)
    output = demo.output()
    after = [line for line in output.splitlines()[before:] if line.strip()]
    assert len(after) <= 10, "\n".join(after)
    said = "\n".join(after)
    assert "stopped by SIGINT: the running step" in said and "sync_traces" in said, said
    for noise in ("RuleException", "CalledProcessError", "WorkflowError", "Error in rule", "Traceback"):
        assert noise not in said, said
    log = Path(re.search(r"Snakemake's whole output: (\S+)", said)[1])
    assert log.is_file() and "sync_traces" in log.read_text()
    command = printed_command(output, "To go on, run the same command")
    assert command[1:] == DEMO[3:], command
    again = Demo.start(command, tmp_path, "again")
    assert again.wait(RUN_BOUND_SECONDS) == 0, again.output()[-5000:]
    assert read_json(job_dir / "DONE")["job"] == JOB
