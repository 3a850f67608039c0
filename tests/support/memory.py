"""A process's own peak memory, measured by the process itself: wait4 and `ru_maxrss` give the
largest of a process and every child it waited for, which hides whose memory it was."""
from __future__ import annotations


def own_peak_script(module: str) -> str:
    """Python source for `python -c SCRIPT PEAK_FILE ARGS...`: runs `module` as `python -m module
    ARGS...` would, and at exit writes the process's own VmHWM (KB) to PEAK_FILE. Registered before
    the module runs, the handler runs after every exit handler the module registers."""
    return rf"""
import atexit, runpy, sys
out = sys.argv.pop(1)
def report():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(out, "w") as handle:
        handle.write(peak)
atexit.register(report)
sys.argv = [{module!r}, *sys.argv[1:]]
runpy.run_module({module!r}, run_name="__main__")
"""
