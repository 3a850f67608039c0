"""Rule register (rules/archive.smk): <job>/register.json: the registry row, only when the record authorizes it."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.registry import register_step
process.run(register_step)
