from django.core.management.base import BaseCommand

from lifecycle.tasks import schedule_ticks


class Command(BaseCommand):
    help = "Create or update the django-q2 schedules that tick every tenant at its policy's interval."

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        counts = schedule_ticks()
        changed = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        self.stdout.write(f"tick schedules: {changed}" if changed else "tick schedules: up to date")
