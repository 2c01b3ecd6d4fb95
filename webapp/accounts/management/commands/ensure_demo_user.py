"""Create the demo login once: a staff superuser with a generated password.

The password is printed once and written to ``var/demo_login.txt`` (mode 600, outside git).
Re-running changes nothing: no second user, no new password. If the file was deleted while the
user exists, ``--reset-password`` makes a new one.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo login (idempotent); the password goes to var/demo_login.txt"

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--login-file", default=str(settings.VAR_DIR / "demo_login.txt"))
        parser.add_argument("--reset-password", action="store_true", help="generate a new password")

    def handle(
        self, *args, username: str, login_file: str, reset_password: bool, **options
    ) -> None:
        path = Path(login_file)
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is not None and not reset_password:
            where = (
                f"its password is in {path}"
                if path.exists()
                else (
                    f"{path} is missing; run `python manage.py ensure_demo_user --reset-password`"
                )
            )
            self.stdout.write(f"demo login '{username}' already exists; {where}")
            return
        password = secrets.token_urlsafe(12)
        if user is None:
            user_model.objects.create_superuser(username=username, email="", password=password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"url: http://127.0.0.1:8000/\nusername: {username}\npassword: {password}\n"
        )
        path.chmod(0o600)
        self.stdout.write(
            f"demo login created — username: {username}  password: {password}  (saved in {path})"
        )
