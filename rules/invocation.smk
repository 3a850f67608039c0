# One invocation of the pipeline apart from its rules (rlkeep.invocation): which DONE targets the
# campaign target plans, the planning notes, the views written when the process ends, and the
# Snakemake process's patches (rlkeep.snakemake_process).

from rlkeep import snakemake_process
from rlkeep.invocation import Invocation
from rlkeep.settled import planning_is_forced, unsettled_reason

INVOCATION = Invocation(DATA_ROOT, RECORDS_DIR)


def get_all_done_targets(wildcards):
    """DONE of every job the campaign target still has to plan: a settled job (its completion
    record still describes it, rlkeep.settled) is left out unless this invocation forces
    anything, at most `max_new_jobs` jobs that have not started are taken (the others wait,
    and planning says so), and a job whose record does not load is refused (planning names
    each, with its error). An input function, so Snakemake's DAG settings (--forcerun, ...) are known.
    """
    forced = planning_is_forced(snakemake_process.dag_settings(workflow))
    return INVOCATION.campaign_targets(
        [Path(path).stem for path in get_record_files()],
        config=config,
        max_new_jobs=get_max_new_jobs(),
        needs_planning=lambda job: forced or get_unsettled_reason(job) is not None,
        load_error=get_load_error,
    )


def get_load_error(job):
    """The message that refuses the job's record, or None when it loads."""
    record = load_job_record(job)
    return str(record) if isinstance(record, RecordError) else None


def get_max_new_jobs():
    """config max_new_jobs: an int, or None for 'all'."""
    value = config.get("max_new_jobs", "all")
    return None if value == "all" else value


def get_unsettled_reason(job):
    """Why the job still needs planning, or None (rlkeep.settled.unsettled_reason)."""
    return unsettled_reason(
        Path(job), get_record_sha256(job), lambda kind: evidence_of(job, kind).values()
    )


# before the views' handler is registered, so the patches' exit handler runs after it
snakemake_process.install()
snakemake_process.hold_interrupt_in_steps(shell)
# Only Snakemake's own process (not a job it runs elsewhere), and only in a data root.
if snakemake_process.is_main_process(workflow):
    snakemake_process.quiet_after_stop()
    INVOCATION.write_views_at_exit()


onsuccess:
    snakemake_process.scheduler_finished()
    INVOCATION.repeat_notes()


onerror:
    snakemake_process.scheduler_finished()
    INVOCATION.repeat_notes()
    if note := snakemake_process.stopped_note(log):
        print(note, file=sys.stderr)
