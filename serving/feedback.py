"""Feedback on served answers: a thumbs up or down (and a comment) on one response, by its id.

One row per response: posting again updates the verdict. Events are written in batches, so the
buffer is flushed before the lookup: a response answered a moment ago is found. A response
answered for another API key is not found by this one.
"""

from __future__ import annotations

import logging

from routing.models import Feedback, RoutingEvent

from . import events

logger = logging.getLogger(__name__)


class ResponseNotFound(LookupError):
    """No response with that id was answered (for this API key)."""


class UnknownExpert(ValueError):
    """A reported "right expert" that is not an active expert."""


def record_feedback(response_id: str, rating: int, comment: str, api_key_id: int | None, suggested_expert: str = "") -> tuple[Feedback, bool]:
    """Store the verdict on response ``response_id`` with the expert that answered it.

    ``suggested_expert`` (a "wrong expert" report) names who should have answered: it makes the
    rating a thumbs-down and is proposed as the label in the review queue.

    Returns:
        The Feedback row and whether it was created (False: an earlier verdict was updated).

    Raises:
        ResponseNotFound: the id was never answered, or was answered for another API key.
        UnknownExpert: ``suggested_expert`` is not an active expert.
    """
    if suggested_expert:
        from experts.selectors import active_expert_slugs

        if suggested_expert not in active_expert_slugs():
            raise UnknownExpert(f"no active expert {suggested_expert!r}")
        rating = -1
    try:
        events.flush()
    except Exception:  # the buffer stays; the lookup below still sees every event already written
        logger.warning("feedback: flushing routing events failed", exc_info=True)
    event = RoutingEvent.objects.filter(request_id=response_id).order_by("-created_at").first()
    if event is None or (event.api_key_id is not None and event.api_key_id != api_key_id):
        raise ResponseNotFound(response_id)
    return Feedback.objects.update_or_create(
        request_id=event.request_id,
        defaults={"rating": rating, "comment": comment, "expert": event.expert, "api_key_id": api_key_id, "suggested_expert": suggested_expert},
    )
