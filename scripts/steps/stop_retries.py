"""Rule stop_retries (rules/capture.smk): runs its row's function in the step table."""
from rlkeep.runner import RuleProcess

RuleProcess(snakemake).run_rule_function()  # noqa: F821 - injected by Snakemake's script preamble
