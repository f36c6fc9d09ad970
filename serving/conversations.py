"""Conversations: the expert a conversation sticks to and the context its earlier turns give the router.

A conversation keeps no text: each answered turn appends the question's embedding (float16, the last
``CONTEXT_TURNS``) and the expert that answered, which keeps the next turn unless another beats it by
``routing.ml.conversation.STICKY_MARGIN``. Rows expire ``CONVERSATION_TTL_HOURS`` after their last turn
(``purge_expired``). With ``EVENTS_SYNC`` each turn is saved in the request; otherwise it is written
behind by ``serving.events``' batched writer and this process answers ``resolve`` from the pending row
meanwhile. A turn the writer cannot take, or an expired conversation starting over, is saved in the request.
"""

from __future__ import annotations

import base64
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.utils import timezone

from routing.models import Conversation
from routing.retention import purge_expired_conversations as purge_expired  # noqa: F401  (its public name here)

from . import events

CONTEXT_TURNS = 5
ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


class ConversationNotAllowed(Exception):
    """The conversation was started by someone else (another API key, another user, or a signed-in user for an anonymous caller)."""


def encode_turn(vector: np.ndarray | list[float]) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float16).tobytes()).decode("ascii")


def decode_turns(turns: list[str]) -> np.ndarray | None:
    """The stored turn embeddings as a (turns, dim) float32 array, or None when there are none."""
    rows = [np.frombuffer(base64.b64decode(t), dtype=np.float16).astype(np.float32) for t in turns if t]
    return np.stack(rows) if rows else None


@dataclass
class ConversationState:
    """What one request knows about its conversation (``row`` is None until the first turn is saved)."""

    conversation_id: str
    created: bool
    expert: str = ""
    turns: list[str] | None = None
    row: Conversation | None = None


def resolve(conversation_id: str | None, api_key_id: int | None, user_id: int | None = None) -> ConversationState:
    """The conversation ``conversation_id`` names (or a new one: a client may choose its own id).

    A conversation belongs to whoever started it: the API key (``api_key_id``), else the signed-in
    user (``user_id``), else nobody (anonymous). An expired conversation starts over; one that belongs
    to another principal is refused, so its stored turns and expert never reach anyone else.
    """
    if not conversation_id:
        return ConversationState(conversation_id=f"conv_{secrets.token_hex(12)}", created=True, turns=[])
    row = _pending.get(conversation_id) or Conversation.objects.filter(conversation_id=conversation_id).first()
    if row is None:
        return ConversationState(conversation_id=conversation_id, created=True, turns=[])
    if row.expires_at <= timezone.now():  # forgotten: whoever uses the id now starts it over
        return ConversationState(conversation_id=conversation_id, created=True, turns=[], row=row)
    if row.api_key_id != api_key_id or row.user_id != user_id:
        raise ConversationNotAllowed(f"conversation {conversation_id!r} was started by someone else; start a new one")
    return ConversationState(conversation_id=conversation_id, created=False, expert=row.expert, turns=list(row.turns or []), row=row)


# Rows written behind (see the module docstring), by conversation id, until the writer has saved them.
_pending: dict[str, Conversation] = {}
_pending_lock = threading.Lock()
UPSERT_FIELDS = ["expert", "turns", "n_turns", "expires_at", "updated_at", "api_key_id", "user_id", "created_at"]


def write_rows(rows: list[Conversation]) -> None:
    """Insert or update deferred conversation rows (the last one of each id wins), then stop answering from them."""
    latest: dict[str, Conversation] = {}
    for row in rows:
        latest[row.conversation_id] = row
    Conversation.objects.bulk_create(list(latest.values()), update_conflicts=True, unique_fields=["conversation_id"],
                                     update_fields=UPSERT_FIELDS)


def forget_written(rows: list[Conversation]) -> None:
    """Drop written rows from the pending map (unless a newer turn replaced them meanwhile)."""
    with _pending_lock:
        for row in rows:
            if _pending.get(row.conversation_id) is row:
                del _pending[row.conversation_id]


def _save_behind(state: ConversationState, values: dict, api_key_id: int | None, user_id: int | None) -> None:
    previous = state.row if state.row is not None and not state.created else None
    row = Conversation(
        conversation_id=state.conversation_id, n_turns=previous.n_turns + 1 if previous is not None else 1,
        api_key_id=previous.api_key_id if previous is not None else api_key_id,
        user_id=previous.user_id if previous is not None else user_id,
        created_at=previous.created_at if previous is not None and previous.created_at else timezone.now(), **values,
    )
    with _pending_lock:
        _pending[state.conversation_id] = row
    if not events.defer(row, write_rows, forget_written):  # the writer's buffer is full: write it in the request after all
        try:
            write_rows([row])
        finally:
            forget_written([row])


def save_turn(state: ConversationState, vector: list[float] | np.ndarray, expert: str, api_key_id: int | None,
              user_id: int | None = None) -> None:
    """Append this turn's embedding, remember the answering expert and push the expiry back."""
    turns = [*(state.turns or []), encode_turn(vector)][-CONTEXT_TURNS:]
    values = {"expert": expert, "turns": turns, "updated_at": timezone.now(),
              "expires_at": timezone.now() + timedelta(hours=float(settings.CONVERSATION_TTL_HOURS))}
    expired_row = state.created and state.row is not None and state.row.pk is not None
    if not settings.EVENTS_SYNC and not expired_row:
        _save_behind(state, values, api_key_id, user_id)
        return
    if state.row is None or state.row.pk is None:  # (a pending row only when EVENTS_SYNC was switched on meanwhile)
        row, created = Conversation.objects.get_or_create(
            conversation_id=state.conversation_id, defaults={**values, "n_turns": 1, "api_key_id": api_key_id, "user_id": user_id}
        )
        if not created and row.api_key_id == api_key_id and row.user_id == user_id:  # the same caller's other request saved it first
            Conversation.objects.filter(pk=row.pk).update(n_turns=row.n_turns + 1, **values)
        return
    if state.created:  # an expired conversation started over
        Conversation.objects.filter(pk=state.row.pk).update(n_turns=1, api_key_id=api_key_id, user_id=user_id, created_at=timezone.now(), **values)
        return
    Conversation.objects.filter(pk=state.row.pk).update(n_turns=state.row.n_turns + 1, **values)


def sticky_order(ranked: list[dict], expert: str, margin: float) -> tuple[list[dict], bool]:
    """Keep ``expert`` first unless the router's best beats it by more than ``margin``.

    Args:
        ranked: the router's ranking [{slug, score}], best first.
        expert: the conversation's expert ("" for a new conversation).
        margin: how much higher another expert must score to take the conversation over.

    Returns:
        The ranking to serve in, and whether the conversation's expert was kept over a better-scored one.
    """
    if not expert or not ranked or ranked[0]["slug"] == expert:
        return ranked, False
    mine = next((e for e in ranked if e["slug"] == expert), None)
    if mine is None or float(ranked[0]["score"]) - float(mine["score"]) > margin:
        return ranked, False
    return [mine, *[e for e in ranked if e["slug"] != expert]], True
