"""Rule stop_retries (rules/capture.smk): <job>/retries.json: the chain's pending retries stopped by exact id."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.scheduler.steps import stop_retries_step
process.run(stop_retries_step)
