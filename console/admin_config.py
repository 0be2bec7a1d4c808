"""Django's admin with the console's site as ``admin.site`` (named in ``INSTALLED_APPS`` in place of
``django.contrib.admin``; its own module, since importing the console needs the app registry)."""

from django.contrib.admin.apps import AdminConfig


class ConsoleAdminConfig(AdminConfig):
    default_site = "console.site.ConsoleSite"
