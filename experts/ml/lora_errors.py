"""The errors of LoRA training and of loading the base model and its adapters: each message says what to fix."""

from __future__ import annotations


class LoraError(Exception):
    """A known problem with the inputs or the environment: the message says what to fix."""


class BaseModelNotFound(LoraError):
    """BASE_MODEL is neither a local folder nor in the local model cache (we never download)."""


class AdapterMismatch(LoraError):
    """An adapter trained on another base model than the one being served."""


class TrainingOutOfMemory(LoraError):
    """The device ran out of memory: smaller batch, shorter sequences, lower rank or QLoRA."""
