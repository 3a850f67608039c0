"""Rule generation_stats (rules/generation.smk): <job>/metrics/generation.md: vLLM and batch-error figures from the logs."""
from rlkeep.steps import RuleProcess

# the function is the rule's row in the step table (rlkeep.pipeline, column `function`)
RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
