"""The names of the tables the stores' statements read, taken from the models (never typed twice)."""

from __future__ import annotations

from episodes.models import Episode, Link, Turn
from memory_platform.tenancy.models import Tenant

EPISODES = Episode._meta.db_table
TURNS = Turn._meta.db_table
LINKS = Link._meta.db_table
TENANTS = Tenant._meta.db_table
