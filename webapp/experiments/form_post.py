"""What a posted config form holds: the YAML to save (``posted_yaml``: the YAML tab's text or
upload, or the form's fields merged onto the config it was rendered from) and, for a refused
post, the form again with the user's text kept (``refused_form``). The experiment form and the
fork form (``webapp.checkpoints.views.fork``) post the same fields, so both read them here.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from webapp.errors import ActionError
from webapp.experiments.config_policy import canonical_yaml, parse_yaml
from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import merge_form
from webapp.experiments.form_model import ExperimentForm


def posted_source(request: HttpRequest, default: str = "form") -> str:
    """``form`` or ``yaml``: the tab whose button saved (``default`` when none was pressed)."""
    return request.POST.get("source") or default


def posted_yaml(request: HttpRequest, default_source: str = "form") -> tuple[str, str]:
    """(the YAML to save, the tab it came from), from the YAML tab/upload or the merged form."""
    source = posted_source(request, default_source)
    if source == "yaml":
        upload = request.FILES.get("config_file")
        if upload is not None:
            raw = upload.read(settings.RFT_YAML_MAX_BYTES + 1)
            if len(raw) > settings.RFT_YAML_MAX_BYTES:
                raise ActionError(
                    f"the uploaded file is over {settings.RFT_YAML_MAX_BYTES // 1024} KB (RFT_YAML_MAX_BYTES)"
                )
            try:
                return raw.decode("utf-8"), "yaml"
            except UnicodeDecodeError as err:
                raise ActionError("the uploaded file is not UTF-8 text") from err
        return request.POST.get("config_yaml", ""), "yaml"
    base = parse_yaml(request.POST.get("base_yaml", ""), what="the form's base config")
    if not isinstance(base, dict):
        base = {}
    return canonical_yaml(named_after_experiment(merge_form(base, request.POST), request)), "form"


def named_after_experiment(data: dict[str, Any], request: HttpRequest) -> dict[str, Any]:
    """The form has no fields for the config's ``project`` and ``name``: the experiment's Name
    and Project (when posted) are written there, so a run's job dir is named after its
    experiment."""
    for key in ("project", "name"):
        value = dir_name(request.POST.get(f"experiment.{key}", ""))
        if value:
            data[key] = value
    return data


def dir_name(text: str) -> str:
    """``text`` as one directory name: letters, digits, ``_``, ``.``, ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.strip()).strip("._")[:100]


def refused_form(
    request: HttpRequest, fallback_yaml: str = "", default_source: str = "form"
) -> tuple[ExperimentForm, str, str]:
    """(the form, the YAML text, the tab) to show again after a refused save: the user's text
    kept, the form built from it where it parses (else from ``fallback_yaml``)."""
    source = posted_source(request, default_source)
    text = fallback_yaml
    data: Any = None
    try:
        text, _ = posted_yaml(request, default_source)
        data = parse_yaml(text)
    except ActionError:
        if source == "yaml":
            text = request.POST.get("config_yaml", "")
    if not isinstance(data, dict):
        try:
            data = parse_yaml(request.POST.get("base_yaml", "") or fallback_yaml)
        except ActionError:
            data = None
    form = build_form(data if isinstance(data, dict) else {})
    return form, text, "yaml" if source == "yaml" else "form"
