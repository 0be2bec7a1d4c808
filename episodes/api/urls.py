from django.urls import path

from . import converters as converters  # registers <memory:...>
from . import views

urlpatterns = [
    path("memories/<memory:episode_id>/links", views.MemoryLinksView.as_view(), name="memory-links"),
]
