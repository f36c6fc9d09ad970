"""Shared helpers for every Switchboard app: environment parsing, encoders, hashing.

This package holds no business models; apps build on it, never the other way round.
"""
