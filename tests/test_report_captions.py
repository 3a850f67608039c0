"""Every caption of `snakemake --report` (report/*.rst) is clean reStructuredText on its own: the docutils
configuration the Snakefile sets for --report hides only warnings below errors (report/docutils.conf),
so a caption's own warning must fail here."""
from __future__ import annotations

from pathlib import Path

import pytest
from docutils.core import publish_parts
from docutils.utils import SystemMessage

from tests.conftest import REPO

CAPTIONS = sorted((REPO / "report").glob("*.rst"))


def test_there_are_captions() -> None:
    assert len(CAPTIONS) >= 5


@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda path: path.name)
def test_a_caption_renders_without_a_warning(caption: Path) -> None:
    publish_parts(caption.read_text(), writer="html",
                  settings_overrides={"report_level": 1, "halt_level": 2, "_disable_config": True})


def test_the_check_can_fail() -> None:
    with pytest.raises(SystemMessage, match="Duplicate explicit target name"):
        publish_parts("a\n\n.. _x: a\n.. _X: b\n", writer="html",
                      settings_overrides={"report_level": 1, "halt_level": 2, "_disable_config": True})
