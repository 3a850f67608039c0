"""Rule reclaim (rules/archive.smk): <job>/reclaim.json: the run's sources deleted, only under authority after every verification."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.reclaim import reclaim_step
process.run(reclaim_step)
