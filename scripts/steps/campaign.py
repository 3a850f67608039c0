"""Adapter of the campaign rule (rules/campaign.smk): the pages of every record, by rlkeep.campaign."""
from pathlib import Path

from rlkeep.campaign import write_campaign

index = write_campaign(Path.cwd(), Path(snakemake.params.records),  # noqa: F821 - injected by Snakemake
                       invocation=snakemake.params.invocation)  # noqa: F821
Path(snakemake.log[0]).write_text(f"wrote {index}\n")  # noqa: F821
