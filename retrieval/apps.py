from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
