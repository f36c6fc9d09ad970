"""Background jobs: one ``Job`` row per piece of long work, updated by thin Celery tasks."""
