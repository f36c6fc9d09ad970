"""The evaluation and benchmark harness: `manage.py evaluate ...` and `manage.py bench ...`."""
