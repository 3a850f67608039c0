"""Rule capture_chain (rules/capture.smk): <job>/chain.json: every attempt of the chain and its scheduler state."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.scheduler.steps import capture_chain_step
process.run(capture_chain_step)
