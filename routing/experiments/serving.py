"""The serving path's view of experiments: which arm a request falls in.

``routing.services.answer`` calls ``assign`` once per request; it must stay cheap (no more than one
small indexed query, cached) because it runs on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ArmAssignment:
    """The experiment arm a request is served by and what that arm changes.

    ``router_version`` (a RouterVersion.version) replaces the active router when set;
    ``expert_versions`` maps an expert slug to the ExpertVersion.version that serves it in this arm.
    """

    experiment_id: int
    arm: str
    router_version: int | None = None
    expert_versions: dict[str, int] = field(default_factory=dict)


def assign(subject: str) -> ArmAssignment | None:
    """The arm of the running experiment that ``subject`` (a conversation or user hash) falls in, or None."""
    # Experiments are added by routing.experiments (issue 9); until one runs, nobody is assigned.
    return None
