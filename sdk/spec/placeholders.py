"""Placeholders `sdk init` writes where a model's file cannot tell a value: a file holding one is refused at load.

A placeholder is a string `FILL-IN: <key>: <why and where to find the value>`. The loader looks for one before
anything else is validated, so the error names the key to fill in and the reason, rather than a type mismatch.
"""


from typing import Any

PREFIX = "FILL-IN: "


def placeholder(reason: str) -> str:
    return PREFIX + reason


def find_placeholder(data: Any, at: tuple = ()) -> tuple[tuple, str] | None:
    """(YAML path, reason) of the first placeholder in a loaded YAML document, or None."""
    if isinstance(data, str) and data.startswith(PREFIX.rstrip()):
        return at, data[len(PREFIX) :].strip() if data.startswith(PREFIX) else ""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found = find_placeholder(value, (*at, key))
        if found is not None:
            return found
    return None


__all__ = ["PREFIX", "find_placeholder", "placeholder"]
