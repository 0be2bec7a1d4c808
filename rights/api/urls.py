from django.urls import path

from . import views

urlpatterns = [
    path("forget", views.ForgetView.as_view(), name="forget"),
    path("export", views.ExportView.as_view(), name="export"),
    path("import", views.ImportView.as_view(), name="import"),
    path("tenant-data", views.TenantDataView.as_view(), name="tenant-data"),
]
