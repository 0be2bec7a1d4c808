from django.urls import path

from . import views

urlpatterns = [
    path("memories/<int:episode_id>/restore", views.MemoryRestoreView.as_view(), name="memory-restore"),
    path("memories/<int:episode_id>/links", views.MemoryLinksView.as_view(), name="memory-links"),
]
