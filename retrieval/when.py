"""Time expressions in a query ("last May", "in 2022", "two weeks ago", "on 7 May 2023") as
windows of time, relative to the caller's ``now``.

Search uses them as a boost on the times of the episodes (``ranking.time_factor``), never as a
filter. The phrases and their reading live in ``episodes.when``, which ingest reads too: a turn's
relative phrases are read there against the turn's own date.
"""

from episodes.when import Window, mention_window, windows

__all__ = ["Window", "mention_window", "windows"]
