"""How a path or a body names the tenant's episodes, for every app's views.

Writing and listing memories, turns, links, pinning and restoring are served by ``lifecycle.api``
(writes follow the tenant's policy and quota, pins move layers, a restore and a link's removal are
journaled), reading and forgetting one memory by ``retrieval.api``.
"""

from __future__ import annotations

from rest_framework.exceptions import NotFound

from memory_platform.tenancy.models import Tenant

from .. import public_ids, selectors


def not_found(reference: public_ids.Reference) -> NotFound:
    return NotFound(f"memory {reference} not found")


def episode_or_404(tenant: Tenant, reference: public_ids.Reference) -> selectors.Named:
    """The tenant's episode a path or a body names (forgotten ones included). Raises NotFound."""
    found = selectors.episodes_named(tenant, [reference]).get(reference)
    if found is None:
        raise not_found(reference)
    return found


def episodes_or_404(tenant: Tenant, references: list[public_ids.Reference]) -> list[selectors.Named]:
    """The tenant's episodes a body names, in order. Raises NotFound for the first it does not hold."""
    found = selectors.episodes_named(tenant, references)
    for reference in references:
        if reference not in found:
            raise not_found(reference)
    return [found[r] for r in references]
