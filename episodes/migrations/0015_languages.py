"""Memory in Chinese, Russian and English (docs/decisions/0024).

- ``Turn.language``: the turn's language (``episodes.language``); existing turns are read off
  their script here, in batches.
- ``Turn.index_text``: the text as full text reads it where it differs (Chinese segmented into
  words); existing Chinese turns get it here.
- Full text in Postgres reads every row with the ``russian`` configuration (English words by the
  English stemmer, Russian ones by the Russian stemmer; ``language.TEXT_CONFIG``): the packed
  turns' window (migration 0014's trigger) reads ``index_text``. For English text the lexemes are
  the same as before, so only rows holding Cyrillic or Chinese are written again. The episodes'
  ``search_vector`` is re-indexed by migration 0017, without a long lock. (This migration first
  changed its generated expression in place, which rewrote the table under an exclusive lock:
  19.6 s for 44,584 episodes on the 2-core machine, writes to episodes waiting all along.)
- ``Turn.search_vector`` goes: nothing has searched it since migration 0014.
"""

import importlib

from django.db import migrations, models

BATCH = 1000
# Rows whose analysis changes: Chinese characters (HAN) or Cyrillic letters.
HAN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
NON_LATIN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0400-\u052f]"

TURN_PACKED = """
CREATE OR REPLACE FUNCTION episodes_turn_packed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.packed := coalesce(
        (SELECT e.layer IN ('warm', 'cold') FROM episodes_episode e WHERE e.id = NEW.episode_id), false
    );
    IF NEW.packed THEN
        NEW.window_vector := to_tsvector('russian', concat_ws(E'\\n',
            (SELECT coalesce(p.index_text, p.text) FROM episodes_turn p WHERE p.episode_id = NEW.episode_id
                AND p.id <> NEW.id AND (p.seq, p.id) < (NEW.seq, NEW.id) ORDER BY p.seq DESC, p.id DESC LIMIT 1),
            coalesce(NEW.index_text, NEW.text),
            (SELECT coalesce(n.index_text, n.text) FROM episodes_turn n WHERE n.episode_id = NEW.episode_id
                AND n.id <> NEW.id AND (n.seq, n.id) > (NEW.seq, NEW.id) ORDER BY n.seq, n.id LIMIT 1)
        ));
    ELSE
        NEW.window_vector := NULL;
    END IF;
    RETURN NEW;
END $$;
"""

# Reversed: the trigger as migration 0014 wrote it.
TURN_PACKED_BEFORE = importlib.import_module("episodes.migrations.0014_turn_window_vector").TURN_PACKED



def read_existing(apps, schema_editor):
    """Existing turns holding Cyrillic or Chinese: their language, their index text (and, packed,
    their neighbours' windows again); episodes whose search text holds Chinese: segmented."""
    from episodes.language import detect, has_han, index_text

    Turn = apps.get_model("episodes", "Turn")
    Episode = apps.get_model("episodes", "Episode")
    last = 0
    while True:
        batch = list(
            Turn.objects.filter(pk__gt=last, text__regex=NON_LATIN).order_by("pk").only("pk", "text")[:BATCH]
        )
        if not batch:
            break
        for turn in batch:
            turn.language = detect(turn.text) or "en"
            turn.index_text = index_text(turn.text) if has_han(turn.text) else None
        Turn.objects.bulk_update(batch, ["language", "index_text"])
        last = batch[-1].pk
    last = 0
    while True:
        batch = list(
            Episode.objects.filter(pk__gt=last, search_text__regex=HAN)
            .order_by("pk")
            .only("pk", "search_text")[:BATCH]
        )
        if not batch:
            break
        for episode in batch:
            episode.search_text = index_text(episode.search_text)
        Episode.objects.bulk_update(batch, ["search_text"])
        last = batch[-1].pk
    with schema_editor.connection.cursor() as cursor:
        # Packed turns holding Cyrillic or Chinese, and their neighbours: the trigger writes their windows.
        cursor.execute(
            "UPDATE episodes_turn t SET packed = true WHERE t.packed AND EXISTS (SELECT 1 FROM episodes_turn o "
            "WHERE o.episode_id = t.episode_id AND o.text ~ %s)",
            [NON_LATIN],
        )


class Migration(migrations.Migration):
    atomic = False  # the batches commit one by one

    dependencies = [
        ("episodes", "0014_turn_window_vector"),
    ]

    operations = [
        migrations.RemoveField(model_name="turn", name="search_vector"),
        migrations.AddField(
            model_name="turn",
            name="index_text",
            field=models.TextField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="turn",
            name="language",
            field=models.CharField(
                choices=[("en", "English"), ("ru", "Russian"), ("zh", "Chinese")],
                default="en",
                help_text="the caller's, the tenant policy's, or read off the text (``episodes.language``)",
                max_length=2,
            ),
        ),
        migrations.AlterField(
            model_name="episode",
            name="search_text",
            field=models.TextField(
                blank=True,
                default="",
                help_text="the text of the current layer's shape, as full text reads it (``language.index_text``)",
            ),
        ),
        migrations.RunSQL(TURN_PACKED, TURN_PACKED_BEFORE),
        migrations.RunPython(read_existing, migrations.RunPython.noop),
    ]
