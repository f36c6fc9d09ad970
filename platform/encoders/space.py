"""How the encoder runs (``EMBEDDING_BACKEND``) and the embedding space its vectors belong to."""

from __future__ import annotations

from django.conf import settings

BACKENDS = ("auto", "torch", "torch-bf16", "onnx", "onnx-int8")
# Backends whose vectors agree with float32 torch's (minimum cosine >= 0.99 on a sample): one embedding
# space, so switching between them re-embeds nothing. Any other backend is a space of its own.
SAME_SPACE = frozenset({"torch", "torch-bf16", "onnx"})


def bf16_native() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX512-BF16): elsewhere bfloat16 is slower than float32."""
    try:
        with open("/proc/cpuinfo", errors="ignore") as handle:
            flags = handle.read()
    except OSError:
        return False
    return any(flag in flags for flag in (" amx_bf16", " avx512_bf16"))


def resolve_backend(backend: str | None = None) -> str:
    """``EMBEDDING_BACKEND``, with "auto" resolved: bfloat16 torch where the CPU multiplies it natively, else ONNX.

    docs/CONFIGURATION.md compares the backends (speed, and whether their vectors stay in torch's space).
    """
    backend = backend or settings.EMBEDDING_BACKEND
    if backend not in BACKENDS:
        raise ValueError(f"EMBEDDING_BACKEND must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "auto":
        return "torch-bf16" if bf16_native() else "onnx"
    return backend


def embedding_space(name: str | None = None, backend: str | None = None) -> str:
    """The name stored vectors are filed under: ``EMBEDDING_MODEL``, plus the backend when its vectors differ.

    Embeddings, knowledge-base collections and router versions record it; a change of space marks
    them stale, as a change of model does, and they are made again with the new encoder.
    """
    name = name or settings.EMBEDDING_MODEL
    backend = resolve_backend(backend)
    return name if backend in SAME_SPACE else f"{name}+{backend}"


def model_name(space: str) -> str:
    """The ``EMBEDDING_MODEL`` part of an ``embedding_space`` name."""
    for backend in BACKENDS:
        if backend not in SAME_SPACE and space.endswith(f"+{backend}"):
            return space[: -len(backend) - 1]
    return space
