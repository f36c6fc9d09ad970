"""Feedback on served answers: a thumbs up or down (and a comment) on one response, by its id.

One row per response: posting again updates the verdict. Events are written in batches, so the
buffer is flushed before the lookup: a response answered a moment ago is found. A response belongs
to whoever asked (an API key, else a signed-in user, else nobody): through the API only they may
judge it, and a response answered for anyone else is "not found". The console's trace page lets a
team that may see the response judge it (it checks that itself and passes ``check_owner=False``).
"""

from __future__ import annotations

import logging

from routing.models import Feedback, RoutingEvent

from . import events

logger = logging.getLogger(__name__)


class ResponseNotFound(LookupError):
    """No response with that id was answered (for this caller)."""


class UnknownExpert(ValueError):
    """A reported "right expert" that is not an active expert."""


def record_feedback(response_id: str, rating: int, comment: str, api_key_id: int | None, suggested_expert: str = "", *,
                    user_id: int | None = None, check_owner: bool = True, allowed: set[str] | None = None) -> tuple[Feedback, bool]:
    """Store the verdict on response ``response_id`` with the expert that answered it.

    ``suggested_expert`` (a "wrong expert" report) names who should have answered: it makes the
    rating a thumbs-down and is proposed as the label in the review queue; it must be one of
    ``allowed`` (the experts the caller may ask or see) when that is given.

    Returns:
        The Feedback row and whether it was created (False: an earlier verdict was updated).

    Raises:
        ResponseNotFound: the id was never answered, or (``check_owner``) was answered for someone else
            than (``api_key_id``, ``user_id``).
        UnknownExpert: ``suggested_expert`` is not an active expert the caller may name.
    """
    if suggested_expert:
        from experts.selectors import active_expert_slugs

        if suggested_expert not in active_expert_slugs() or (allowed is not None and suggested_expert not in allowed):
            raise UnknownExpert(f"no active expert {suggested_expert!r}")
        rating = -1
    try:
        events.flush()
    except Exception:  # the buffer stays; the lookup below still sees every event already written
        logger.warning("feedback: flushing routing events failed", exc_info=True)
    event = RoutingEvent.objects.filter(request_id=response_id).order_by("-created_at").first()
    if event is None or (check_owner and (event.api_key_id != api_key_id or event.user_id != user_id)):
        raise ResponseNotFound(response_id)
    return Feedback.objects.update_or_create(
        request_id=event.request_id,
        defaults={"rating": rating, "comment": comment, "expert": event.expert, "api_key_id": api_key_id, "user_id": user_id,
                  "suggested_expert": suggested_expert},
    )
