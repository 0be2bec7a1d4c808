from django.urls import path

from . import views

urlpatterns = [
    path("turns", views.TurnsView.as_view(), name="turns"),
    path("memories", views.MemoriesView.as_view(), name="memories"),
    path("memories/<int:episode_id>", views.MemoryDetailView.as_view(), name="memory-detail"),
    path("memories/<int:episode_id>/restore", views.MemoryRestoreView.as_view(), name="memory-restore"),
    path("memories/<int:episode_id>/anchor", views.MemoryAnchorView.as_view(), name="memory-anchor"),
    path("memories/<int:episode_id>/links", views.MemoryLinksView.as_view(), name="memory-links"),
]
