"""rlkeep's development package: the test rig, not the product.

`rlkeep_dev.devserver` (the Hub-compatible server, the Iris stand-in, the S3 launcher),
`rlkeep_dev.example` (the realistic finished-run generator), `rlkeep_dev.demo` (`make demo`) and
`rlkeep_dev.interrupts` (the demo's Ctrl-C: Snakemake finishes its clean-up).
It lives beside `rlkeep` in `scripts/` so the editable install (`make setup`, `pip install -e
'.[test]'`) puts it on the path; the product wheel (`pip wheel .`) packages `rlkeep` only.
"""
