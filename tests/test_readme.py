"""The README is short and true: its config loads and means what its prose says, and no
link in it or in ``docs/`` points at a file or heading that is not there (#34)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runtime.config import parse_config
from runtime.kernel.policy import Policy
from runtime.ports import Tool

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OBJECT = {"type": "object"}


def test_the_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_readme_config_loads_and_asks_before_a_delete(tmp_path):
    text = (ROOT / "README.md").read_text().split("<!-- readme-config", 1)[1]
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    assert len(block.splitlines()) <= 25
    config = parse_config(block, "README", tmp_path)
    assistant = config.agents[0]
    assert config.mcp_servers[0].env == ["GITHUB_TOKEN"]
    policy = Policy(config)
    assert policy.verdict(assistant, Tool("mcp_github_delete_file", "", OBJECT, source="mcp")).decision == "ask"
    assert policy.verdict(assistant, Tool("file_read", "", OBJECT)).decision == "allow"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.+)", line)):
            found.add(_anchor(m.group(1)))
    return found


def _links(page: Path):
    fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield from re.findall(r"\]\(([^)\s]+)\)", line)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_link_lands(page):
    broken = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:: outside the repository
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(link)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(link)
    assert not broken, f"{page.name}: {broken}"
