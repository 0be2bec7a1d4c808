from django.urls import path

from . import views

urlpatterns = [
    path("search", views.SearchView.as_view(), name="search"),
    path("activate", views.ActivateView.as_view(), name="activate"),
    path("context", views.ContextView.as_view(), name="context"),
    path("feedback", views.FeedbackView.as_view(), name="feedback"),
]
