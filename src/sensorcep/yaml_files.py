"""A user's YAML file (rules, routes), or the package's own default: read with one clear error when it cannot be."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml


def read_yaml(path: str | Path | None, *, what: str, package: str, default: str, error: type[Exception]):
    """(document, source) of the YAML file ``path`` (None or empty: the packaged ``default`` of ``package``); ``error``
    says in one sentence that the ``what`` file cannot be read or is not YAML."""
    if not path:
        return yaml.safe_load(resources.files(package).joinpath(default).read_text()), default
    try:
        text = Path(path).read_text()
    except OSError as failure:
        raise error(f"{what} file {path}: cannot be read ({failure.strerror})") from None
    try:
        return yaml.safe_load(text), str(path)
    except yaml.YAMLError as failure:
        raise error(f"{what} file {path}: not valid YAML ({failure})") from None
