"""A packed turn is searched by the words of its window, as its hot document was.

The hot index searches each turn with its neighbours in the episode (`indexing.window_text`:
a reply often only makes sense next to what it answers). Packed turns were searched by their own
text (`search_vector`), so an episode found hot through a turn's window was no longer found
through it once warm or cold (docs/decisions/0022). `episodes_turn.window_vector` holds the
window's full text for packed turns (NULL for hot ones, which Redis searches); like `packed`, it
is invisible to Django and kept by the trigger of migration 0008 that sets `packed`, in every
code path and in the same row version: packing an episode writes its turns' windows, unpacking
clears them, and a turn written into a packed episode has its neighbours' windows rewritten. The partial GIN index moves from `search_vector` to it.
"""

from django.db import migrations

# The trigger of migration 0008 that sets `packed` on every write of a turn also sets its window,
# in the same row version: a second UPDATE would leave a dead version of every packed turn in
# every index (HNSW included) until a vacuum, and slow search until then (docs/decisions/0022).
TURN_PACKED = """
CREATE OR REPLACE FUNCTION episodes_turn_packed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.packed := coalesce(
        (SELECT e.layer IN ('warm', 'cold') FROM episodes_episode e WHERE e.id = NEW.episode_id), false
    );
    IF NEW.packed THEN
        NEW.window_vector := to_tsvector('english', concat_ws(E'\\n',
            (SELECT p.text FROM episodes_turn p WHERE p.episode_id = NEW.episode_id AND p.id <> NEW.id
                AND (p.seq, p.id) < (NEW.seq, NEW.id) ORDER BY p.seq DESC, p.id DESC LIMIT 1),
            NEW.text,
            (SELECT n.text FROM episodes_turn n WHERE n.episode_id = NEW.episode_id AND n.id <> NEW.id
                AND (n.seq, n.id) > (NEW.seq, NEW.id) ORDER BY n.seq, n.id LIMIT 1)
        ));
    ELSE
        NEW.window_vector := NULL;
    END IF;
    RETURN NEW;
END $$;
"""

# A turn written into a packed episode (rare: turns are written hot) changes its neighbours'
# windows: they are written again, which recomputes them.
NEIGHBOURS = """
CREATE FUNCTION episodes_packed_turn_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = true
    WHERE id IN (
        (SELECT p.id FROM episodes_turn p WHERE p.episode_id = NEW.episode_id AND p.id <> NEW.id
            AND (p.seq, p.id) < (NEW.seq, NEW.id) ORDER BY p.seq DESC, p.id DESC LIMIT 1),
        (SELECT n.id FROM episodes_turn n WHERE n.episode_id = NEW.episode_id AND n.id <> NEW.id
            AND (n.seq, n.id) > (NEW.seq, NEW.id) ORDER BY n.seq, n.id LIMIT 1)
    );
    RETURN NULL;
END $$;

CREATE TRIGGER packed_turn_written AFTER INSERT OR UPDATE OF text, seq, episode_id ON episodes_turn
    FOR EACH ROW WHEN (NEW.packed) EXECUTE FUNCTION episodes_packed_turn_written();
"""

FORWARD = (
    "ALTER TABLE episodes_turn ADD COLUMN window_vector tsvector;"
    + TURN_PACKED
    + NEIGHBOURS
    + """
UPDATE episodes_turn SET packed = true WHERE packed;  -- the trigger writes every packed turn's window

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
CREATE OR REPLACE FUNCTION episodes_turn_packed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.packed := coalesce(
        (SELECT e.layer IN ('warm', 'cold') FROM episodes_episode e WHERE e.id = NEW.episode_id), false
    );
    RETURN NEW;
END $$;
ALTER TABLE episodes_turn DROP COLUMN IF EXISTS window_vector;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0013_public_ids"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
