"""What a process's first write and first search would otherwise load while a caller waits: the
default embedding model (torch and sentence-transformers for ``local``: 5 s on an idle machine,
far more on a busy one) and its query encoder (ONNX Runtime), the multilingual model when a tenant
uses it, and what the apps register (``register``: jieba's dictionary, dateparser).

Loaded once per process, before it serves: by each web worker (gunicorn's ``post_worker_init``,
``memory_platform/gunicorn_conf.py``) and by ``manage.py mcp``. Never fatal: a part that cannot
load is logged, and the first request that needs it loads it, as it would have without this.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from memory_platform.conf import memory_settings

logger = logging.getLogger(__name__)

TEXT = "warm-up"
_parts: dict[str, Callable[[], object]] = {}


def register(name: str, load: Callable[[], object]) -> None:
    """Have ``warm_up`` call ``load`` (an app's ``ready`` registers what its first use loads; what
    it returns is dropped)."""
    _parts[name] = load


def _embedder(name: str) -> None:
    from memory_platform.embeddings import get_embedder
    from memory_platform.embeddings.registry import OPENAI

    if name == OPENAI:
        return  # a client of a server: nothing to load
    embedder = get_embedder(name)
    if not embedder.computes:
        return
    embedder.embed([TEXT])  # stored texts: the model itself
    prepare = getattr(embedder, "prepare", None)
    if prepare is not None:
        prepare()  # the query encoder
    embedder.embed_one(TEXT)


def _embedders() -> None:
    from memory_platform.embeddings.registry import MULTILINGUAL
    from memory_platform.tenancy.models import Tenant

    default = str(memory_settings.EMBEDDER)
    _embedder(default)
    if default != MULTILINGUAL and Tenant.objects.filter(embedder=MULTILINGUAL).exists():
        _embedder(MULTILINGUAL)


def warm_up(
    log: Callable[[str], None] | None = None, *, embedders: Iterable[str] | None = None
) -> dict[str, float]:
    """Load what the first write and search need: ``embedders`` (by default the platform's, and
    the multilingual one when a tenant uses it) and the registered parts. Returns the seconds each
    part took."""
    names = list(embedders) if embedders is not None else None

    def load_embedders() -> None:
        if names is None:
            _embedders()
        for name in names or []:
            _embedder(name)

    took: dict[str, float] = {}
    for name, load in {"embedders": load_embedders, **_parts}.items():
        started = time.perf_counter()
        try:
            load()
        except Exception as exc:  # never fatal: the first request that needs it loads it
            logger.warning("warm-up: %s not loaded: %s", name, exc)
            continue
        took[name] = round(time.perf_counter() - started, 2)
    if log is not None:
        log("warm: " + ", ".join(f"{name} {seconds} s" for name, seconds in took.items()))
    return took
