"""The audit log: who did what to which object, from where, and when (admin actions, sign-ins, service calls).

Other apps call ``audit.record(...)`` (re-exported here from ``audit.services``) for actions worth
an audit trail. Entries hold no passwords and no question texts: only names, ids and a short
summary of what changed.
"""

from __future__ import annotations

from typing import Any


def record(action: str, **kwargs: Any) -> Any:
    """Write one audit entry; see ``audit.services.record`` (imported lazily so the app loads first)."""
    from .services import record as _record

    return _record(action, **kwargs)
