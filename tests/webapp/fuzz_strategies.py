"""Hypothesis strategies and row counts shared by the fuzz tests (test_fuzz_api.py,
test_fuzz_forms.py): random JSON, config-shaped mappings, the demo config with one value
mutated, and YAML texts from random to hostile (aliases, billion laughs, deep nesting, over the
size limit, Python tags)."""

from __future__ import annotations

import json

import yaml
from demo_rows import DEMO_YAML
from django.conf import settings
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from webapp.audit.models import AuditEvent
from webapp.experiments.models import Experiment, ExperimentVersion, Tag
from webapp.runs.models import Run

FUZZ = hsettings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DEMO = yaml.safe_load(DEMO_YAML)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=25,
)
# The config's own keys, so random mappings reach past "unknown key" into type checks.
config_keys = st.sampled_from(
    ["project", "name", "mode", "algorithm", "model", "buffer", "explorer", "trainer", "stages",
     "synchronizer", "monitor", "cluster", "checkpoint_root_dir", "model_path", "batch_size",
     "total_steps", "algorithm_type", "path", "taskset", "engine_type", "lr"]
)  # fmt: skip
config_like = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(config_keys, inner, max_size=5),
    max_leaves=30,
)


def _mutated_demo(draw) -> dict:
    """The demo config with one value somewhere replaced by a random one (a type confusion, a
    path outside the roots, an interpolation, a removed section)."""
    config = json.loads(json.dumps(DEMO))
    node = config
    path = []
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        path.append(key)
        if not isinstance(node[key], dict):
            break
        node = node[key]
    if isinstance(node, dict):
        key = draw(st.sampled_from(sorted(node) or ["x"]))
        replacement = draw(
            json_values
            | st.sampled_from(
                [
                    "/etc/passwd",
                    "../../../../etc",
                    "${oc.env:SECRET_KEY}",
                    "${oc.env:DATABASE_URL,x}",
                    "${oc.decode:'{a: 1}'}",
                    "os.system",
                    "rft_core.cli.main",
                    -1,
                    0,
                    1e308,
                    "",
                    [],
                ]
            )  # fmt: skip
        )
        if draw(st.booleans()) or key == "x":
            node[key] = replacement
        else:
            node.pop(key, None)
    return config


@st.composite
def mutated_demo(draw) -> dict:
    return _mutated_demo(draw)


