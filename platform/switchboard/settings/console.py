"""The console: the review queue, A/B experiment defaults, load and drift alarms."""

from __future__ import annotations

# --- review queue -----------------------------------------------------------------------------
# Routed questions whose top expert score or top-2 margin is below these (plus abstentions and thumbs-down answers),
# from the last REVIEW_WINDOW_DAYS days.
REVIEW_MIN_SCORE = 0.5
REVIEW_MIN_MARGIN = 0.1
REVIEW_WINDOW_DAYS = 30

# --- experiments and alarms -------------------------------------------------------------------
# Defaults of a new A/B experiment: relative minimum effect worth detecting, significance, power.
EXPERIMENT_MIN_EFFECT = 0.05
EXPERIMENT_ALPHA = 0.05
EXPERIMENT_POWER = 0.8
# Load alarm: an expert above ROUTER_ALARM_SHARE of the traffic over this many days, once the window holds this many
# answered requests (one request is 100% of one); the overview, the heatmap and the scheduled check agree.
LOAD_ALARM_WINDOW_DAYS = 7
LOAD_ALARM_MIN_REQUESTS = 50
# Drift check: at most this many recent questions (re-encoded) and training questions compared.
DRIFT_SAMPLE = 500
