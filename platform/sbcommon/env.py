"""Typed readers for environment variables (12-factor settings)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def envstr(name: str, default: str) -> str:
    """Return the variable's value, or ``default`` when unset or empty."""
    value = os.environ.get(name, "")
    return value if value != "" else default


def envbool(name: str, default: bool) -> bool:
    """Parse yes/no style booleans ("1", "true", "yes", "on" are true)."""
    value = os.environ.get(name, "")
    if value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _parsed(name: str, default: Any, parse: Callable[[str], Any], kind: str) -> Any:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return parse(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be {kind}, got {value!r}") from exc


def envint(name: str, default: int) -> int:
    """Parse an integer, failing loudly on a malformed value."""
    return _parsed(name, default, int, "an integer")


def envfloat(name: str, default: float) -> float:
    """Parse a float, failing loudly on a malformed value."""
    return _parsed(name, default, float, "a number")


def envlist(name: str, default: list[str]) -> list[str]:
    """Parse a comma-separated list, dropping blanks."""
    value = os.environ.get(name, "")
    if value == "":
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]

