#!/usr/bin/env bash
# Build Harbor's own environment for the comparison test (tests/test_traces_vs_harbor.py) and
# the trace benchmark: harbor==0.26.0 with its `huggingface` extra (datasets), in a venv outside
# the repository, from a Python >= 3.12 (3.12 preferred) on PATH or under ~/.pyenv/versions. Harbor
# needs 3.12, so it can never go into .venv. Usage: scripts/dev/harbor_env.sh [ENV_DIR]
set -euo pipefail

ENV_DIR="${1:-${HARBOR_ENV:-$HOME/.cache/rlkeep-bench/harbor}}"
HARBOR_SPEC="harbor[huggingface]==0.26.0"

is_new_enough() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

is_312() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' >/dev/null 2>&1
}

candidates() {
    local name
    for name in python3.12 python3.13 python3.14 python3; do
        command -v "$name" 2>/dev/null || true
    done
    ls -d "$HOME"/.pyenv/versions/*/bin/python3 2>/dev/null | sort -rV || true
}

# 3.12 first (the version the comparison was checked with), else the first newer one.
find_python() {
    local candidate
    for check in is_312 is_new_enough; do
        while read -r candidate; do
            if [ -n "$candidate" ] && [ -x "$candidate" ] && "$check" "$candidate"; then
                echo "$candidate"; return 0
            fi
        done < <(candidates)
    done
    return 1
}

if ! PYTHON="$(find_python)"; then
    echo "harbor-env: no Python >= 3.12 on PATH or under ~/.pyenv/versions; install one (e.g." \
         "'pyenv install 3.12') and run again" >&2
    exit 1
fi
echo "harbor-env: $("$PYTHON" --version) at $PYTHON -> $ENV_DIR"
if [ ! -x "$ENV_DIR/bin/python" ] || ! is_new_enough "$ENV_DIR/bin/python"; then
    rm -rf "$ENV_DIR"
    mkdir -p "$(dirname "$ENV_DIR")"
    "$PYTHON" -m venv "$ENV_DIR"
fi
"$ENV_DIR/bin/python" -m pip install --quiet --upgrade pip
"$ENV_DIR/bin/python" -m pip install --quiet "$HARBOR_SPEC"
"$ENV_DIR/bin/python" -c 'import datasets, harbor.utils.traces_utils as t; from importlib.metadata import version; assert version("harbor") == "0.26.0", version("harbor"); print("harbor", version("harbor"), "datasets", datasets.__version__)'
echo "harbor-env: ready; tests/test_traces_vs_harbor.py finds it there (or set RLKEEP_HARBOR_PYTHON=$ENV_DIR/bin/python)"
