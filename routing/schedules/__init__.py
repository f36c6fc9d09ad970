"""The platform's schedules: what beat fires, the work each schedule does, and the schedules page."""
