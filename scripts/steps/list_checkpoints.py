"""Rule list_checkpoints (rules/checkpoint.smk): <job>/checkpoint/candidates.json: the valid checkpoints of the chain."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.checkpoints.step import list_checkpoints_step
process.run(list_checkpoints_step)
