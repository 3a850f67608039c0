"""`rlkeep step RULE --job J`: run one pipeline step by hand, outside Snakemake.

A rule's function is named in one place, its row's `function` column in the step table
(rlkeep.pipeline), which its adapter `scripts/steps/<rule>.py` and this command both run;
`rlkeep step rlkeep.<module>:<function>` finds the rule whose row names that function.
"""
from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from rlkeep.context import StepContext
from rlkeep.errors import RlkeepError
from rlkeep.pipeline import STEP_BY_NAME, step_for_rule
from rlkeep.records import load_record, record_path
from rlkeep.runner import StepFunction, configure_logging, run_step

def function_reference(rule: str) -> str:
    """`<module>:<function>` the rule runs: its row's `function` column."""
    return step_for_rule(rule).function


def load_function(reference: str) -> StepFunction:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def rule_for_target(target: str) -> str:
    """`rlkeep step`'s argument: a rule name, or the function as rlkeep.<module>:<function> (a name
    a package re-exports, rlkeep.archive:archive_step, finds the rule of the module defining it)."""
    if ":" not in target:
        if target not in STEP_BY_NAME:
            raise RlkeepError(f"rule {target!r} is not a step; expected one of: {', '.join(STEP_BY_NAME)}")
        return target
    references = {target}
    try:
        function = load_function(target)
        references.add(f"{function.__module__}:{function.__name__}")
    except (ImportError, AttributeError, ValueError):  # no such module or name: the error below
        pass
    for rule in STEP_BY_NAME:
        if function_reference(rule) in references:
            return rule
    raise RlkeepError(f"step target {target!r}: no rule's row (rlkeep.pipeline) names it; expected a rule name "
                      f"({', '.join(STEP_BY_NAME)}) or rlkeep.<module>:<function> of one")


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep step")
    parser.add_argument("target", help="the rule's name, or rlkeep.<module>:<function>")
    parser.add_argument("--job", required=True)
    parser.add_argument("--records", default="records")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=PATH")
    args = parser.parse_args(argv)

    def pairs(items: list[str]) -> dict[str, Path]:
        return {name: Path(path) for name, _, path in (item.partition("=") for item in items)}

    configure_logging()
    rule = rule_for_target(args.target)
    ctx = StepContext(job=args.job, record=load_record(record_path(args.records, args.job)), data_root=Path.cwd(),
                      inputs=pairs(args.input), outputs=pairs(args.output))
    return run_step(rule, load_function(function_reference(rule)), ctx)
