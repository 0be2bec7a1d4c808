"""A packed turn is searched by the words of its window, as its hot document was.

The hot index searches each turn with its neighbours in the episode (`indexing.window_text`:
a reply often only makes sense next to what it answers). Packed turns were searched by their own
text (`search_vector`), so an episode found hot through a turn's window was no longer found
through it once warm or cold (docs/decisions/0022). `episodes_turn.window_vector` holds the
window's full text for packed turns (NULL for hot ones, which Redis searches); like `packed`, it
is invisible to Django and kept by the triggers of migration 0008 in every code path: packing an
episode writes its turns' windows, unpacking clears them, and a turn written into a packed
episode rewrites its episode's windows. The partial GIN index moves from `search_vector` to it.
"""

from django.db import migrations

WINDOWS = """
CREATE FUNCTION episodes_turn_windows(episode bigint) RETURNS void LANGUAGE sql AS $$
    UPDATE episodes_turn t SET window_vector = w.vector
    FROM (
        SELECT id, to_tsvector('english', concat_ws(E'\\n', lag(text) OVER o, text, lead(text) OVER o)) AS vector
        FROM episodes_turn WHERE episode_id = episode WINDOW o AS (ORDER BY seq, id)
    ) w
    WHERE t.id = w.id AND t.window_vector IS DISTINCT FROM w.vector;
$$;
"""

LAYER_TRIGGER = """
CREATE OR REPLACE FUNCTION episodes_episode_layer_to_turns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = (NEW.layer IN ('warm', 'cold'))
        WHERE episode_id = NEW.id AND packed IS DISTINCT FROM (NEW.layer IN ('warm', 'cold'));
    IF NEW.layer IN ('warm', 'cold') THEN
        PERFORM episodes_turn_windows(NEW.id);
    ELSE
        UPDATE episodes_turn SET window_vector = NULL WHERE episode_id = NEW.id AND window_vector IS NOT NULL;
    END IF;
    RETURN NULL;
END $$;
"""

TURN_TRIGGER = """
CREATE FUNCTION episodes_packed_turn_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM episodes_turn_windows(NEW.episode_id);
    RETURN NULL;
END $$;

CREATE TRIGGER packed_turn_written AFTER INSERT OR UPDATE OF text, seq, episode_id ON episodes_turn
    FOR EACH ROW WHEN (NEW.packed) EXECUTE FUNCTION episodes_packed_turn_written();
"""

FORWARD = (
    "ALTER TABLE episodes_turn ADD COLUMN window_vector tsvector;"
    + WINDOWS
    + LAYER_TRIGGER
    + TURN_TRIGGER
    + """
UPDATE episodes_turn t SET window_vector = w.vector
FROM (
    SELECT id, to_tsvector('english', concat_ws(E'\\n', lag(text) OVER o, text, lead(text) OVER o)) AS vector
    FROM episodes_turn WHERE packed WINDOW o AS (PARTITION BY episode_id ORDER BY seq, id)
) w
WHERE t.id = w.id;

CREATE INDEX turn_packed_window_vector ON episodes_turn USING gin (window_vector)
    WITH (fastupdate = off) WHERE packed;
DROP INDEX IF EXISTS turn_packed_search_vector;
"""
)

BACKWARD = """
CREATE INDEX IF NOT EXISTS turn_packed_search_vector ON episodes_turn USING gin (search_vector)
    WITH (fastupdate = off) WHERE packed;
DROP INDEX IF EXISTS turn_packed_window_vector;
DROP TRIGGER IF EXISTS packed_turn_written ON episodes_turn;
DROP FUNCTION IF EXISTS episodes_packed_turn_written();
CREATE OR REPLACE FUNCTION episodes_episode_layer_to_turns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = (NEW.layer IN ('warm', 'cold'))
        WHERE episode_id = NEW.id AND packed IS DISTINCT FROM (NEW.layer IN ('warm', 'cold'));
    RETURN NULL;
END $$;
DROP FUNCTION IF EXISTS episodes_turn_windows(bigint);
ALTER TABLE episodes_turn DROP COLUMN IF EXISTS window_vector;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0013_public_ids"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
