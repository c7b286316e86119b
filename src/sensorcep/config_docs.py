"""The configuration table of ``docs/configuration.md``, generated from :class:`sensorcep.settings.Settings`.

Each field of ``Settings`` is one row: its name, its default and its ``metadata["doc"]``. ``python -m sensorcep docs``
writes the table between the ``<!-- settings:begin -->`` and ``<!-- settings:end -->`` markers;
``tests/unit/test_docs.py`` fails when the file's table is not the one the settings give.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

from sensorcep.errors import SensorCepError
from sensorcep.settings import PROJECT_ROOT, Settings

BEGIN = "<!-- settings:begin -->"
END = "<!-- settings:end -->"
#: the file the table lives in
CONFIGURATION_DOC = PROJECT_ROOT / "docs" / "configuration.md"


class DocsMarkerError(SensorCepError, ValueError):
    """The document has no (or no ordered) pair of settings markers to write the table between."""


def _default(value: object) -> str:
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    text = str(value)
    root = str(PROJECT_ROOT)
    if text == root or text.startswith(root + "/"):  # a path in this checkout: the same table on every machine
        text = "./" + Path(text).relative_to(PROJECT_ROOT).as_posix()
    return f"`{text}`"


def _cell(text: str) -> str:
    """Plain text in a Markdown table cell: ``|`` would end the cell, ``<name>`` would read as an HTML tag."""
    return re.sub(r"([|<>])", r"\\\1", " ".join(text.split()))


def configuration_table() -> str:
    """Every setting as a Markdown table: setting, default, what it does (the field's ``metadata["doc"]``)."""
    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for f in fields(Settings):
        default = f.default if f.default is not MISSING else f.default_factory()
        rows.append(f"| `{f.name}` | {_default(default)} | {_cell(f.metadata.get('doc', ''))} |")
    return "\n".join(rows) + "\n"


def current_table(text: str) -> str:
    """The text between the markers (without the newlines that follow the begin marker and precede the end one)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise DocsMarkerError(f"no {BEGIN} ... {END} pair to hold the settings table")
    return text[start + len(BEGIN) : end].strip("\n") + "\n"


def write(path: str | Path = CONFIGURATION_DOC) -> bool:
    """Replace the text between the markers in ``path`` with :func:`configuration_table`; True when it changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    current_table(text)  # the markers are there, in order
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + configuration_table() + text[end:]
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True
