# rlkeep developer entry points. Each target creates .venv when missing and installs the
# pinned set (pyproject.toml pins the direct dependencies, requirements.lock the rest).
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.rlkeep-installed
EXTRAS := test,torch,postgres,slurm
# the suite waits on servers and subprocesses: three workers keep it short on two cores; the
# slowest tests are listed at the end (the suite is over its 20 min budget: where to cut first)
PYTEST_ARGS ?= -n 3 --durations=25

.PHONY: setup test demo bench lint clean-demo harbor-env campaign-shots

$(STAMP): pyproject.toml requirements.lock
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade "pip==26.3"
	$(VPY) -m pip install --quiet -c requirements.lock -e ".[$(EXTRAS)]"
	$(VENV)/bin/rlkeep install-profiles
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(VPY) -m pytest $(PYTEST_ARGS)

demo: setup
	$(VPY) -m rlkeep demo --data-root demo-data

bench: setup
	$(VPY) tests/benchmarks/run_all.py --out bench/results

# docs/campaign.png and docs/campaign-run.png: a 300-run index and a blocked run's page, 1,400 px wide
campaign-shots: setup
	$(VPY) tests/benchmarks/bench_campaign.py --rounds 1 --shots docs

# fails on any finding: snakemake's own linter, then the Snakefile formatting
lint: setup
	mkdir -p demo-data
	$(VENV)/bin/snakemake --lint --snakefile Snakefile --directory demo-data -n
	$(VENV)/bin/snakefmt --check Snakefile rules/

# Harbor 0.26 (Python >= 3.12) in its own env for tests/test_traces_vs_harbor.py; never in .venv
HARBOR_ENV ?= $(HOME)/.cache/rlkeep-bench/harbor

harbor-env:
	scripts/dev/harbor_env.sh $(HARBOR_ENV)

clean-demo:
	rm -rf demo-data
