"""Django's admin with the console's site as ``admin.site`` (named in ``INSTALLED_APPS`` in place of
``django.contrib.admin``; its own module, since importing the console needs the app registry).

The admin modules are discovered with the URLs (``memory_platform/urls.py``), not when the apps
load: a management command then starts without importing the console and all it reads (the theme,
the search stack), and a web process imports them once, with its URLs, before it serves
(``memory_platform/wsgi.py``)."""

from django.contrib.admin.apps import SimpleAdminConfig


class ConsoleAdminConfig(SimpleAdminConfig):
    default_site = "console.site.ConsoleSite"
