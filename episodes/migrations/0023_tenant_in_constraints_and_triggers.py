"""The tenant in what the schema says about more than one row, for Postgres distributed by tenant
(docs/decisions/0053-postgres-distributable-by-tenant.md).

- A link is unique per (tenant, src, dst, kind): Citus keeps a unique constraint of a distributed
  table only when it holds the distribution column. The same rows are unique as before, since a
  link's episodes are its tenant's.
- The triggers that read or write a turn's neighbours or episode (migrations 0008, 0014, 0015)
  name the row's tenant: on Citus a statement inside a trigger that names no distribution column
  is sent to every shard, once per row written. Same rows as before, for the same reason.
"""

import importlib

from django.db import migrations, models

TURN_PACKED = """
CREATE OR REPLACE FUNCTION episodes_turn_packed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.packed := coalesce(
        (SELECT e.layer IN ('warm', 'cold') FROM episodes_episode e
            WHERE e.tenant_id = NEW.tenant_id AND e.id = NEW.episode_id), false
    );
    IF NEW.packed THEN
        NEW.window_vector := to_tsvector('russian', concat_ws(E'\\n',
            (SELECT coalesce(p.index_text, p.text) FROM episodes_turn p WHERE p.tenant_id = NEW.tenant_id
                AND p.episode_id = NEW.episode_id AND p.id <> NEW.id AND (p.seq, p.id) < (NEW.seq, NEW.id)
                ORDER BY p.seq DESC, p.id DESC LIMIT 1),
            coalesce(NEW.index_text, NEW.text),
            (SELECT coalesce(n.index_text, n.text) FROM episodes_turn n WHERE n.tenant_id = NEW.tenant_id
                AND n.episode_id = NEW.episode_id AND n.id <> NEW.id AND (n.seq, n.id) > (NEW.seq, NEW.id)
                ORDER BY n.seq, n.id LIMIT 1)
        ));
    ELSE
        NEW.window_vector := NULL;
    END IF;
    RETURN NEW;
END $$;
"""

NEIGHBOURS = """
CREATE OR REPLACE FUNCTION episodes_packed_turn_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = true
    WHERE tenant_id = NEW.tenant_id AND id IN (
        (SELECT p.id FROM episodes_turn p WHERE p.tenant_id = NEW.tenant_id AND p.episode_id = NEW.episode_id
            AND p.id <> NEW.id AND (p.seq, p.id) < (NEW.seq, NEW.id) ORDER BY p.seq DESC, p.id DESC LIMIT 1),
        (SELECT n.id FROM episodes_turn n WHERE n.tenant_id = NEW.tenant_id AND n.episode_id = NEW.episode_id
            AND n.id <> NEW.id AND (n.seq, n.id) > (NEW.seq, NEW.id) ORDER BY n.seq, n.id LIMIT 1)
    );
    RETURN NULL;
END $$;
"""

LAYER_TO_TURNS = """
CREATE OR REPLACE FUNCTION episodes_episode_layer_to_turns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = (NEW.layer IN ('warm', 'cold'))
        WHERE tenant_id = NEW.tenant_id AND episode_id = NEW.id
        AND packed IS DISTINCT FROM (NEW.layer IN ('warm', 'cold'));
    RETURN NULL;
END $$;
"""

# Reversed: the functions as migrations 0015, 0014 and 0008 left them.
TURN_PACKED_BEFORE = importlib.import_module("episodes.migrations.0015_languages").TURN_PACKED
NEIGHBOURS_BEFORE = """
CREATE OR REPLACE FUNCTION episodes_packed_turn_written() RETURNS trigger LANGUAGE plpgsql AS $$
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
"""
LAYER_TO_TURNS_BEFORE = """
CREATE OR REPLACE FUNCTION episodes_episode_layer_to_turns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE episodes_turn SET packed = (NEW.layer IN ('warm', 'cold'))
        WHERE episode_id = NEW.id AND packed IS DISTINCT FROM (NEW.layer IN ('warm', 'cold'));
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0022_help_texts"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="link", name="link_unique_triple"),
        migrations.AddConstraint(
            model_name="link",
            constraint=models.UniqueConstraint(
                fields=("tenant", "src", "dst", "kind"), name="link_unique_per_tenant"
            ),
        ),
        migrations.RunSQL(TURN_PACKED, TURN_PACKED_BEFORE),
        migrations.RunSQL(NEIGHBOURS, NEIGHBOURS_BEFORE),
        migrations.RunSQL(LAYER_TO_TURNS, LAYER_TO_TURNS_BEFORE),
    ]
