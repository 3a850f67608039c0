"""rlkeep.snakemake_process: the installed Snakemake still has the shape the patches replace; the
params serializer chosen is Snakemake's own for every value; a script job's params are stored as
Snakemake stores them without importing pandas; in a real invocation of the pipeline the params check
imports no pandas, a changed param still reruns its step, the process leaves its heap out of the
last collection, and the rescheduling timers the finished scheduler left are cancelled (and no
other timer).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from snakemake.persistence import PersistenceBase

from rlkeep.snakemake_process import (cancel_rescheduling_timers, params_check_without_pandas_import,
                                      script_params_without_pandas_import, serializer_for_loaded_modules)
from rlkeep_dev.example.kinds import write_datagen_run
from tests.conftest import REPO, run_snakemake, write_record
from tests.support.memory import exit_facts, exit_facts_script

JOB = "dg-noop"
SERIALIZERS_SOURCE = """
from snakemake.persistence import PersistenceBase
class Serializers:  # Snakemake's two params serializers, which use no state of a persistence backend
    _serialize_param_builtin = PersistenceBase._serialize_param_builtin
    _serialize_param_pandas = PersistenceBase._serialize_param_pandas
"""
exec(SERIALIZERS_SOURCE)
VALUES = [None, 3, 2.5, True, "s3://bucket/prefix", ["a", 1], ("x",), {"rule": "last", "n": 2}, {1, 2},
          b"raw", range(3)]


def test_the_installed_snakemake_has_the_choice_the_patch_replaces() -> None:
    assert params_check_without_pandas_import() is True
    assert isinstance(PersistenceBase.__dict__["_serialize_param"], property)
    assert PersistenceBase.__dict__["_serialize_param"].fget is serializer_for_loaded_modules


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_plain_value_serializes_as_snakemake_would_with_pandas(value: object) -> None:
    serializers = Serializers()  # noqa: F821 - defined by SERIALIZERS_SOURCE
    assert serializers._serialize_param_builtin(value) == serializers._serialize_param_pandas(value)
    # pandas is loaded in this process: the pandas-aware one, as Snakemake chooses
    assert serializer_for_loaded_modules(serializers) == serializers._serialize_param_pandas


def test_before_pandas_is_loaded_the_builtin_serializer_is_chosen_and_pandas_stays_unloaded() -> None:
    script = (
        "import sys\n"
        "from rlkeep.snakemake_process import serializer_for_loaded_modules\n"
        f"{SERIALIZERS_SOURCE}\n"
        "serializers = Serializers()\n"
        "chosen = serializer_for_loaded_modules(serializers)\n"
        "assert chosen == serializers._serialize_param_builtin\n"
        f"print(repr([chosen(value) for value in {VALUES!r}]))\n"
        "print('pandas' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    serialized, pandas_loaded = result.stdout.splitlines()
    assert pandas_loaded == "False"
    serializers = Serializers()  # noqa: F821 - defined by SERIALIZERS_SOURCE
    assert serialized == repr([serializers._serialize_param_pandas(value) for value in VALUES])
    # the values pandas-aware serialization exists for are pandas objects: made only with pandas loaded
    frame = pd.DataFrame({"a": [1, 2]})
    assert serializers._serialize_param_pandas(frame) == repr(pd.util.hash_pandas_object(frame).tolist())


def watched_snakemake_script() -> str:
    """exit_facts_script("snakemake"), also writing to FACTS_FILE + ".extra" the source files on the
    stack when pandas was first imported and the module of the params serializer chooser in use."""
    watch = (
        "import atexit, importlib.abc, json, sys, traceback\n"
        "EXTRA = {'pandas_importer': None, 'chooser_module': None}\n"
        "EXTRA_FILE = sys.argv[1] + '.extra'\n"
        "class FirstImportOfPandas(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'pandas' and 'pandas' not in sys.modules:\n"
        "            EXTRA['pandas_importer'] = [frame.filename for frame in traceback.extract_stack()]\n"
        "        return None\n"
        "sys.meta_path.insert(0, FirstImportOfPandas())\n"
        "def report():\n"
        "    from snakemake.persistence import PersistenceBase\n"
        "    EXTRA['chooser_module'] = PersistenceBase.__dict__['_serialize_param'].fget.__module__\n"
        "    with open(EXTRA_FILE, 'w') as out:\n"
        "        json.dump(EXTRA, out)\n"
        "atexit.register(report)\n"
        "import threading\n"
        "def at_shutdown():  # before the interpreter joins the threads left, so before exit handlers\n"
        "    EXTRA['pending_timers'] = sum(1 for thread in threading.enumerate()\n"
        "                                  if isinstance(thread, threading.Timer) and not thread.finished.is_set())\n"
        "threading._register_atexit(at_shutdown)\n"
    )
    return watch + exit_facts_script("snakemake")


def test_a_real_invocation_checks_params_without_pandas_freezes_its_heap_and_leaves_no_timer(
        tmp_path: Path, data_root: Path) -> None:
    run = write_datagen_run(tmp_path / "runs" / JOB, job=JOB, n_trials=12)
    write_record(data_root, run.record(store_url=f"file://{run.root}"))
    first = run_snakemake(data_root, f"{JOB}/DONE")
    assert first.returncode == 0, first.stderr[-3000:]

    facts_file = tmp_path / "facts.json"

    def invoke(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", watched_snakemake_script(), str(facts_file), "--snakefile", str(REPO / "Snakefile"),
             "--profile", str(REPO / "profiles" / "local"), f"{JOB}/DONE", *extra],
            cwd=data_root, capture_output=True, text=True, timeout=300)

    no_op = invoke()
    assert no_op.returncode == 0 and "Nothing to be done" in no_op.stdout + no_op.stderr, no_op.stderr[-3000:]
    facts = exit_facts(facts_file)
    assert facts["frozen_objects"] > 10_000  # the heap Snakemake built, left out of the last collection
    extra = json.loads(facts_file.with_name("facts.json.extra").read_text())
    assert extra["chooser_module"] == "rlkeep.snakemake_process"  # the params check ran with ours
    stack = extra["pandas_importer"]
    if stack is not None:
        # an executor plugin may load pandas itself (the SLURM plugin's efficiency report does, and
        # the test environment has it); the params check of the jobs above must not
        assert not any("snakemake/persistence" in frame for frame in stack), "\n".join(stack)
        assert any("snakemake_executor_plugin_" in frame for frame in stack), "\n".join(stack)

    # a run of a job leaves the scheduler's rate-limit timers, cancelled once it finished
    forced = invoke("--forcerun", "done")
    assert forced.returncode == 0 and "1 of 1 steps (100%) done" in forced.stdout + forced.stderr, forced.stderr[-3000:]
    assert json.loads(facts_file.with_name("facts.json.extra").read_text())["pending_timers"] == 0

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


STORE_PARAMS = """
import sys, json
from snakemake.iocontainers import Params, Snakemake
if sys.argv[1] == "patched":
    from rlkeep.snakemake_process import script_params_without_pandas_import
    assert script_params_without_pandas_import()
