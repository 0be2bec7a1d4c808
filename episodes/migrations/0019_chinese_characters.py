"""Chinese full text reads each word's characters beside the word (``language.index_text``,
docs/decisions/0034).

1. Turns holding Chinese get their ``index_text`` again from their text.
2. Packed turns of those episodes are written again, so that the trigger of migration 0014
   recomputes their windows, which read their neighbours' ``index_text``.
3. Episodes whose ``search_text`` holds Chinese get each word's characters after the word
   (``language.with_characters``: a packed episode's unsegmented text is gone); the trigger of
   migration 0017 recomputes their ``search_vector``.

Each batch of ``BATCH`` rows is its own transaction, so writers wait for row locks briefly (as in
migration 0017). The hot index is written again by ``rebuild_hot`` (its version changed with the
case folding of the same release). The reverse leaves the characters: an earlier release reads
them as more words, and every word it looks for is still there.
"""

from django.db import migrations

BATCH = 250
HAN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"


def _rewrite(model, condition: dict, read: str, field: str, compute) -> None:
    """``field`` of every row matching ``condition`` set to ``compute`` of its ``read`` field,
    a batch of ``BATCH`` rows per transaction."""
    last = 0
    while True:
        batch = list(model.objects.filter(pk__gt=last, **condition).order_by("pk").only("pk", read)[:BATCH])
        if not batch:
            return
        for row in batch:
            setattr(row, field, compute(getattr(row, read)))
        model.objects.bulk_update(batch, [field])
        last = batch[-1].pk


def add_characters(apps, schema_editor):
    from episodes.language import index_text, with_characters

    _rewrite(apps.get_model("episodes", "Turn"), {"index_text__isnull": False}, "text", "index_text", index_text)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT episode_id FROM episodes_turn WHERE packed AND index_text IS NOT NULL ORDER BY 1"
        )
        episodes = [row[0] for row in cursor.fetchall()]
        for start in range(0, len(episodes), BATCH):
            cursor.execute(
                "UPDATE episodes_turn SET packed = true WHERE packed AND episode_id = ANY(%s)",
                [episodes[start : start + BATCH]],
            )
    _rewrite(
        apps.get_model("episodes", "Episode"),
        {"search_text__regex": HAN},
        "search_text",
        "search_text",
        with_characters,
    )


class Migration(migrations.Migration):
    atomic = False  # the batches commit one by one

    dependencies = [("episodes", "0018_episode_entities_gin")]

    operations = [migrations.RunPython(add_characters, migrations.RunPython.noop)]
