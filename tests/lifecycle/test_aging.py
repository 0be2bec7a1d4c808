"""`evaluate locomo --age`: a conversation aged through ticks sits in the layers the policy says."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from episodes.models import Episode
from retrieval.evaluation.aging import age_conversation, compression_report, format_compression

from .factories import LONG, NOW, assert_consistent, conversation

pytestmark = pytest.mark.django_db(transaction=True)


def test_age_conversation_packs_older_sessions_and_reports_compression(provided):
    tenant = provided.tenant
    ages = [200, 60, 3]  # cold, warm, hot at NOW under the default policy (14 / 90 days)
    sessions = []
    ids = []
    for number, days in enumerate(ages, start=1):
        # Ingested as the harness does: every episode "last used" at the first session's date.
        pk = conversation(tenant, session=f"session_{number}", idle_days=days, seed=number, texts=LONG)
        first_session = NOW - timedelta(days=ages[0])
        Episode.objects.across_tenants("test").filter(pk=pk).update(last_accessed_at=first_session)
        sessions.append((number, NOW - timedelta(days=days), []))
        ids.append(pk)

    stats = age_conversation(tenant, SimpleNamespace(sample_id="conv-x", sessions=sessions), NOW)

    assert [Episode.objects.across_tenants("test").get(pk=pk).layer for pk in ids] == ["cold", "warm", "hot"]
    assert stats["ticks"] == 4 and stats["tick_errors"] == 0
    assert stats["layers"] == {"cold": 1, "warm": 1, "hot": 1}
    assert_consistent(tenant)
    report = compression_report([stats])
    assert report["hot_to_warm"]["n"] == 2 and report["warm_to_cold"]["n"] == 1
    assert report["hot_to_warm"]["min"] > 1 and report["warm_to_cold"]["min"] > 1
    assert report["entities_in_warm"]["share"] == 1.0 and report["decisions_in_warm"]["share"] == 1.0
    assert report["entities_in_warm"]["total"] > 0
    text = format_compression(report)
    assert "hot -> warm" in text and "warm -> cold" in text and "entities" in text
