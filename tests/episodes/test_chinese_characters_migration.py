"""Migration 0019: Chinese text indexed by an earlier release (words alone) gets each word's
characters, in turns, packed turns' windows and episodes' search text."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from episodes import language
from episodes.models import Episode, Turn
from lifecycle.services import episode_pack
from tests.conftest import Caller, pk

pytestmark = pytest.mark.django_db(transaction=True)

CAT = "李娜的猫叫咪咪，每天早上六点叫醒我"


@pytest.fixture(autouse=True)
def latest_schema_after():
    """Every later test expects the latest migrations, whatever this one stopped at."""
    yield
    call_command("migrate", "episodes", verbosity=0)


def words_alone(text: str) -> str:
    """Index text as the earlier release wrote it: Chinese runs as their words, no characters."""
    return language.HAN_RUN.sub(lambda m: " " + " ".join(language._words(m.group())) + " ", text)


def without_characters(tokens: list[str]) -> str:
    """The reverse of ``language.with_characters``: each word's characters after it dropped."""
    kept, i = [], 0
    while i < len(tokens):
        word = tokens[i]
        kept.append(word)
        i += 1
        if len(word) > 1 and language.has_han(word) and tokens[i : i + len(word)] == list(word):
            i += len(word)
    return " ".join(kept)


def lexemes(sql: str, params: list) -> str:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return " ".join(str(row[0]) for row in cursor.fetchall())


def test_the_migration_gives_earlier_chinese_rows_their_characters():
    caller = Caller("zh-characters")
    body = caller.post(
        "/api/v1/turns",
        {
            "session_id": "s",
            "turns": [{"role": "user", "text": CAT}, {"role": "assistant", "text": "好可爱"}],
        },
    ).json()
    episode_id = pk(body["episode_ids"][0])
    episode_pack(tenant=caller.tenant, episode_id=episode_id, layer="warm", now=timezone.now(), actor="test")
    episode = Episode.objects.across_tenants("test").get(pk=episode_id)
    search_text_now = episode.search_text.split()
    assert "猫" in search_text_now

    call_command("migrate", "episodes", "0018", verbosity=0)  # the reverse leaves the rows as they are
    # The rows as the earlier release left them: words alone, and the vectors computed from them.
    # (Rows are read by column: the model's later fields are not in this schema.)
    for turn_id, text in (
        Turn.objects.across_tenants("test").filter(episode_id=episode_id).values_list("pk", "text")
    ):
        Turn.objects.across_tenants("test").filter(pk=turn_id).update(index_text=words_alone(text))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE episodes_turn SET packed = true WHERE packed AND episode_id = %s", [episode_id]
        )
    Episode.objects.across_tenants("test").filter(pk=episode_id).update(
        search_text=without_characters(search_text_now)
    )
    window = "SELECT window_vector FROM episodes_turn WHERE episode_id = %s"
    assert "'猫'" not in lexemes(window, [episode_id])
    assert "'猫'" not in lexemes("SELECT search_vector FROM episodes_episode WHERE id = %s", [episode_id])

    call_command("migrate", "episodes", "0019", verbosity=0)
    for text, index_text in (
        Turn.objects.across_tenants("test").filter(episode_id=episode_id).values_list("text", "index_text")
    ):
        assert index_text == language.index_text(text)
    search_text = (
        Episode.objects.across_tenants("test")
        .filter(pk=episode_id)
        .values_list("search_text", flat=True)
        .get()
    )
    assert search_text.split() == search_text_now
    # Both vectors were computed again by their triggers: the first turn's window holds "猫"
    # from its own text, the second's from its neighbour's.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT window_vector FROM episodes_turn WHERE episode_id = %s ORDER BY seq", [episode_id]
        )
        assert all("'猫'" in str(row[0]) for row in cursor.fetchall())
    assert "'猫'" in lexemes("SELECT search_vector FROM episodes_episode WHERE id = %s", [episode_id])
    call_command("migrate", "episodes", verbosity=0)  # the later migrations, which the code expects
    found = caller.post("/api/v1/search", {"query": "猫"}).json()["results"]
    assert [r["episode_id"] for r in found][:1] == [body["episode_ids"][0]]
