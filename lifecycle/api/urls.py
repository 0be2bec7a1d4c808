from django.urls import path

from episodes.api import converters as converters  # registers <memory:...>

from . import rights, views

urlpatterns = [
    path("memories", views.MemoriesView.as_view(), name="memories"),
    path("turns", views.TurnsView.as_view(), name="turns"),
    path("memories/<memory:episode_id>/anchor", views.MemoryAnchorView.as_view(), name="memory-anchor"),
    path("memories/<memory:episode_id>/links", views.MemoryLinksView.as_view(), name="memory-links"),
    path("memories/<memory:episode_id>/restore", views.MemoryRestoreView.as_view(), name="memory-restore"),
    path("forget", views.ForgetView.as_view(), name="forget"),
    path("stats", views.StatsView.as_view(), name="stats"),
    path("policy", views.PolicyView.as_view(), name="policy"),
    path("policy/preview", views.PolicyPreviewView.as_view(), name="policy-preview"),
    path("export", rights.ExportView.as_view(), name="export"),
    path("import", rights.ImportView.as_view(), name="import"),
    path("tenant-data", rights.TenantDataView.as_view(), name="tenant-data"),
]
