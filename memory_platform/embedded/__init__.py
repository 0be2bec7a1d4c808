"""Start, reuse and stop the embedded Postgres and Redis (``make services``;
docs/concepts.md#where-things-live).

Pure Python with no Django import, so ``manage.py`` can bring the servers up before Django loads
its settings. Data lives under one directory (``var/`` by default, a temporary one in tests).
"""

import warnings

# platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI); pgserver then uses /tmp.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

from .postgres import EmbeddedPostgres  # noqa: E402
from .redis import EmbeddedRedis, PortTakenError  # noqa: E402

__all__ = ["EmbeddedPostgres", "EmbeddedRedis", "PortTakenError"]
