"""What a process is like when it ends, reported by the process itself: its own peak memory (wait4
and `ru_maxrss` give the largest of a process and every child it waited for, which hides whose
memory it was), the modules it loaded, and how many objects it left out of its last collection."""
from __future__ import annotations

import json
from pathlib import Path


def exit_facts_script(module: str) -> str:
    """Python source for `python -c SCRIPT FACTS_FILE ARGS...`: runs `module` as `python -m module
    ARGS...` would, and at exit writes `exit_facts`' JSON to FACTS_FILE. Registered before the module
    runs, the handler runs after every exit handler the module registers."""
    return rf"""
import atexit, gc, json, runpy, sys
out = sys.argv.pop(1)
def report():
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    facts = {{"peak_kb": peak, "frozen_objects": gc.get_freeze_count(),
              "top_level_modules": sorted({{name.partition(".")[0] for name in sys.modules}})}}
    with open(out, "w") as handle:
        json.dump(facts, handle)
atexit.register(report)
sys.argv = [{module!r}, *sys.argv[1:]]
runpy.run_module({module!r}, run_name="__main__")
"""


def exit_facts(facts_file: Path) -> dict:
    """{"peak_kb": VmHWM in KB, "frozen_objects": gc.get_freeze_count(), "top_level_modules": [...]}"""
    return json.loads(facts_file.read_text())
