"""`rlkeep consolidate` and `rlkeep verify-model`."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlkeep.export.consolidate import consolidate
from rlkeep.export.detect import detect_format, list_files
from rlkeep.export.layout import DEFAULT_MAX_SHARD_BYTES
from rlkeep.export.verify import verify_model
from rlkeep.jsonio import dumps


def consolidate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep consolidate",
                                     description="Consolidate a checkpoint step directory into a verified flat "
                                                 "model folder; print the JSON report.")
    parser.add_argument("src", type=Path, help="step directory (an HF export folder or ckpts/global_step_N)")
    parser.add_argument("dst", type=Path, nargs="?", help="flat model folder to create (must not exist)")
    parser.add_argument("--max-shard-bytes", type=int, default=DEFAULT_MAX_SHARD_BYTES,
                        help=f"largest output shard in bytes of tensor data (default {DEFAULT_MAX_SHARD_BYTES}); "
                             "a sharded export whose shards all fit keeps its sharding, linked whole")
    parser.add_argument("--inspect", action="store_true", help="only detect the format and print the evidence")
    args = parser.parse_args(argv)
    if args.inspect:
        print(dumps(detect_format(list_files(args.src)).to_dict()), end="")
        return 0
    if args.dst is None:
        parser.error("DST is required unless --inspect is given")
    print(dumps(consolidate(args.src, args.dst, max_shard_bytes=args.max_shard_bytes)), end="")
    return 0


def verify_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkeep verify-model",
                                     description="Verify a flat model folder; print the JSON evidence.")
    parser.add_argument("dir", type=Path, help="model folder")
    args = parser.parse_args(argv)
    print(dumps(verify_model(args.dir)), end="")
    return 0
