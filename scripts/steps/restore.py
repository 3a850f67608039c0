"""Rule restore (rules/archive.smk): <job>/restore/DONE: the archive restored into <job>/restore/tree/ (on demand)."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.restore.step import restore_step
process.run(restore_step)
