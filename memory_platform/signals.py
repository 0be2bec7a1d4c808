"""Signals the ground floor sends for the apps above it to act on."""

from django.dispatch import Signal

#: The Redis behind the hot tier was started again after it died (``manage.py services
#: supervise``). Sent with ``since``, an aware datetime: the writes it acknowledged from then on may
#: be lost with it, and are to be written again.
redis_restarted = Signal()
