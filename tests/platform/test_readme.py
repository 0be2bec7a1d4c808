"""The README is for users: it names every variable the settings read and only commands that exist."""

import re
from pathlib import Path

from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_environment_variable_the_code_reads_is_documented():
    read = set()
    for path in [ROOT / "memory_platform" / "settings.py", ROOT / "bin" / "run"]:
        text = path.read_text()
        read |= set(re.findall(r'(?:env\.\w+|_int|_bool|_choice|_float)\("([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'\("(MEMORY_[A-Z0-9_]+)", ', text))
        read |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]+):-", text))
    assert {"DATABASE_URL", "MEMORY_EMBEDDER", "WEB_THREADS"} <= read  # the patterns still match
    missing = sorted(name for name in read if f"`{name}`" not in README)
    assert missing == []


def test_the_commands_the_readme_shows_exist():
    shown = set(re.findall(r"manage\.py (\w+)", README))
    assert {"create_tenant", "tick", "rebuild_hot", "backup", "evaluate", "bench"} <= shown
    assert sorted(shown - set(get_commands())) == []
