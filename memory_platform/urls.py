from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from memory_platform.api import health
from memory_platform.api.views import WhoAmIView
from memory_platform.mcp.endpoint import McpView

# The console's pages register here, with the URLs (console/admin_config.py says why).
admin.autodiscover()

api_v1 = [
    path("whoami", WhoAmIView.as_view(), name="whoami"),
    path("", include("retrieval.api.urls")),
    path("", include("lifecycle.api.urls")),
    path("", include("rights.api.urls")),
]

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("console.urls")),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),  # type: ignore[arg-type]
    path("mcp", McpView.as_view(), name="mcp"),
]

handler400 = "memory_platform.api.errors.handler400"
handler403 = "memory_platform.api.errors.handler403"
handler404 = "memory_platform.api.errors.handler404"
handler500 = "memory_platform.api.errors.handler500"
