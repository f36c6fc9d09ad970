"""REST API for background jobs: a job's status, progress and outcome."""
