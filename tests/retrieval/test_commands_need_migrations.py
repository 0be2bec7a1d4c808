"""`evaluate` and `bench` on a database that was never migrated say so, and what to run, instead
of a traceback from their first query."""

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import manage_py_environment

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def empty_database():
    name = f"mp_unmigrated_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")


@pytest.mark.parametrize(
    "command", [["evaluate", "multilingual"], ["bench", "search", "--sizes", "10", "--queries", "1"]]
)
def test_a_command_on_an_unmigrated_database_says_to_migrate(empty_database, command):
    environ = manage_py_environment()
    environ["DATABASE_URL"] = environ["DATABASE_URL"].rsplit("/", 1)[0] + f"/{empty_database}"
    done = subprocess.run(
        [sys.executable, "manage.py", *command],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "the database lacks" in done.stderr and "manage.py migrate" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
