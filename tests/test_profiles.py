"""Profiles per checkout (issue 28): two clones that both ran `rlkeep install-profiles` each run
their own Snakefile; the plain `--profile iris` stays with the checkout that installed it first
until `--force` says otherwise, and the second is told whose it is."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# What a clone needs to plan: the workflow, its package, its profiles and what the rules name.
CLONE_PARTS = ("Snakefile", "rules", "config", "scripts", "profiles", "envs", "report")
MARKER_RULE = "\n\nrule only_in_clone_b:\n    output:\n        \"b.txt\",\n    shell:\n        \"touch {output}\"\n"


def clone(where: Path) -> Path:
    root = where / "rlkeep"  # both clones share a folder name: their own profile names still differ
    for part in CLONE_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            root.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / part)
    return root


def in_clone(root: Path, xdg: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "scripts"), "XDG_CONFIG_HOME": str(xdg)}
    return subprocess.run([sys.executable, *argv], cwd=cwd or root, env=env, capture_output=True, text=True)


def install(root: Path, xdg: Path, *flags: str) -> str:
    result = in_clone(root, xdg, "-c", "import sys; from rlkeep.profiles import cli_main; sys.exit(cli_main(sys.argv[1:]))",
                      *flags)
    assert result.returncode == 0, result.stderr
    return result.stdout


def rules_of(root: Path, xdg: Path, profile: str, data_root: Path) -> set[str]:
    result = in_clone(root, xdg, "-m", "snakemake", "--profile", profile, "--list-rules", cwd=data_root)
    assert result.returncode == 0, result.stderr[-2000:]
    return {line.strip() for line in result.stdout.splitlines() if line.strip()}


def test_two_clones_with_installed_profiles_each_run_their_own_snakefile(tmp_path: Path) -> None:
    xdg, data_root = tmp_path / "xdg", tmp_path / "data"
    (data_root / "records").mkdir(parents=True)
    a, b = clone(tmp_path / "a"), clone(tmp_path / "b")
    with open(b / "Snakefile", "a") as snakefile:
        snakefile.write(MARKER_RULE)

    said_a = install(a, xdg)
    said_b = install(b, xdg)
    profiles = xdg / "snakemake"
    own_b = next(p.name for p in profiles.iterdir() if p.name.startswith("iris-rlkeep-"))
    assert sorted(p.name for p in profiles.iterdir() if p.name.startswith("iris")) == ["iris", "iris-rlkeep", own_b]
    assert f"installed {profiles / 'iris' / 'profile.yaml'}" in said_a
    assert f"kept {profiles / 'iris' / 'profile.yaml'}: it runs {a}" in said_b and f"--profile {own_b}" in said_b
    assert str(profiles / "iris" / "profile.yaml") not in said_b.replace("kept ", "", 1).split("installed", 1)[-1]

    assert "only_in_clone_b" not in rules_of(a, xdg, "iris", data_root)  # the plain name stays with a
    assert "only_in_clone_b" not in rules_of(a, xdg, "iris-rlkeep", data_root)
    assert "only_in_clone_b" in rules_of(b, xdg, own_b, data_root)
    install(a, xdg)  # reinstalling a changes nothing of b's
    assert "only_in_clone_b" in rules_of(b, xdg, own_b, data_root)

    # an explicit --force moves the plain name, and says where it points now
    said = install(b, xdg, "--force")
    assert f"installed {profiles / 'iris' / 'profile.yaml'} (snakefile: {b / 'Snakefile'})" in said
    assert "only_in_clone_b" in rules_of(b, xdg, "iris", data_root)
    assert "only_in_clone_b" not in rules_of(a, xdg, "iris-rlkeep", data_root)


PRINTED = re.compile(r"snakemake --profile ([A-Za-z0-9._-]+)")


def test_every_command_a_second_checkout_prints_runs_its_own_snakefile(tmp_path: Path) -> None:
    """The pages, STATUS.json and its remaining work, and the invocation rlkeep reads back all name the
    profile that runs the checkout that printed them: `iris` for the first, `iris-<name>` for the second."""
    from tests.support.campaign import blocked_run, not_started

    xdg, data_root = tmp_path / "xdg", tmp_path / "data"
    a, b = clone(tmp_path / "a"), clone(tmp_path / "b")
    with open(b / "Snakefile", "a") as snakefile:
        snakefile.write(MARKER_RULE)
    install(a, xdg)
    install(b, xdg)
    blocked_run(data_root)
    not_started(data_root)
    for checkout, marked in ((a, False), (b, True)):
        made = in_clone(checkout, xdg, "-m", "rlkeep", "campaign", "--data-root", str(data_root))
        assert made.returncode == 0, made.stderr
        argv_default = in_clone(checkout, xdg, "-c", "from rlkeep.report import invocation_from_argv; "
                                "print(invocation_from_argv(['snakemake', 'j/DONE']))")
        printed = "\n".join([argv_default.stdout, (data_root / "rl-stuck" / "STATUS.json").read_text(),
                             *(page.read_text() for page in (data_root / "campaign").glob("*.html"))])
        names = set(PRINTED.findall(printed))
        assert names and len(PRINTED.findall(printed)) >= 4, printed[:2000]
        for name in names:
            assert ("only_in_clone_b" in rules_of(checkout, xdg, name, data_root)) == marked, (checkout, name)
        assert names == ({"iris"} if not marked else {name for name in names if name.startswith("iris-rlkeep")})
