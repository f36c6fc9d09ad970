"""Serving: POST /v1/chat/completions end to end (route, retrieve, generate, record)."""
