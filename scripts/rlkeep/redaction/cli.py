"""`rlkeep redact ROOT [--check]`: redact a tree in place and print the findings as JSON."""
from __future__ import annotations


import argparse
import sys


from rlkeep.jsonio import dumps
from rlkeep.redaction.engine import redactor_from_environment
from rlkeep.redaction.walk import redact_tree


def cli_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlkeep redact",
        description="Redact credential-shaped text under ROOT in place, inside compressed files, tars, zips, "
                    "parquet and arrow files too; print the findings as JSON (kind, path, member, line; never "
                    "the value) and what could not be read. Exits 1 when anything could not be read.")
    parser.add_argument("root", help="directory (or single file) to redact")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if credential-shaped text remains or a file could not be read")
    args = parser.parse_args(argv)
    report = redact_tree(args.root, redactor_from_environment(), check=args.check)
    sys.stdout.write(dumps(report.to_json()))
    status = 0
    if args.check and report.findings:
        print(f"rlkeep: credential-shaped text remains under {args.root}: {len(report.findings)} finding(s)",
              file=sys.stderr)
        status = 1
    if report.unreadable:
        # Fail closed: a file that could not be read has not been shown to hold no secret.
        print(f"rlkeep: {len(report.unreadable)} file(s) or member(s) under {args.root} could not be read, so "
              "they are not known to be clean (see \"unreadable\"); remove them or convert them to a readable "
              "format, then rerun", file=sys.stderr)
        status = 1
    return status
