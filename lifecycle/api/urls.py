from django.urls import path

from . import views

urlpatterns = [
    path("forget", views.ForgetView.as_view(), name="forget"),
]
