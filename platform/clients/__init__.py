"""API clients: keys that OpenAI-compatible front ends send as ``Authorization: Bearer sk-...``."""
