"""Django settings: what an operator decides is read from the environment, with a working single-machine default.

`.env.example` lists exactly those variables (tests/platform/test_env_example.py keeps it so); the
other values here are fixed settings, and the figures an evaluation tuned are constants of the ``ml/``
modules that use them (docs/CONFIGURATION.md lists all three). Code reads ``settings.X``, never with a
fallback of its own. Nothing here needs a server: SQLite, kombu's filesystem broker and Qdrant's
embedded mode all live under ``VAR_DIR``.

One module per topic, evaluated in this order (a module reads what it needs of an earlier one by
importing it by name):

    core        paths (VAR_DIR), secret key, hosts, INSTALLED_APPS, MIDDLEWARE, templates, sign-in, static files
    database    the database, the cache, retries while the database is briefly unavailable
    api         REST framework, OpenAPI schema, request body and upload limits
    queues      Celery (broker, queues, beat schedule) and the job runner's leases and sweeps
    ml          embeddings, the router and its arbiter, retrieval
    generation  answer generation: the backend, vLLM, circuit breakers, LoRA adapters and their training
    serving     the chat API: API keys, rate limits, routing events, conversations, encoder batching, metrics
    console     the console's review queue, A/B experiment defaults, load and drift alarms
    security    production hardening (SWITCHBOARD_ENV), cookies, HTTPS, security headers, the audit log
    logs        logging (personal data masked in every line)
"""

# The order is the evaluation order of the single module this package replaced (security.py refuses a bad
# production setup only after the modules before it have run, as it always did).
# isort: off
from .core import *  # noqa: F403
from .database import *  # noqa: F403
from .api import *  # noqa: F403
from .queues import *  # noqa: F403
from .ml import *  # noqa: F403
from .generation import *  # noqa: F403
from .serving import *  # noqa: F403
from .console import *  # noqa: F403
from .security import *  # noqa: F403
from .security import _PRODUCTION  # noqa: F401  (private, but Django has always listed it among the settings)
from .logs import *  # noqa: F403
# isort: on