BILLION_LAUGHS = (
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
)
yaml_texts = st.one_of(
    st.text(max_size=300),
    config_like.map(lambda v: yaml.safe_dump(v, sort_keys=False)),
    mutated_demo().map(lambda v: yaml.safe_dump(v, sort_keys=False)),
    st.sampled_from(
        [
            "a: &a [1, 2]\nb: [*a, *a, *a]\n",
            BILLION_LAUGHS,
            "a: &a\n  b: *a\n",  # recursive alias
            "[" * 5000 + "]" * 5000,  # deep flow sequence
            "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 400)),  # deep mapping
            "x: " + "y" * (settings.RFT_YAML_MAX_BYTES + 10),  # over the size limit
            "!!python/object/apply:os.system ['true']",
            "project: !!binary aGVsbG8=\n",
            DEMO_YAML.replace("mode: both", "mode: [both"),
            DEMO_YAML + "\nunknown_section: {a: 1}\n",
            DEMO_YAML.replace("lr: 3e-5", "lr: 1.0e999"),  # inf: no JSON column takes it
            DEMO_YAML.replace("temperature: 1.0", "temperature: .nan", 1),
            "\x00\x01\ufffe",
        ]
    ),
)
names = st.one_of(
    st.text(max_size=250), st.sampled_from(["", " ", "x" * 201, "ok-name"]), json_values
)
plain_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)
tag_lists = st.lists(st.text(min_size=1, max_size=20), max_size=5)
configs = st.one_of(mutated_demo(), mutated_demo(), st.dictionaries(config_keys, config_like))
# Well-typed bodies get past the shape check into the actions (config checks, names, tags);
# the rest are random JSON of any shape, and type confusions of each field.
well_typed_create = st.one_of(
    st.fixed_dictionaries(
        {"name": plain_names, "config_yaml": yaml_texts},
        optional={"project": st.text(max_size=30), "tags": tag_lists},
    ),
    st.fixed_dictionaries(
        {"name": plain_names, "config": configs},
        optional={"description": st.text(max_size=30), "tags": tag_lists},
    ),
)
create_bodies = st.one_of(
    well_typed_create,
    well_typed_create,
    json_values,
    st.fixed_dictionaries(
        {"name": names},
        optional={
            "config_yaml": st.one_of(yaml_texts, json_values),
            "config": st.one_of(config_like, mutated_demo(), json_values),
            "project": st.one_of(st.text(max_size=250), json_values),
            "description": st.one_of(st.text(max_size=50), json_values),
            "tags": st.one_of(st.lists(st.text(max_size=70), max_size=60), json_values),
        },
    ),
)
well_typed_update = st.one_of(
    st.fixed_dictionaries({"config_yaml": yaml_texts}, optional={"note": st.text(max_size=30)}),
    st.fixed_dictionaries({"config": configs}, optional={"name": plain_names}),
    st.fixed_dictionaries({"name": plain_names}, optional={"tags": tag_lists}),
)
update_bodies = st.one_of(
    well_typed_update,
    well_typed_update,
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "name": names,
            "config_yaml": st.one_of(yaml_texts, json_values),
            "config": st.one_of(config_like, mutated_demo(), json_values),
            "tags": st.one_of(st.lists(st.text(max_size=70), max_size=60), json_values),
            "note": st.one_of(st.text(max_size=250), json_values),
        },
    ),
)


def row_counts() -> dict[str, int]:
    return {
        "experiments": Experiment.objects.count(),
        "versions": ExperimentVersion.objects.count(),
        "tags": Tag.objects.count(),
        "runs": Run.objects.count(),
        "audit": AuditEvent.objects.exclude(action="permission.denied").count(),
    }


# ---------------------------------------------------------------- valid form posts
def numeric_form_fields() -> dict[str, tuple[str, float]]:
    """The experiment form's number fields that the demo config sets to a positive value:
    name -> (kind, value). Varying one within [value / 2, value * 2] keeps the config valid."""
    from webapp.experiments.form_build import build_form

    found = {}
    for f in build_form(DEMO).fields():
        if f.kind not in ("integer", "number"):
            continue
        try:
            value = float(f.text)
        except ValueError:
            continue
        if value > 0 and value == value and value != float("inf"):
            found[f.name] = (f.kind, value)
    return found


def _number_text(kind: str, value: float, draw) -> str:
    if kind == "integer":
        low = max(1, int(value) // 2)
        return str(draw(st.integers(low, max(low, int(value) * 2))))
    return repr(value * draw(st.floats(0.5, 2.0)))


safe_names = st.text(
    st.characters(categories=["L", "N"], include_characters="-_ ."), min_size=1, max_size=30
).filter(lambda s: s.strip())


@st.composite
def valid_form_changes(draw, numeric: dict[str, tuple[str, float]]) -> dict[str, str]:
    """What a user changes in a well-filled new-experiment form: a name, a project, tags, a
    description, and up to three of the numbers within a factor of two of the demo's."""
    changes = {
        "experiment.name": draw(safe_names).strip(),
        "experiment.project": draw(st.one_of(st.just(""), safe_names)).strip(),
        "experiment.tags": ", ".join(draw(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True), max_size=3))),
        "experiment.description": draw(st.text(st.characters(exclude_characters="\x00"), max_size=80)),
    }  # fmt: skip
    for name in draw(st.lists(st.sampled_from(sorted(numeric)), max_size=3, unique=True)):
        kind, value = numeric[name]
        changes[name] = _number_text(kind, value, draw)
    return changes


not_a_number = st.sampled_from(["abc", "1e999", "nan", "-inf", "[1, 2", "{a: 1}", "1..2"])
