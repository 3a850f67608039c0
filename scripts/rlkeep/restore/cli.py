"""`rlkeep restore JOB [--from URL] [--to DIR|s3://...|file://...] [--overwrite]`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlkeep.errors import RlkeepError
from rlkeep.restore.run import restore_archive
from rlkeep.restore.source import location_from_job_dir, location_from_url
from rlkeep.restore.targets import LocalTarget, StoreTarget


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlkeep restore",
        description="Restore a run's archive (every file checked against its MANIFEST's size and sha256). "
                    "Without --from, the archive verify_archive verified, as <job>/verify/archive.json in the "
                    "data root (the current folder) names it.")
    parser.add_argument("job")
    parser.add_argument("--from", dest="source", metavar="URL",
                        help="the record's archive.dest (s3://..., file:///..., hf://datasets/<org>/<name>): "
                             "restore from the destination alone, no data root needed")
    parser.add_argument("--revision", help="with an hf:// --from: the dataset commit (default: main)")
    parser.add_argument("--to", metavar="DIR|URL", help="a local folder (default ./<job>-restored) or a store prefix "
                                                         "(s3://bucket/prefix, file:///path)")
    parser.add_argument("--overwrite", action="store_true", help="replace files or objects the target already has")
    parser.add_argument("--data-root", default=".", help="where <job>/ is, without --from (default: here)")
    args = parser.parse_args(argv)
    if args.revision and not (args.source or "").startswith("hf://"):
        raise RlkeepError("--revision applies to a Hub dataset --from (hf://datasets/<org>/<name>) only")
    location = (location_from_url(args.source, args.job, args.revision) if args.source
                else location_from_job_dir(Path(args.data_root) / args.job, args.job))
    to = args.to or f"{args.job}-restored"
    target = StoreTarget(to) if to.startswith(("s3://", "file://")) else LocalTarget(Path(to))
    try:
        restored = restore_archive(location, target, overwrite=args.overwrite)
    finally:
        if isinstance(target, StoreTarget):
            target.close()
    json.dump(restored.evidence(), sys.stdout, indent=2)
    print()
    if restored.problems:
        raise RlkeepError(restored.message())
    return 0
