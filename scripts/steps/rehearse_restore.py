"""Rule rehearse_restore (rules/archive.smk): <job>/verify/restore.json: the archive restored from its destination and compared."""
from rlkeep.steps import RuleProcess

process = RuleProcess(snakemake)  # noqa: F821 - injected by Snakemake's script preamble
with process.importing():
    from rlkeep.restore.step import rehearse_restore_step
process.run(rehearse_restore_step)
