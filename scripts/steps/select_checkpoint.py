"""Rule select_checkpoint (rules/checkpoint.smk): <job>/checkpoint/selected.json: the checkpoint the record's rule selects."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.checkpoints.step import select_checkpoint_step
process.run(select_checkpoint_step)
