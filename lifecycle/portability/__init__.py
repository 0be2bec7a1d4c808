"""A tenant's memory out and in (docs/decisions/0030-data-rights.md): the export format (``records``),
streaming it (``export``), and taking it back or moving in from elsewhere (``imports``, ``sources``)."""
