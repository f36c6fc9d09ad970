"""Shared helpers for every Switchboard app: environment parsing, API errors, uploads, hashing, console mixins.

This package holds no business models; apps build on it, never the other way round.
"""
