"""An episode's layer and state (docs/concepts.md#layers, #states), as plain string enums.

They import nothing from Django, so the pure modules (the scores, the shapes) can use them; the
model's fields take their choices from here (``Layer.choices``, as Django's ``TextChoices`` give
them, with the same labels, so the migrations see no change).
"""

from __future__ import annotations

from enum import EnumMeta, StrEnum


class _Choices(EnumMeta):
    @property
    def values(cls) -> list[str]:
        return [member.value for member in cls]  # type: ignore[var-annotated]

    @property
    def choices(cls) -> list[tuple[str, str]]:
        return [(member.value, member.name.replace("_", " ").title()) for member in cls]  # type: ignore[var-annotated]


class Layer(StrEnum, metaclass=_Choices):
    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


class State(StrEnum, metaclass=_Choices):
    ACTIVE = "active"
    DORMANT = "dormant"
    DELETE_CANDIDATE = "delete_candidate"
    FORGOTTEN = "forgotten"
