"""The days a turn's relative time phrases point at, and their union on its episode
(``episodes.when.mentioned``, docs/decisions/0042-time-at-the-turn.md).

1. ``mentioned`` on turns and episodes. The columns keep their default of ``'{}'`` in the
   database (Django drops it after adding a column): a process of the release before, still
   writing during a deploy, leaves them out of its INSERTs.
2. Every stored turn read once, each batch of ``BATCH`` turns its own transaction (as in
   migration 0019); the episodes of the turns that mention a day get the union.

The reverse drops the columns.
"""

import django.contrib.postgres.fields
from django.db import migrations, models

import episodes.models

BATCH = 1000

COLUMNS = """
ALTER TABLE episodes_episode ADD COLUMN mentioned varchar(21)[] NOT NULL DEFAULT '{}';
ALTER TABLE episodes_turn ADD COLUMN mentioned varchar(21)[] NOT NULL DEFAULT '{}';
"""
DROP = """
ALTER TABLE episodes_turn DROP COLUMN mentioned;
ALTER TABLE episodes_episode DROP COLUMN mentioned;
"""


def field(help_text: str) -> django.contrib.postgres.fields.ArrayField:
    return django.contrib.postgres.fields.ArrayField(
        base_field=models.CharField(max_length=21, validators=[episodes.models.validate_mention]),
        blank=True,
        default=list,
        help_text=help_text,
        size=None,
    )


def read_turns(apps, schema_editor):
    from episodes.models import MENTIONED_LIMIT
    from episodes.when import mention_text, mentioned

    Turn = apps.get_model("episodes", "Turn")
    Episode = apps.get_model("episodes", "Episode")
    by_episode: dict[int, list[str]] = {}
    last = 0
    while True:
        batch = list(
            Turn.objects.filter(pk__gt=last)
            .order_by("pk")
            .only("pk", "episode_id", "text", "occurred_at")[:BATCH]
        )
        if not batch:
            break
        read = []
        for turn in batch:
            turn.mentioned = list(
                dict.fromkeys(mention_text(w) for w in mentioned(turn.text, turn.occurred_at))
            )
            if turn.mentioned:
                read.append(turn)
                days = by_episode.setdefault(turn.episode_id, [])
                days.extend(d for d in turn.mentioned if d not in days)
        Turn.objects.bulk_update(read, ["mentioned"])
        last = batch[-1].pk
    ids = sorted(by_episode)
    for start in range(0, len(ids), BATCH):
        rows = list(Episode.objects.filter(pk__in=ids[start : start + BATCH]).only("pk"))
        for episode in rows:
            episode.mentioned = by_episode[episode.pk][:MENTIONED_LIMIT]
        Episode.objects.bulk_update(rows, ["mentioned"])


class Migration(migrations.Migration):
    atomic = False  # the batches commit one by one

    dependencies = [("episodes", "0019_chinese_characters")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(COLUMNS, DROP)],
            state_operations=[
                migrations.AddField(
                    model_name="episode",
                    name="mentioned",
                    field=field("the days its turns' relative time phrases point at (their ``mentioned``)"),
                ),
                migrations.AddField(
                    model_name="turn",
                    name="mentioned",
                    field=field("the days its relative time phrases point at, read against occurred_at"),
                ),
            ],
        ),
        migrations.RunPython(read_turns, migrations.RunPython.noop),
    ]
