import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _import_settings(code: str = "", **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG"}}
    environment.update(env)
    environment["DJANGO_SETTINGS_MODULE"] = "memory_platform.settings"
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_non_postgres_database_url_is_refused_with_a_clear_message():
    result = _import_settings(DATABASE_URL="mysql://u:p@localhost/db", DEBUG="1")
    assert result.returncode != 0
    assert "DATABASE_URL must be a postgres:// URL" in result.stderr


def test_a_database_url_without_a_name_is_refused():
    result = _import_settings(DATABASE_URL="postgres://u:p@localhost:5432", DEBUG="1")
    assert result.returncode != 0
    assert "names no database" in result.stderr


def test_a_bad_port_is_refused():
    result = _import_settings(DATABASE_URL="postgres://u:p@localhost:xx/db", DEBUG="1")
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_the_default_secret_key_refuses_to_start_without_debug(tmp_path):
    result = _import_settings(DEBUG="0", SECRET_KEY="", MEMORY_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr and "DEBUG is off" in result.stderr


def test_without_secret_key_the_key_make_run_wrote_is_used(tmp_path):
    # A second shell beside `make run`: no SECRET_KEY in its environment, var/secret_key on disk.
    (tmp_path / "secret_key").write_text("k-from-the-file\n")
    result = _import_settings(
        "from django.conf import settings; print(settings.SECRET_KEY)",
        DEBUG="0",
        SECRET_KEY="",
        MEMORY_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "k-from-the-file"


def test_a_bad_boolean_is_refused():
    result = _import_settings(DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_good_settings_load():
    result = _import_settings(DATABASE_URL="postgres://u:p@localhost:5432/db", DEBUG="1")
    assert result.returncode == 0, result.stderr


def test_a_database_url_may_name_a_unix_socket_directory():
    # libpq's URL form: the directory percent-encoded in place of the host, its case kept.
    result = _import_settings(
        "from django.conf import settings; d = settings.DATABASES['default']; print(d['HOST'], d['NAME'], d['USER'])",
        DATABASE_URL="postgres://app@%2FSrv%2FPg%20Sockets/memory",
        DEBUG="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "/Srv/Pg Sockets memory app"


def test_trusted_proxies_are_read_as_networks_and_a_bad_one_is_refused():
    shown = "from memory_platform.conf import memory_settings as m; print(m.TRUSTED_PROXIES)"
    result = _import_settings(
        shown, DATABASE_URL="postgres://u@localhost/db", DEBUG="1", MEMORY_TRUSTED_PROXIES="10.0.0.0/8, ::1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('10.0.0.0/8', '::1/128')"
    result = _import_settings(
        shown,
        DATABASE_URL="postgres://u@localhost/db",
        DEBUG="1",
        MEMORY_TRUSTED_PROXIES="10.0.0.0/8,proxy.lan",
    )
    assert result.returncode != 0
    assert "MEMORY_TRUSTED_PROXIES: 'proxy.lan' is not an IP address" in result.stderr
