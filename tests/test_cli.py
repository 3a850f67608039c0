"""The `rlkeep` command and the profile installation, through real subprocesses."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlkeep import cli
from rlkeep.errors import RlkeepError
from rlkeep.profiles import install_profiles
from tests.conftest import REPO, write_record

CONTRACT_TOOLS = ["redact", "check-publication", "metrics", "consolidate", "verify-model", "traces-dataset"]


def rlkeep(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rlkeep", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def test_help_lists_every_standalone_tool_of_the_contract() -> None:
    result = rlkeep("--help")
    assert result.returncode == 0
    for tool in CONTRACT_TOOLS:
        assert f"  {tool} " in result.stdout
        assert rlkeep(tool, "--help").returncode == 0


def test_unknown_command_and_operator_errors() -> None:
    unknown = rlkeep("frobnicate")
    assert unknown.returncode == 2 and "unknown command 'frobnicate'" in unknown.stderr
    missing = rlkeep("validate-record", "/nonexistent/records/x.yaml")
    assert missing.returncode == 1
    assert missing.stderr.startswith("rlkeep: /nonexistent/records/x.yaml: no such job record")
    assert "Traceback" not in missing.stderr


@pytest.mark.parametrize("command", ["demo", "example-run"])
def test_dev_commands_say_how_to_install_the_dev_package_when_it_is_absent(
        command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [name for name in sys.modules if name == "rlkeep_dev" or name.startswith("rlkeep_dev.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rlkeep_dev", None)  # what an installed product wheel looks like
    assert cli.main([command, "--help"]) == 2
    message = capsys.readouterr().err
    assert "development package rlkeep_dev" in message and "make setup" in message
    assert "Traceback" not in message


def test_dev_commands_run_from_the_source_tree() -> None:
    for command in ("demo", "example-run"):
        result = rlkeep(command, "--help")
        assert result.returncode == 0, result.stderr
        assert f"rlkeep {command}" in result.stdout


def test_profiles_install_with_the_snakefile_and_resolve_from_any_directory(tmp_path: Path, data_root: Path) -> None:
    written = install_profiles(["iris", "local"], tmp_path / "xdg" / "snakemake")
    iris = yaml.safe_load(written[0].read_text())
    assert iris["snakefile"] == str(REPO / "Snakefile")
    assert iris["keep-going"] is True and iris["rerun-incomplete"] is True
    assert "code" not in iris["rerun-triggers"] and iris["resources"]["net_io"] >= 1
    write_record(data_root, {"job": "j1", "user": "demo", "scheduler": "none", "chain": ["/demo/j1"],
                             "store": "file:///nonexistent/store", "checkpoint": {"interval": 20}})
    result = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "iris", "j1/DONE", "-n"], cwd=data_root,
                            capture_output=True, text=True, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert result.returncode == 0, result.stderr
    assert "rule capture_chain:" in result.stdout and "This was a dry-run" in result.stdout


def test_a_profile_can_never_grant_authority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlkeep.profiles as profiles

    fake_repo = tmp_path / "repo"
    (fake_repo / "profiles" / "iris").mkdir(parents=True)
    (fake_repo / "Snakefile").write_text("")
    (fake_repo / "profiles" / "iris" / "profile.yaml").write_text("cores: 1\nconfig:\n  reclaim_authorized: j1\n")
    monkeypatch.setattr(profiles, "project_root", lambda: fake_repo)
    with pytest.raises(RlkeepError, match="must not set `config:`"):
        install_profiles(["iris"], tmp_path / "out")
