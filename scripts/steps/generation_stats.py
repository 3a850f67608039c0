"""Rule generation_stats (rules/generation.smk): <job>/metrics/generation.md: vLLM and batch-error figures from the logs."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.generation_stats import generation_stats_step
process.run(generation_stats_step)
