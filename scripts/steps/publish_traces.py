"""Rule publish_traces (rules/publish.smk): <job>/verify/traces.json: the shard set replaced in one commit and verified."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
