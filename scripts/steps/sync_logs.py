"""Rule sync_logs (rules/sync.smk): <job>/sync/logs.tar and its manifest: every attempt's logs."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.sync import sync_logs_step
process.run(sync_logs_step)
