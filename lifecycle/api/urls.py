from django.urls import path

from episodes.api import converters as converters  # registers <memory:...>

from . import candidates, memories, views

urlpatterns = [
    path("memories", views.MemoriesView.as_view(), name="memories"),
    path("memories/<memory:episode_id>", memories.MemoryDetailView.as_view(), name="memory-detail"),
    path("memories/<memory:episode_id>/unpack", memories.UnpackView.as_view(), name="memory-unpack"),
    path("turns", views.TurnsView.as_view(), name="turns"),
    path("memories/<memory:episode_id>/anchor", views.MemoryAnchorView.as_view(), name="memory-anchor"),
    path("memories/<memory:episode_id>/links", views.MemoryLinksView.as_view(), name="memory-links"),
    path("memories/<memory:episode_id>/restore", views.MemoryRestoreView.as_view(), name="memory-restore"),
    path("stats", views.StatsView.as_view(), name="stats"),
    path("policy", views.PolicyView.as_view(), name="policy"),
    path("policy/preview", views.PolicyPreviewView.as_view(), name="policy-preview"),
    path("candidates", candidates.CandidatesView.as_view(), name="candidates"),
    path(
        "candidates/<str:candidate_id>/approve",
        candidates.CandidateApproveView.as_view(),
        name="candidate-approve",
    ),
    path(
        "candidates/<str:candidate_id>/reject",
        candidates.CandidateRejectView.as_view(),
        name="candidate-reject",
    ),
]
