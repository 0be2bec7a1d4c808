"""The user documentation (the README and the pages under docs/ it leads to) names every variable the
settings read, and shows only commands that exist."""

import re
from pathlib import Path

from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
#: The README and the reference pages it links to (docs/operations.md holds the settings' table).
USER_DOCS = README + "".join(path.read_text() for path in sorted((ROOT / "docs").glob("*.md")))


def test_every_environment_variable_the_code_reads_is_documented():
    read = set()
    for path in [ROOT / "memory_platform" / "settings.py", ROOT / "bin" / "run"]:
        text = path.read_text()
        read |= set(re.findall(r'(?:env\.\w+|_int|_bool|_choice|_float)\("([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'\("(MEMORY_[A-Z0-9_]+)", ', text))
        read |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]+):-", text))
    assert {"DATABASE_URL", "MEMORY_EMBEDDER", "WEB_THREADS"} <= read  # the patterns still match
    missing = sorted(name for name in read if f"`{name}`" not in USER_DOCS)
    assert missing == []


def test_the_commands_the_readme_shows_exist():
    shown = set(re.findall(r"manage\.py (\w+)", USER_DOCS))
    assert {"create_tenant", "tick", "rebuild_hot", "backup", "evaluate", "bench"} <= shown
    assert sorted(shown - set(get_commands())) == []
