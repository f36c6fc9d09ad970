"""Labeling: query logs, their embeddings, clustering runs and the review of expert proposals."""
