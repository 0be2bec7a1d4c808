"""Updates: a newer memory that states a new value of what an older memory of the same owner says
supersedes it ("we decided on Arroios in the end, not Alfama" after "we are leaning towards
Alfama"; docs/decisions/0044-updates-above-what-they-replace.md).

Found at ingest, in the turns just written: a sentence that says a value changed or a choice was
made (``episodes.extraction.extract_changes``) names an entity that an older episode of the same
tenant, user and agent names too (its words, as full text reads them: "Сбербанке" names
"Сбербанка"), and that few of the owner's episodes name (a speaker's name, in every episode,
relates nothing). Each (newer, older) pair becomes a ``supersedes`` link, journaled
on the older episode: rolling the entry back removes the link, and a pair rolled back is not
linked again. Nothing else changes: the older memory keeps every word and decision, and search
ranks it right below the newer one when both are found (``retrieval.ranking``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from episodes.extraction import extract_changes, extract_entities
from episodes.models import Episode, Link, LinkKind
from episodes.services import IngestResult, TurnInput
from episodes.stores import rows
from memory_platform.tenancy.models import Tenant

from .journal import journal_record
from .models import JournalEntry

logger = logging.getLogger(__name__)

#: An entity more of the owner's other episodes name than this says nothing of one subject.
RARE = 3
#: The journal's action for a link made here.
ACTION = "supersede"


@dataclass(frozen=True)
class Written:
    """A turn just written: its episode, its text and when it was said."""

    episode_id: int
    text: str
    occurred_at: datetime


def changed_names(
    changes: Sequence[tuple[Written, Sequence[str]]], entities: Mapping[int, Sequence[str]]
) -> dict[int, dict[str, datetime]]:
    """Per episode, the entities its turns' change sentences (``changes``: each written turn with
    them) name, with the last time each was said: an older episode may be superseded only by what
    was said after it. A sentence's names are those it names of its episode's entities (read over
    all its turns: "Lily" opening a sentence is a name where another sentence names her), and its
    own."""
    out: dict[int, dict[str, datetime]] = {}
    for turn, sentences in changes:
        for sentence in sentences:
            said = out.setdefault(turn.episode_id, {})
            known = [name for name in entities.get(turn.episode_id, ()) if name in sentence]
            for name in dict.fromkeys([*known, *extract_entities(sentence)]):
                said[name] = max(said.get(name, turn.occurred_at), turn.occurred_at)
    return out


def superseded_pairs(tenant: Tenant, written: Sequence[Written]) -> dict[tuple[int, int], list[str]]:
    """(newer, older) episode pairs the written turns make, with the names that tie them."""
    # Each turn's change sentences are read once; most writes state none, and read nothing more.
    changes = [(turn, found) for turn in written if (found := extract_changes(turn.text))]
    if not changes:
        return {}
    episodes = Episode.objects.visible().filter(
        tenant=tenant, pk__in={turn.episode_id for turn, _ in changes}
    )
    owners = {
        pk: (user_id, agent_id, entities)
        for pk, user_id, agent_id, entities in episodes.values_list("pk", "user_id", "agent_id", "entities")
    }
    names = changed_names(changes, {pk: owner[2] for pk, owner in owners.items()})
    pairs: dict[tuple[int, int], list[str]] = {}
    for newer, said in names.items():
        if newer not in owners or not said:
            continue
        user_id, agent_id, _ = owners[newer]
        # RARE others, the episode itself, and one more to tell a rare name from a common one.
        holders = rows.name_holders(
            tenant, {"user_id": user_id, "agent_id": agent_id}, list(said), limit=RARE + 2
        )
        for name, held in holders.items():
            others = [(pk, last) for pk, last in held if pk != newer]
            if len(others) > RARE:
                continue
            for older, last in others:
                if last < said[name]:
                    pairs.setdefault((newer, older), []).append(name)
    return pairs


def _rolled_back(tenant: Tenant, older: Sequence[int]) -> set[tuple[int, int]]:
    """The pairs an operator unlinked by rolling back their entry (journal_tenant_episode)."""
    entries = JournalEntry.objects.filter(
        tenant=tenant, action=ACTION, episode_id_value__in=list(older), rolled_back_at__isnull=False
    ).values_list("after", flat=True)
    return {(src, dst) for after in entries for src, dst, _ in (after or {}).get("links_created", [])}


def updates_link(*, tenant: Tenant, written: Sequence[Written], now: datetime, actor: str = "ingest") -> int:
    """Link each older memory the written turns supersede, journaled; returns the links made."""
    pairs = superseded_pairs(tenant, written)
    if not pairs:
        return 0
    refused = _rolled_back(tenant, sorted({older for _, older in pairs}))
    ids = {pk for pair in pairs for pk in pair}
    made = 0
    with transaction.atomic():
        named = Episode.objects.filter(tenant=tenant, pk__in=ids).only("pk", "public_id", "tenant_id")
        episodes = {e.pk: e for e in named}
        for (newer, older), shared in sorted(pairs.items()):
            if (newer, older) in refused or newer not in episodes or older not in episodes:
                continue
            _, created = Link.objects.get_or_create(
                tenant=tenant,
                src_id=newer,
                dst_id=older,
                kind=LinkKind.SUPERSEDES,
                defaults={"created_at": now},
            )
            if not created:
                continue
            journal_record(
                tenant=tenant,
                episode=episodes[older],
                action=ACTION,
                before={},
                after={
                    "links_created": [[newer, older, LinkKind.SUPERSEDES.value]],
                    "superseded_by": episodes[newer].public_id,
                    "entities": shared,
                },
                now=now,
                actor=actor,
            )
            made += 1
    return made


def written_of(turns: Sequence[TurnInput], result: IngestResult, now: datetime) -> list[Written]:
    """The turns an ingest wrote (``result.turns`` is in the order of ``turns``)."""
    return [
        Written(made.episode_id, turn.text, turn.occurred_at or now)
        for turn, made in zip(turns, result.turns, strict=True)
    ]


def updates_after_write(*, tenant: Tenant, written: Sequence[Written], now: datetime, actor: str) -> int:
    """``updates_link`` once a write is durable. A failure is logged, not raised: the memory is
    stored, and an error here would have the client send it again."""
    try:
        return updates_link(tenant=tenant, written=written, now=now, actor=actor)
    except Exception:
        logger.exception("could not link the updates of tenant %s's new memory", tenant.name)
        return 0
