"""Django's users on the console's theme, a superuser's page (``console.navigation``); groups are
not offered: an operator's reach is the tenants they operate (``TenantOperator``) and the
permissions given to them, not a group."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import Group, User
from unfold.admin import ModelAdmin
from unfold.forms import AdminPasswordChangeForm, UserChangeForm, UserCreationForm

for model in (Group, User):
    if admin.site.is_registered(model):
        admin.site.unregister(model)


@admin.register(User)
class UserAdmin(DjangoUserAdmin, ModelAdmin):
    form = UserChangeForm
    add_form = UserCreationForm
    change_password_form = AdminPasswordChangeForm
