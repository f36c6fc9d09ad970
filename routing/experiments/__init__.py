"""A/B experiments between expert or router versions, scheduled jobs, drift and load alarms."""
