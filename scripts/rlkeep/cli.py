"""`rlkeep <command> ...`: one entry point; each command lives in the module of its concern.

Commands are imported lazily so `rlkeep redact` does not pay for pandas or boto3.
Every command is `cli_main(argv) -> int` in its module. An RlkeepError ends the command
with its message on stderr (prefixed `rlkeep:`) and exit status 1; nothing else is caught.
"""
from __future__ import annotations

import importlib
import sys

from rlkeep.errors import RlkeepError

# the test rig (local services, run generator, demo): in the source tree, not in the product wheel
DEV_PACKAGE = "rlkeep_dev"

# command -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "step": ("rlkeep.step_cli", "cli_main", "run one pipeline step by hand: RULE --job J (scripts/steps/RULE.py)"),
    "campaign": ("rlkeep.campaign.writer", "cli_main", "write STATUS.json and the campaign pages (as every invocation ends)"),
    "validate-record": ("rlkeep.records", "cli_main", "validate records/<job>.yaml files"),
    "redact": ("rlkeep.redaction", "cli_main", "redact credential-shaped text in place (--check: only report)"),
    "check-publication": ("rlkeep.hub", "check_publication_main", "check a downloaded model repo is publishable"),
    "metrics": ("rlkeep.metrics", "cli_main", "build the metric surface from trainer logs"),
    "consolidate": ("rlkeep.export", "consolidate_main", "consolidate a checkpoint into a flat model folder"),
    "verify-model": ("rlkeep.export", "verify_main", "verify a flat model folder"),
    "traces-dataset": ("rlkeep.traces", "cli_main", "rebuild the trace dataset from a trace tree"),
    "restore": ("rlkeep.restore", "cli_main", "restore a run's archive, every file checked (--from URL: no data root)"),
    "audit": ("rlkeep.audit_run", "cli_main", "check again every destination each DONE names (reads only; exit 1 on drift)"),
    "registry": ("rlkeep.registry", "cli_main", "registry administration (add a base-model row explicitly)"),
    "example-run": ("rlkeep_dev.example", "cli_main", "write a realistic finished run into a store"),
    "demo": ("rlkeep_dev.demo", "cli_main", "run the pipeline on a generated run against local services"),
    "install-profiles": ("rlkeep.profiles", "cli_main", "make `--profile iris|local` resolve from any directory"),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: rlkeep <command> [args...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, _, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"rlkeep: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, function_name, _ = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if not module_name.startswith(DEV_PACKAGE + ".") or error.name not in (DEV_PACKAGE, module_name):
            raise
        print(f"rlkeep: `rlkeep {name}` needs the development package {DEV_PACKAGE} (the local services and the "
              "example-run generator), which the rlkeep wheel does not ship. Install it from a clone of the "
              "repository: `make setup`, or `pip install -e '.[test]'` there.", file=sys.stderr)
        return 2
    function = getattr(module, function_name)
    try:
        return int(function(rest) or 0)
    except RlkeepError as error:
        print(f"rlkeep: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
