from django.apps import AppConfig


class RightsConfig(AppConfig):
    """Data rights: export, import, erasure of a person or a tenant, and forgetting by filter
    (docs/concepts.md#where-the-code-lives). It holds no models: what it did is in the tenant's
    audit events and the lifecycle's journal."""

    name = "rights"
