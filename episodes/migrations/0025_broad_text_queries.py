"""The broad full-text queries of warm and cold search as functions Postgres evaluates while it
plans (docs/decisions/0061-the-planner-reads-the-words.md).

``episodes.stores.archive.text_search`` matches a question's words in two passes; the broad one
asks for any one word (a small tenant) or any two (a large one). Built in the statement by an
aggregate over the query's lexemes, that tsquery is unknown when the statement is planned, so
Postgres estimates its matches at a fixed 0.5% of the table's packed turns: in a database of many
tenants thousands, for questions that match a few dozen. It then ANDs the full-text index with a
bitmap of every packed turn of the tenant from the ``tenant_id`` B-tree, which grows with the
tenant (7-9 ms at 100,000 packed turns). These functions are IMMUTABLE, like ``to_tsvector`` with
a configuration, so with the text known (a statement's parameters are) the planner computes the
tsquery first and estimates its matches from the column's statistics.
"""

from django.db import migrations

FUNCTIONS = """
CREATE OR REPLACE FUNCTION episodes_any_word_query(config regconfig, text text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NULLIF(string_agg(quote_literal(l), ' | '), '')::tsquery
    FROM unnest(tsvector_to_array(to_tsvector(config, text))) l
$$;
CREATE OR REPLACE FUNCTION episodes_word_pairs_query(config regconfig, text text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NULLIF(string_agg(quote_literal(a) || ' & ' || quote_literal(b), ' | '), '')::tsquery
    FROM (SELECT tsvector_to_array(to_tsvector(config, text)) AS ls) x, unnest(x.ls) a, unnest(x.ls) b
    WHERE a < b
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS episodes_any_word_query(regconfig, text);
DROP FUNCTION IF EXISTS episodes_word_pairs_query(regconfig, text);
"""


class Migration(migrations.Migration):
    dependencies = [("episodes", "0024_vectors_stored_inline")]

    operations = [migrations.RunSQL(FUNCTIONS, reverse_sql=DROP)]
