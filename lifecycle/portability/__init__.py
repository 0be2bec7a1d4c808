"""A tenant's memory out and in (issue 19): the export format (``records``), streaming it
(``export``), and taking it back or moving in from elsewhere (``imports``, ``sources``)."""