params = Params(fromdict={"settings": {"workers": 64, "rule": "last"}, "dest": "s3://b/p"})
job = object.__new__(Snakemake)
job._safely_store_params(params)
print(json.dumps({"pandas_loaded": "pandas" in sys.modules, "stored": list(job._params_store),
                  "names": sorted(map(list, job._params_store._get_names())), "types": job._params_types}))
"""


def test_a_script_jobs_params_are_stored_as_snakemake_stores_them_without_importing_pandas() -> None:
    """Guard: rlkeep.snakemake_process.script_params_without_pandas_import (Snakemake 9.27 imports
    pandas here for every script job it prepares, in its own process)."""
    def store(mode: str) -> dict:
        result = subprocess.run([sys.executable, "-c", STORE_PARAMS, mode], capture_output=True, text=True, check=True)
        return json.loads(result.stdout)

    upstream, patched = store("upstream"), store("patched")
    assert upstream["pandas_loaded"] is True  # the cost: the shape the patch takes off is still there
    assert patched["pandas_loaded"] is False
    assert {k: v for k, v in patched.items() if k != "pandas_loaded"} == \
        {k: v for k, v in upstream.items() if k != "pandas_loaded"}


def test_with_pandas_loaded_its_objects_are_converted_as_before() -> None:
    from snakemake.iocontainers import Params, Snakemake

    upstream_store = Snakemake.__dict__["_safely_store_params"]
    assert script_params_without_pandas_import()
    frame = pd.DataFrame({"a": [1, 2]})
    params = Params(fromdict={"frame": frame, "series": frame["a"], "plain": 3})
    ours, theirs = object.__new__(Snakemake), object.__new__(Snakemake)
    ours._safely_store_params(params)
    (getattr(upstream_store, "__wrapped__", upstream_store))(theirs, params)
    assert list(ours._params_store) == list(theirs._params_store) == [{"a": {0: 1, 1: 2}}, {0: 1, 1: 2}, 3]
    assert ours._params_types == theirs._params_types == {0: "pd.DataFrame", 1: "pd.Series"}


def test_the_refusal_holds_only_in_the_thread_that_stores_params() -> None:
    """While one thread stores a job's params, another thread imports what it likes."""
    script = """
import sys, threading
from rlkeep.snakemake_process import _REFUSER, script_params_without_pandas_import
assert script_params_without_pandas_import()
_REFUSER.refused.names = {"tomllib", "pandas"}
try:
    import tomllib
    sys.exit("refused nothing")
except ModuleNotFoundError:
    pass
elsewhere = []
thread = threading.Thread(target=lambda: elsewhere.append(__import__("tomllib").__name__))
thread.start(); thread.join()
assert elsewhere == ["tomllib"], elsewhere
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
