"""Reading Hudi's ``key=value`` settings (``--conf``): one helper, so every setting is looked up
and reported the same way."""

from __future__ import annotations

from collections.abc import Mapping


def conf_value(conf: Mapping[str, str], *keys: str, default: str) -> str:
    """The value of the first of ``keys`` present in ``conf`` (Hudi renamed some keys; both
    spellings are accepted, the newer first), else ``default``."""
    for key in keys:
        if key in conf:
            return conf[key]
    return default
