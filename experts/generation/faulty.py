"""Fault injection around any generator (``sbcommon.faults``): for soak runs and fault tests, never on by default.

``get_generator`` wraps its backend in ``FaultInjectingGenerator`` only while ``SWITCHBOARD_FAULTS_FILE``
is set; a ``generator`` fault then makes the chosen experts' generations fail (``GenerationUnavailable``)
or slow, exactly where a real backend would, so the failover and circuit breakers are exercised for real.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

from sbcommon import faults

from .base import GenerationRequest, GenerationUnavailable


class FaultInjectingGenerator:
    """Delegates to ``inner`` after the ``generator`` fault hook for the request's expert."""

    def __init__(self, inner: Any):
        self.inner = inner

    def generate(self, request: GenerationRequest) -> Any:
        faults.inject("generator", GenerationUnavailable, expert=request.expert)
        return self.inner.generate(request)

    def stream(self, request: GenerationRequest) -> Iterator[Any]:
        faults.inject("generator", GenerationUnavailable, expert=request.expert)
        return self.inner.stream(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def with_fault_hooks(factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory`` (``get_generator``) returning its backend wrapped while fault injection is configured."""

    @functools.wraps(factory)
    def get(*args: Any, **kwargs: Any) -> Any:
        backend = factory(*args, **kwargs)
        return FaultInjectingGenerator(backend) if os.environ.get(faults.ENV_VAR) else backend

    get.cache_clear = getattr(factory, "cache_clear", lambda: None)  # type: ignore[attr-defined]
    return get
