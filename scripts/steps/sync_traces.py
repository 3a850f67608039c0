"""Rule sync_traces (rules/sync.smk): <job>/sync/trace_jobs.tar and its manifest: the full durable trace tree."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.sync import sync_traces_step
process.run(sync_traces_step)
