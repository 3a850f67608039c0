"""Rule done (rules/report.smk): <job>/DONE and REPORT.md: the completion record."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.report import done_step
process.run(done_step)
