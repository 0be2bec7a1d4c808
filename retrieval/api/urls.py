from django.urls import path

from episodes.api import converters as converters  # registers <memory:...>

from . import views

urlpatterns = [
    path("memories/<memory:episode_id>", views.MemoryDetailView.as_view(), name="memory-detail"),
    path("memories/<memory:episode_id>/unpack", views.UnpackView.as_view(), name="memory-unpack"),
    path("search", views.SearchView.as_view(), name="search"),
    path("activate", views.ActivateView.as_view(), name="activate"),
    path("context", views.ContextView.as_view(), name="context"),
    path("feedback", views.FeedbackView.as_view(), name="feedback"),
]
