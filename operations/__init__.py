"""Operations: backing up and restoring the platform's data (``manage.py backup``, ``manage.py restore``, the scheduled backup)."""
