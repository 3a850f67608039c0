# The campaign view (rlkeep/campaign/): campaign/index.html, one row per record in records/,
# campaign/<job>.html per record, and campaign/refused.json, the records that do not load. It
# reads only the records and the job folders (no network), so it is cheap; the onsuccess/onerror
# handlers in common.smk rebuild it after every invocation, and this rule makes it on demand
# (`snakemake campaign/index.html`, and the default target `all`).


rule campaign:
    input:
        records=get_record_files(),
    output:
        index=report(
            "campaign/index.html",
            caption="../report/campaign.rst",
            category="Campaign",
        ),
        runs=expand("campaign/{job}.html", job=get_all_jobs()),
        refused="campaign/refused.json",
    log:
        "campaign/logs/campaign.log",
    conda:
        RLKEEP_ENV
    params:
        records=get_records_dir,
        invocation=get_invocation(),  # the command a blocked run's row says to continue with
    script:
        "../scripts/steps/campaign.py"
