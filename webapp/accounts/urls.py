"""``/account/``: the user's API tokens (list, create, revoke)."""

from django.urls import path

from webapp.accounts import views

app_name = "accounts"
urlpatterns = [
    path("", views.account, name="account"),
    path("tokens/new/", views.token_create, name="token-create"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
]
