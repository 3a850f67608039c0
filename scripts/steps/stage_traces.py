"""Rule stage_traces (rules/publish.smk): <job>/stage/traces: the trace dataset's parquet shards, redacted."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.traces.step import stage_traces_step
process.run(stage_traces_step)
