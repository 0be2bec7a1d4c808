"""The lifecycle's pages of the console (Django admin), one module per responsibility; importing
this package registers them."""

from .accounts import UserAdmin
from .episodes import EpisodeAdmin
from .policy import FIELDSETS, MemoryPolicyAdmin, MemoryPolicyForm
from .records import CandidateAdmin, JournalEntryAdmin, TickRunAdmin
from .tenants import TenantAdmin

__all__ = [
    "FIELDSETS",
    "CandidateAdmin",
    "EpisodeAdmin",
    "JournalEntryAdmin",
    "MemoryPolicyAdmin",
    "MemoryPolicyForm",
    "TenantAdmin",
    "TickRunAdmin",
    "UserAdmin",
]
