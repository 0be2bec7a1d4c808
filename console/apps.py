from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operators' console: Django's admin with the console's site, its dashboards and charts
    (docs/concepts.md#where-things-live). It holds no models: it shows the lifecycle's and the
    episodes' records and acts on them through their services."""

    name = "console"
