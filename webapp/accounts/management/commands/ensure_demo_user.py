"""Create the demo login once: a staff superuser with a generated password.

The password is printed once and written to ``var/demo_login.txt`` (mode 600, outside git).
Re-running makes no second user and no new password, but brings the file's ``url:`` line to the
address the stack serves on now (``RFT_WEB_PORT``, as ``scripts/stack.py`` and the Makefile read
it; ``--url`` overrides). If the file was deleted while the user exists, ``--reset-password``
makes a new one.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


def stack_url() -> str:
    """The address ``make demo`` serves on: ``RFT_WEB_PORT`` (default 8000) on 127.0.0.1."""
    return f"http://127.0.0.1:{os.environ.get('RFT_WEB_PORT', '8000')}/"


def update_url(path: Path, url: str) -> bool:
    """Point the login file's ``url:`` line at ``url``; True when it changed."""
    text = path.read_text()
    new = (
        re.sub(r"(?m)^url: .*$", f"url: {url}", text) if "url: " in text else f"url: {url}\n{text}"
    )
    if new == text:
        return False
    path.write_text(new)
    return True


class Command(BaseCommand):
    help = "Create the demo login (idempotent); the password goes to var/demo_login.txt"

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--login-file", default=str(settings.VAR_DIR / "demo_login.txt"))
        parser.add_argument("--reset-password", action="store_true", help="generate a new password")
        parser.add_argument(
            "--url", default=None, help="the stack's address (default: RFT_WEB_PORT)"
        )

    def handle(
        self,
        *args,
        username: str,
        login_file: str,
        reset_password: bool,
        url: str | None = None,
        **options,
    ) -> None:
        path = Path(login_file)
        url = url or stack_url()
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
            if path.exists() and update_url(path, url):
                where += f" (its url now {url})"
            self.stdout.write(f"demo login '{username}' already exists; {where}")
            return
        password = secrets.token_urlsafe(12)
        if user is None:
            user_model.objects.create_superuser(username=username, email="", password=password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"url: {url}\nusername: {username}\npassword: {password}\n")
        path.chmod(0o600)
        self.stdout.write(
            f"demo login created — username: {username}  password: {password}  (saved in {path})"
        )
