"""Rule publish_traces (rules/publish.smk): <job>/verify/traces.json: the shard set replaced in one commit and verified."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.hub.steps import publish_traces_step
process.run(publish_traces_step)
