from typing import Any

from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from memory_platform import warmup
        from memory_platform.signals import redis_restarted
        from memory_platform.tenancy.models import Tenant

        from .indexing import drop_hot_on_tenant_delete
        from .language import chinese_tagged
        from .when import load_date_parser

        post_delete.connect(drop_hot_on_tenant_delete, sender=Tenant, dispatch_uid="episodes.drop_hot")
        redis_restarted.connect(_after_redis_restart, weak=False, dispatch_uid="episodes.after_redis_restart")
        # What a first write or search of Chinese text, or of a query naming a date, loads.
        warmup.register("jieba dictionary", lambda: chinese_tagged("记忆"))
        warmup.register("dateparser", load_date_parser)


def _after_redis_restart(sender: Any, **kwargs: Any) -> int:
    from .tasks import after_redis_restart  # the stores, loaded only when it happens

    return after_redis_restart(sender, **kwargs)
