"""Logging: plain lines on the console, personal data masked.

Not named ``logging``: this package's modules import the standard library's by that name.
"""

from __future__ import annotations

from sbcommon.env import envstr

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # No personal data in logs: question texts of the current request, e-mail addresses, phone numbers
    # and API keys are masked in every log line (sbcommon.logfilters).
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["personal_data"]}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"httpx": {"level": "WARNING"}, "urllib3": {"level": "WARNING"}},
    "filters": {"personal_data": {"()": "sbcommon.logfilters.PersonalDataFilter"}},
}
