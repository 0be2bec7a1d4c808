import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
application = get_wsgi_application()
# The URLs, the views and the console's pages are imported now, not by the first request: under
# gunicorn's --preload once in the master, before the workers fork (no model runs here).
_ = get_resolver().url_patterns
