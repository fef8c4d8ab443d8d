"""The documentation's structure: a short README, every docs page in mkdocs.yml's nav, every
option the plugin registers documented.

Plain file checks: mkdocs itself is not needed (``tox -e docs`` builds the site with
``mkdocs build --strict``, which checks links and anchors). PyYAML, installed with mkdocs but not
in the test environment, is used when present to cross-check the nav parser.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.core import options as opts

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MKDOCS_YML = ROOT / "mkdocs.yml"
README_MAX_LINES = 300

pytestmark = pytest.mark.skipif(
    not (DOCS.is_dir() and MKDOCS_YML.is_file() and README.is_file()),
    reason="the documentation sources (README.md, docs/, mkdocs.yml) are not in this checkout",
)


# ----------------------------------------------------------------------------- helpers


def _nav_block(text: str) -> str:
    """The lines of the top-level ``nav:`` key (up to the next top-level key)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^nav:\s*$", line))
    block = []
    for line in lines[start + 1:]:
        if line.strip() and not line[0].isspace() and not line.startswith("-"):
            break
        block.append(line)
    return "\n".join(block)


def nav_pages_regex(text: str) -> list[str]:
    """The ``.md`` files named in mkdocs.yml's nav (``- Title: page.md`` or ``- page.md``)."""
    return re.findall(r"^\s*-\s+(?:.*?:\s+)?['\"]?([\w./-]+\.md)['\"]?\s*$", _nav_block(text), re.M)


def _nav_pages_yaml(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node] if node.endswith(".md") else []
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages_yaml(value)]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages_yaml(item)]
    return []


def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md")))


class _Recorder:
    """Stands in for pytest's parser and option group: records what the plugin registers."""

    def __init__(self) -> None:
        self.flags: list[str] = []
        self.inis: list[str] = []

    def getgroup(self, *args: Any, **kwargs: Any) -> "_Recorder":
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.flags.extend(names)

    def addini(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.inis.append(name)


class _NoPlugins:
    """A plugin manager without pytest-benchmark: the plugin then serves the --benchmark-* flags."""

    def get_plugins(self) -> list[Any]:
        return []


def registered_options() -> tuple[list[str], list[str]]:
    """Every command-line flag and ini option the plugin registers, from its own hooks."""
    from pytest_gpuperf import plugin
    from pytest_gpuperf.plugin import benchmark_compat

    recorder = _Recorder()
    plugin.pytest_addoption(recorder)
    benchmark_compat.add_benchmark_options(recorder, _NoPlugins())
    return recorder.flags, recorder.inis


def mentioned(name: str, text: str) -> bool:
    """``name`` occurs as a whole option name (``--gpuperf-ab`` is not ``--gpuperf-ab-processes``)."""
    return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text) is not None


def options_table_names() -> set[str]:
    """The option names in the first column of writing-benchmarks.md's Options table."""
    text = (DOCS / "writing-benchmarks.md").read_text(encoding="utf-8")
    section = text.split("\n## Options\n", 1)[1]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("|"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`(\w+)`", first_cell))
    return names


# ----------------------------------------------------------------------------- tests


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; the reference belongs in docs/ (at most {README_MAX_LINES})"


def test_nav_lists_every_page_and_only_existing_pages() -> None:
    text = MKDOCS_YML.read_text(encoding="utf-8")
    nav = nav_pages_regex(text)
    assert nav, "mkdocs.yml has no nav entries"
    try:
        import yaml
    except ImportError:
        pass
    else:
        assert nav == _nav_pages_yaml(yaml.safe_load(text)["nav"]), "the nav regex disagrees with PyYAML"
    assert len(nav) == len(set(nav)), f"pages listed twice in the nav: {sorted(p for p in nav if nav.count(p) > 1)}"
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(pages) - set(nav)) == [], "docs pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - set(pages)) == [], "nav entries without a file under docs/"


def test_mkdocs_strict_validation_is_configured() -> None:
    """mkdocs build --strict fails only on warnings: these checks must be warnings."""
    text = MKDOCS_YML.read_text(encoding="utf-8")
    assert re.search(r"^docs_dir:\s*docs\s*$", text, re.M)
    for key in ("omitted_files", "absolute_links", "unrecognized_links", "anchors", "not_found"):
        assert re.search(rf"^\s+{key}:\s*warn\s*$", text, re.M), f"validation {key} is not 'warn'"


def test_readme_links_every_docs_page() -> None:
    readme = README.read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w./-]+\.md)(?:#[\w-]*)?\)", readme))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert sorted(linked - pages) == [], "README links to docs pages that do not exist"
    assert sorted(pages - linked) == [], "docs pages the README does not link to"


def test_every_command_line_flag_is_documented() -> None:
    flags, _ = registered_options()
    assert "--gpuperf" in flags and "--benchmark-json" in flags  # the recorder saw the registration
    text = docs_text()
    assert [f for f in flags if not mentioned(f, text)] == [], "flags not mentioned anywhere in docs/"


def test_every_ini_option_is_documented() -> None:
    """An ini option is named in docs/, or it is the ``gpuperf_<option>`` of a benchmark option,
    documented by that convention and the option's row in the Options table."""
    _, inis = registered_options()
    assert "gpuperf_baseline_dir" in inis
    text = docs_text()
    table = options_table_names()
    generic = "`gpuperf_<option>`" in text
    missing = []
    for name in inis:
        if mentioned(name, text):
            continue
        option = name.removeprefix("gpuperf_")
        if generic and option in opts.OPTION_NAMES and option in table:
            continue
        missing.append(name)
    assert missing == [], "ini options not documented in docs/"


def test_options_table_lists_every_benchmark_option() -> None:
    assert sorted(set(opts.OPTION_NAMES) - options_table_names()) == []
