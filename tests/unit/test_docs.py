"""The documentation stays true: the configuration table is the one ``Settings`` gives, the README fits on a screen,
and every link and test path the README and ``docs/`` name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sensorcep import config_docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
README_MAX_LINES = 250
#: a Markdown link or image: [text](target) or [text](target "title")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: a test file named in prose or code: tests/<tier>/test_x.py, tests/support/x.py, tests/conftest.py
TEST_PATH = re.compile(r"(?<![\w/.-])(?:\.\./)*(tests/[\w/.-]*?\.py)\b")


def documents() -> list[Path]:
    return [README, *DOCS]


def without_code_blocks(text: str) -> str:
    """The text outside fenced code blocks (a shell line in a code block is not a link)."""
    return re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)


def test_the_configuration_table_is_the_one_the_settings_give():
    current = config_docs.current_table(config_docs.CONFIGURATION_DOC.read_text(encoding="utf-8"))
    assert current == config_docs.configuration_table(), (
        "docs/configuration.md's settings table is stale: run `python -m sensorcep docs` (it rewrites the table "
        "between the settings markers from the fields of Settings and their metadata['doc'])"
    )


def test_every_setting_has_a_doc():
    table = config_docs.configuration_table()
    empty = [line.split("`")[1] for line in table.splitlines()[2:] if line.rstrip().endswith("|  |")]
    assert not empty, f"settings without metadata={{'doc': ...}} in settings.py: {', '.join(empty)}"


def test_writing_the_table_replaces_only_what_is_between_the_markers(tmp_path):
    doc = tmp_path / "configuration.md"
    doc.write_text(f"# before\n\n{config_docs.BEGIN}\nold table\n{config_docs.END}\n\nafter\n", encoding="utf-8")
    assert config_docs.write(doc)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# before\n\n") and text.endswith(f"{config_docs.END}\n\nafter\n")
    assert config_docs.current_table(text) == config_docs.configuration_table()
    assert not config_docs.write(doc), "a second write changes nothing"


def test_a_document_without_the_markers_is_one_clear_error(tmp_path):
    doc = tmp_path / "configuration.md"
    doc.write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(config_docs.DocsMarkerError, match="settings:begin"):
        config_docs.write(doc)


def test_the_readme_fits_on_a_screen():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference to docs/, history to "
        "docs/decisions/"
    )


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(document):
    broken = []
    for target in LINK.findall(without_code_blocks(document.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):  # a URL, mailto:, or an anchor here
            continue
        path = target.split("#", 1)[0]
        if not (document.parent / path).exists():
            broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)}: links to files that do not exist: {', '.join(broken)}"


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_path_mentioned_exists(document):
    named = set(TEST_PATH.findall(document.read_text(encoding="utf-8")))
    missing = sorted(path for path in named if not (ROOT / path).is_file())
    assert not missing, (
        f"{document.relative_to(ROOT)} names test files that do not exist (the tiers: tests/unit, spark, kafka, e2e, "
        f"fault; helpers in tests/support): {', '.join(missing)}"
    )


def test_the_docs_are_found():
    names = {p.relative_to(ROOT / "docs").as_posix() for p in DOCS}
    assert {"configuration.md", "reliability.md", "decisions/README.md"} <= names
