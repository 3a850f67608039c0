"""Every relative link in README.md, CHANGELOG.md, bench/README.md, profiles/README.md and docs/*.md
resolves in a clone: its target is a file git tracks (an untracked or ignored file is not in a
clone), and a `#fragment` into a Markdown file names one of its headings. The README stays short,
with every docs page one link away."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOCUMENTS = ("README.md", "CHANGELOG.md", "bench/README.md", "profiles/README.md", "docs/*.md")


def tracked(repo: Path) -> set[str]:
    result = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True)
    return set(result.stdout.splitlines())


def anchors(markdown: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.*)$", markdown.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def relative_links(document: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", document.read_text(encoding="utf-8"), flags=re.S)  # code is not a link
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def broken_links(repo: Path, files: set[str]) -> list[str]:
    """Each relative link of the documents under `repo` whose target is not among `files` (the
    tracked paths) or whose fragment names no heading."""
    broken = []
    for pattern in DOCUMENTS:
        for document in sorted(repo.glob(pattern)):
            for target in relative_links(document):
                path, _, fragment = target.partition("#")
                resolved = (document.parent / path).resolve() if path else document
                where = f"{document.relative_to(repo)} -> {target}"
                try:
                    relative = resolved.relative_to(repo.resolve()).as_posix()
                except ValueError:
                    broken.append(f"{where}: outside the repository")
                    continue
                if relative not in files and not any(name.startswith(relative + "/") for name in files):
                    broken.append(f"{where}: not a tracked file")
                elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                    broken.append(f"{where}: no heading #{fragment}")
    return broken


def test_every_relative_link_of_the_documentation_resolves_in_a_clone() -> None:
    assert relative_links(REPO / "README.md"), "README.md has no relative link: the pattern is wrong"
    assert broken_links(REPO, tracked(REPO)) == []


def test_links_a_clone_cannot_follow_are_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "contract.md").write_text("# rlkeep contract\n\n## 9. Additions in v1.3\n")
    (tmp_path / "README.md").write_text(
        "[shared](../shared/CONTRACT.md), [gone](docs/gone.md), [kept](docs/contract.md),\n"
        "[section](docs/contract.md#9-additions-in-v13), [no such](docs/contract.md#10-nothing),\n"
        "![untracked](docs/campaign.png), [web](https://example.org/x.md)\n```\n[in code](nowhere.md)\n```\n")
    (tmp_path / "docs" / "campaign.png").write_bytes(b"")  # on disk, but not tracked: not in a clone
    assert broken_links(tmp_path, {"README.md", "docs/contract.md"}) == [
        "README.md -> ../shared/CONTRACT.md: outside the repository",
        "README.md -> docs/gone.md: not a tracked file",
        "README.md -> docs/contract.md#10-nothing: no heading #10-nothing",
        "README.md -> docs/campaign.png: not a tracked file",
    ]


def test_the_readme_reads_in_ten_minutes_and_every_docs_page_is_linked_from_it() -> None:
    """The README is the newcomer's page (at most 300 lines); what it leaves out is one link away."""
    readme = REPO / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 300
    linked = {target.partition("#")[0] for target in relative_links(readme)}
    pages = {path.relative_to(REPO).as_posix() for path in (REPO / "docs").glob("*.md")}
    assert pages - linked == set()
    assert {"CHANGELOG.md", "bench/README.md"} <= linked


CONTRACT_SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)
CONTRACT_CITATION = re.compile(r"docs/contract\.md §(\d+)")


def test_the_code_cites_one_contract_and_sections_it_has() -> None:
    sections = set(CONTRACT_SECTION.findall((REPO / "docs" / "contract.md").read_text()))
    reference = (REPO / "docs" / "reference.md").read_text()
    assert "not the contract" in reference.splitlines()[0]
    assert "## Contract" not in reference and "contract §" not in reference
    cited, wrong = 0, []
    for path in sorted(tracked(REPO)):
        if not path.startswith(("scripts/", "rules/", "Snakefile")):
            continue
        text = (REPO / path).read_text(errors="replace")
        if re.search(r"reference\.md,?\s+contract", text):
            wrong.append(f"{path}: cites docs/reference.md as the contract")
        for number in CONTRACT_CITATION.findall(text):
            cited += 1
            if number not in sections:
                wrong.append(f"{path}: docs/contract.md §{number} has no such section")
    assert cited > 10 and not wrong, wrong
