"""Django settings, read from the environment with working local defaults.

Embedded default: SQLite at ``var/db.sqlite3``, Redis at ``redis://127.0.0.1:6379/0``, a local Ray
head whose job server answers at ``http://127.0.0.1:8265``. At scale: ``DATABASE_URL`` (PostgreSQL),
``REDIS_URL`` (a managed Redis), ``RAY_ADDRESS`` (an existing cluster), ``ALLOWED_HOSTS``,
``SECRET_KEY``. Without ``SECRET_KEY`` a random key is generated once into ``var/secret_key``,
and without ``RFT_REDIS_PREFIX`` a random deployment prefix once into ``var/redis_prefix``: every
Redis key, stream and channel of this deployment lies under ``rft:<prefix>:``.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from rft_core.monitor.events import ENV_REDIS_PREFIX, check_redis_prefix

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("RFT_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _secret_key() -> str:
    """SECRET_KEY from the environment, else from ``var/secret_key`` (created on first use)."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


def _shared_run_roots(text: str) -> dict[str, list[str]]:
    """RFT_SHARED_RUN_ROOTS: {"group name": ["/abs/root", ...]}; anything else stops start-up
    with one line saying what is wrong."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ImproperlyConfigured(f"RFT_SHARED_RUN_ROOTS is not JSON: {err}") from err
    shape = 'a JSON object {"group name": ["/abs/root", ...]}'
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"RFT_SHARED_RUN_ROOTS must be {shape}, got {text!r}")
    for group, roots in value.items():
        if not isinstance(roots, list) or not roots:
            raise ImproperlyConfigured(
                f"RFT_SHARED_RUN_ROOTS[{group!r}] must be a non-empty list of absolute paths"
            )
        for root in roots:
            if not isinstance(root, str) or not os.path.isabs(root):
                raise ImproperlyConfigured(
                    f"RFT_SHARED_RUN_ROOTS[{group!r}]: {root!r} is not an absolute path"
                )
    return value


def _redis_prefix() -> str:
    """The deployment prefix: ``RFT_REDIS_PREFIX``, else ``var/redis_prefix`` (a random short id
    written once, so two checkouts on one Redis differ). An invalid one stops every process that
    loads these settings (web, worker, beat, ingestor, manage.py) with one line."""
    value, source = os.environ.get(ENV_REDIS_PREFIX), ENV_REDIS_PREFIX
    if value is None:
        path = VAR_DIR / "redis_prefix"
        if not path.exists():
            VAR_DIR.mkdir(parents=True, exist_ok=True)
            draft = path.with_name(f".redis_prefix.{os.getpid()}")
            draft.write_text(secrets.token_hex(4) + "\n")
            try:
                os.link(draft, path)  # atomic: processes starting together agree on one id
            except FileExistsError:
                pass
            finally:
                draft.unlink()
        value, source = path.read_text().strip(), str(path)
    try:
        return check_redis_prefix(value, source)
    except ValueError as err:
        raise SystemExit(f"RFT Studio settings: {err}") from None


def redis_prefixed_settings(prefix: str, redis_url: str) -> dict:
    """Every setting that names Redis keys or channels, for one deployment prefix (the test
    session sets its own prefix through this, tests/conftest.py). Channels: pub/sub ignores the
    database number, so the prefix alone keeps the groups (``run-<pk>``...) of this deployment
    apart from another's on the same server. Celery: kombu prefixes every key and pub/sub channel
    of the broker (queues, bindings, unacked, the pidbox and event fanouts), Celery every result
    key (and so its pub/sub channel)."""
    namespace = f"rft:{prefix}:"
    return {
        "RFT_REDIS_PREFIX": prefix,
        "RFT_REDIS_NAMESPACE": namespace,
        "CHANNEL_LAYERS": {
            "default": {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {"hosts": [redis_url], "prefix": f"{namespace}asgi:"},
            }
        },
        "CELERY_BROKER_TRANSPORT_OPTIONS": {"global_keyprefix": namespace},
        "CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS": {"global_keyprefix": namespace},
    }


SECRET_KEY = _secret_key()
DEBUG = _env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# The experiment form posts one field per config key: ~270 plus ~160 a stage and ~36 an eval
# taskset, so six stages pass Django's default of 1000 (a bare 400). The body stays capped by
# DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB), which bounds the parsing work this limit guards.
DATA_UPLOAD_MAX_NUMBER_FIELDS = 20_000

# Services the dashboard talks to. Health checks read these at request time.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
RAY_ADDRESS = os.environ.get("RAY_ADDRESS", "http://127.0.0.1:8265")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # swagger-ui's assets as static files (/api/v1/docs/, no CDN)
    "webapp.accounts",
    "webapp.health",
    "webapp.audit",
    "webapp.experiments",
    "webapp.runs",
    "webapp.checkpoints",
    "webapp.events",
    "webapp.api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: every view requires login unless decorated with @login_not_required (Django 5.1+);
    # Django's, with a JSON 403 for a request that asks for JSON (webapp/refusals.py).
    "webapp.refusals.LoginRequiredMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The embedded default has several writers (web, worker, ingestor, beat) on one file: WAL lets
    # readers go on while one writes, IMMEDIATE takes the write lock at BEGIN (no upgrade
    # deadlock that "database is locked" would end), and a writer waits up to 20 s for its turn.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
if os.environ.get("DJANGO_TEST_DB_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["DJANGO_TEST_DB_NAME"]}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on a missing root
# Serve straight from STATICFILES_DIRS so `make demo` needs no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
# files served at the site's root before any login check: /favicon.ico (browsers and the admin's
# pages ask for it on every page; static/root/ is part of the repo, nothing fetched)
WHITENOISE_ROOT = BASE_DIR / "static" / "root"

# Live messages go through Redis pub/sub: a group message is published ONCE and each web
# process that has a member receives it once and hands it to its local consumers (the core
# layer writes one copy per member channel and pops them one by one: 50 watchers of a run
# cost 50 copies of every batch). Pub/sub delivers at most once; the live protocol carries
# dense seqs and a page refetches any gap (webapp/runs/live.py), so nothing is lost for good.
# (CHANNEL_LAYERS: see redis_prefixed_settings below.)

# Celery (workers/celery_app.py reads every CELERY_* setting).
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# The deployment prefix (RFT_REDIS_PREFIX or var/redis_prefix) on every Redis key and channel:
# RFT_REDIS_PREFIX, RFT_REDIS_NAMESPACE ("rft:<prefix>:"), CHANNEL_LAYERS and the Celery
# transport options.
globals().update(redis_prefixed_settings(_redis_prefix(), REDIS_URL))
CELERY_RESULT_EXPIRES = 3600

# ---------------------------------------------------------------- RFT Studio
# Where the project is checked out: relative paths in a web config (./var/demo/model) resolve here,
# as they do for `trinity run` started in this directory.
RFT_WORK_DIR = Path(os.environ.get("RFT_WORK_DIR", BASE_DIR))
# The demo model and data (`trinity init-demo`), and where runs launched from the web write their
# job dirs: each run gets <checkpoint root>/run-<id>/<project>/<name>, a relative checkpoint root
# being under its owner's runs area <RFT_RUNS_DIR>/users/<user id>/ (see RFT_SHARED_RUN_ROOTS).
# The Redis a run streams its events to (RFT_EVENTS_REDIS_URL of its processes): the one this
# dashboard's ingestor reads; set it when runs reach that Redis by another address.
RFT_EVENTS_REDIS_URL = os.environ.get("RFT_EVENTS_REDIS_URL_FOR_RUNS", REDIS_URL)
RFT_DEMO_DIR = Path(os.environ.get("RFT_DEMO_DIR", VAR_DIR / "demo"))
RFT_RUNS_DIR = Path(os.environ.get("RFT_RUNS_DIR", VAR_DIR / "runs"))
# A web-submitted config may name only paths inside these roots (after resolving symlinks and ..).
RFT_ALLOWED_PATH_ROOTS = [
    Path(p)
    for p in os.environ.get(
        "RFT_ALLOWED_PATH_ROOTS", os.pathsep.join([str(RFT_DEMO_DIR), str(RFT_RUNS_DIR)])
    ).split(os.pathsep)
    if p
]
# Whose job dirs are whose (webapp/runs/claims.py). Each user's runs live under
# <RFT_RUNS_DIR>/users/<user id>/ (their "runs area": the id, never the username, so no name can
# collide with or spoof another's); web launches write there, and import, register and convert
# accept a job dir there, never one that a run of another user owns (nor its parent or child).
# A team shares runs on purpose by a group root: RFT_SHARED_RUN_ROOTS is JSON
# {"<Django group name>": ["/abs/root", ...]}; a member of the group may also claim job dirs
# under those roots (which must lie inside RFT_ALLOWED_PATH_ROOTS). Staff may claim any job dir
# inside the allowed roots; such a claim is audited as "staff".
try:
    RFT_SHARED_RUN_ROOTS = _shared_run_roots(os.environ.get("RFT_SHARED_RUN_ROOTS", ""))
except ImproperlyConfigured as err:  # one line for every process, as for RFT_REDIS_PREFIX
    raise SystemExit(f"RFT Studio settings: {err}") from None
# ${oc.env:VAR} in a web-submitted config may read only variables matching these (fnmatch) patterns.
RFT_OC_ENV_ALLOWLIST = [
    p.strip()
    for p in os.environ.get("RFT_OC_ENV_ALLOWLIST", "TRINITY_*,RFT_DEMO_DIR").split(",")
    if p.strip()
]
# Untrusted YAML: refused above this size, or when aliases expand to more than this many nodes.
RFT_YAML_MAX_BYTES = int(os.environ.get("RFT_YAML_MAX_BYTES", 256 * 1024))
RFT_YAML_MAX_ALIASES = int(os.environ.get("RFT_YAML_MAX_ALIASES", 100))
# A running run whose last heartbeat is older than this becomes "lost" at the next reconcile.
RFT_HEARTBEAT_TIMEOUT_S = float(os.environ.get("RFT_HEARTBEAT_TIMEOUT_S", 120))
RFT_RECONCILE_INTERVAL_S = float(os.environ.get("RFT_RECONCILE_INTERVAL_S", 30))
# How long the service checks wait: for Redis and Ray's job server to answer (the health page,
# and the check before each launch), and for Celery workers' ping replies (the health page
# waits all of it). Raise them on a loaded host, where a slow answer is not a dead service.
RFT_PING_TIMEOUT_S = float(os.environ.get("RFT_PING_TIMEOUT_S", 1.5))
RFT_CELERY_PING_TIMEOUT_S = float(os.environ.get("RFT_CELERY_PING_TIMEOUT_S", 1.0))
# Celery queue of HF conversions (workers on the hosts that see the checkpoint storage); None =
# the default queue.
RFT_CONVERT_QUEUE = os.environ.get("RFT_CONVERT_QUEUE") or None
# The example the demo user gets as their first experiment (`manage.py ensure_demo_experiment`).
RFT_DEMO_CONFIG = BASE_DIR / "examples" / "demo" / "grpo_demo.yaml"
# Runs (webapp/runs): the Celery queue of the launch/cancel/follow tasks; how often a live run's
# Ray job is polled; how long cancel waits for Ray to stop a job; the command the job runs
# (`trinity` on the Ray nodes' PATH); extra runtime_env for every run's Ray job, as JSON (e.g.
# {"pip": ["/shared/rft_studio-0.1-py3-none-any.whl"]} on a cluster without the project).
RFT_RUNS_QUEUE = os.environ.get("RFT_RUNS_QUEUE", "celery")
RFT_FOLLOW_INTERVAL_S = float(os.environ.get("RFT_FOLLOW_INTERVAL_S", 3))
RFT_CANCEL_TIMEOUT_S = float(os.environ.get("RFT_CANCEL_TIMEOUT_S", 60))
RFT_TRINITY_COMMAND = os.environ.get("RFT_TRINITY_COMMAND", "trinity")
RFT_RAY_RUNTIME_ENV = json.loads(os.environ.get("RFT_RAY_RUNTIME_ENV") or "{}")
# Plugin directories (os.pathsep-joined) whose workflows/rewards/algorithm pieces web users may
# name: the config checks load them, and every run's Ray job gets them as TRINITY_PLUGIN_DIRS.
# Empty (the default): no plugin is ever loaded on the web path, and a TRINITY_PLUGIN_DIRS in
# the worker's environment is ignored (the job's is set to empty).
RFT_PLUGIN_DIRS = [d for d in os.environ.get("RFT_PLUGIN_DIRS", "").split(os.pathsep) if d.strip()]

REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header makes an anonymous API call a 401, not a 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "webapp.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "RFT Studio API",
    "DESCRIPTION": "Experiments, runs, metrics, logs and checkpoints of RFT Studio.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/v1/docs/: swagger-ui from drf-spectacular-sidecar's static files, never a CDN
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": False, "displayRequestDuration": True},
    # a run's and an evaluation's "status" are two choice sets: one schema enum each
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "webapp.runs.models.RunStatus",
        "EvaluationStatusEnum": "webapp.checkpoints.models.EvaluationStatus",
    },
}

CELERY_BEAT_SCHEDULE = {
    "reconcile-runs": {"task": "runs.reconcile", "schedule": RFT_RECONCILE_INTERVAL_S},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}
