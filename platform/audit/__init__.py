"""The audit log: who did what to which object, from where, and when (admin actions, sign-ins, service calls).

Other apps call ``audit.services.record(...)`` for actions worth an audit trail. Entries hold no
passwords and no question texts: only names, ids and a short summary of what changed.
"""
