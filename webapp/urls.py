from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from webapp.accounts.views import home
from webapp.health.views import health_json, health_page

urlpatterns = [
    path("", home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("health/", health_page, name="health"),
    path("health.json", health_json, name="health-json"),
    path("api/health", health_json, name="api-health"),
    path("admin/", admin.site.urls),
]
