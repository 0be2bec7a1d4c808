"""Test settings: real embedded servers in a fresh temporary directory, never ``var/``."""

import os
import tempfile

os.environ.setdefault("DEBUG", "1")
# A short path keeps Postgres' unix socket inside the data directory (sockets max ~107 bytes).
os.environ["MEMORY_VAR_DIR"] = tempfile.mkdtemp(prefix="mp-test-", dir="/tmp")
os.environ["MEMORY_REDIS_ANY_PORT"] = "1"
os.environ.setdefault("MEMORY_PG_SHARED_BUFFERS", "256MB")
from memory_platform.embedded.redis import free_port  # noqa: E402

os.environ["MEMORY_REDIS_PORT"] = str(free_port())

from memory_platform.settings import *  # noqa: E402,F403

MEMORY_TESTING = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Queued usage counts are written when a test flushes them, never by the thread between tests
# (pytest-django refuses database access there).
MEMORY = {**MEMORY, "USAGE_FLUSH_SECONDS": 3600.0}  # noqa: F405
# The suite makes requests faster than any client would; the rate-limit tests set their own limits.
MEMORY.update(RATE_LIMIT="100000/s", TENANT_RATE_LIMIT="100000/s", AUTH_FAILURE_LIMIT="100000/min")
# Every API answer is read for the tables' integer ids (tests/public_answers.py); outermost, so it
# reads what the client receives.
MIDDLEWARE = ["tests.public_answers.InternalIdWatch", *MIDDLEWARE]  # noqa: F405
