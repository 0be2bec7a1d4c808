"""Turns of warm and cold episodes get their own partial indexes.

`episodes_turn.packed` mirrors the layer of the turn's episode (warm or cold = packed). Two
triggers keep it so in every code path, inside the same transaction: a turn takes its episode's
value when written, and a layer change rewrites the episode's turns. The column is invisible to
Django (not on the model), so no ORM write can set it wrong. Search reads packed turns through
a partial HNSW index (vectors) and a partial GIN index (full text); hot turns are in Redis and
cost these indexes nothing.
"""

from django.db import migrations

FORWARD = """
ALTER TABLE episodes_turn ADD COLUMN packed boolean NOT NULL DEFAULT false;

CREATE FUNCTION episodes_turn_packed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.packed := coalesce(
        (SELECT e.layer IN ('warm', 'cold') FROM episodes_episode e WHERE e.id = NEW.episode_id), false
    );
    RETURN NEW;
END $$;

CREATE TRIGGER turn_packed BEFORE INSERT OR UPDATE ON episodes_turn
    FOR EACH ROW EXECUTE FUNCTION episodes_turn_packed();

CREATE FUNCTION episodes_episode_layer_to_turns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = (NEW.layer IN ('warm', 'cold'))
        WHERE episode_id = NEW.id AND packed IS DISTINCT FROM (NEW.layer IN ('warm', 'cold'));
    RETURN NULL;
END $$;

CREATE TRIGGER episode_layer_to_turns AFTER UPDATE OF layer ON episodes_episode
    FOR EACH ROW WHEN (OLD.layer IS DISTINCT FROM NEW.layer)
    EXECUTE FUNCTION episodes_episode_layer_to_turns();

UPDATE episodes_turn t SET packed = true FROM episodes_episode e
    WHERE e.id = t.episode_id AND e.layer IN ('warm', 'cold');

CREATE INDEX turn_packed_embedding_hnsw ON episodes_turn
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)
    WHERE packed AND embedding IS NOT NULL;
CREATE INDEX turn_packed_search_vector ON episodes_turn USING gin (search_vector) WHERE packed;
"""

BACKWARD = """
DROP INDEX IF EXISTS turn_packed_search_vector;
DROP INDEX IF EXISTS turn_packed_embedding_hnsw;
DROP TRIGGER IF EXISTS episode_layer_to_turns ON episodes_episode;
DROP FUNCTION IF EXISTS episodes_episode_layer_to_turns();
DROP TRIGGER IF EXISTS turn_packed ON episodes_turn;
DROP FUNCTION IF EXISTS episodes_turn_packed();
ALTER TABLE episodes_turn DROP COLUMN IF EXISTS packed;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0007_usage_updates_stay_hot"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="turn", name="turn_search_vector"),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
