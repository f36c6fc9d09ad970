"""Typed readers for environment variables (12-factor settings)."""

from __future__ import annotations

import os


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


def envint(name: str, default: int) -> int:
    """Parse an integer, failing loudly on a malformed value."""
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from exc


def envfloat(name: str, default: float) -> float:
    """Parse a float, failing loudly on a malformed value."""
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be a number, got {value!r}") from exc


def envlist(name: str, default: list[str]) -> list[str]:
    """Parse a comma-separated list, dropping blanks."""
    value = os.environ.get(name, "")
    if value == "":
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]

