"""Config loading: the seed's YAML, interpolation, overrides, aliases, derived values, stages,
round trips, JSON schema and the generated reference."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from omegaconf import OmegaConf
from run_configs import dry_run, minimal_config

from rft_core.config import (
    config_to_dict,
    config_to_yaml,
    json_schema,
    load_config,
    load_config_from_dict,
    resolve_stages,
)
from rft_core.config.reference import reference_yaml
from rft_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "grpo_gsm8k" / "gsm8k.yaml"
SEED_SFT = ROOT / "examples" / "grpo_gsm8k" / "gsm8k_sft_warmup.yaml"

MINIMAL = minimal_config()


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_seed_gsm8k_loads_with_its_values(clean_env):
    cfg = load_config(SEED)
    assert cfg.mode == "both"
    assert (cfg.project, cfg.name) == ("<project_name>", "<experiment_name>")
    assert cfg.checkpoint_root_dir == "./checkpoints"
    assert cfg.algorithm.algorithm_type == "grpo"
    assert cfg.algorithm.repeat_times == 8
    assert cfg.algorithm.optimizer.lr == pytest.approx(
        1e-5
    )  # YAML 1.1 reads 1e-5 as a string; we don't
    assert cfg.model.model_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert (cfg.model.max_model_len, cfg.model.max_response_tokens) == (2048, 1024)
    assert cfg.model.max_prompt_tokens == 1024  # derived: 2048 - 1024
    assert (cfg.cluster.node_num, cfg.cluster.gpu_per_node) == (1, 2)
    assert cfg.buffer.batch_size == 128
    assert cfg.buffer.train_batch_size == 128 * 8
    ts = cfg.buffer.explorer_input.taskset
    assert (ts.name, ts.path, ts.subset_name, ts.split) == (
        "gsm8k",
        "openai/gsm8k",
        "main",
        "train",
    )
    assert (ts.format.prompt_key, ts.format.response_key) == ("question", "answer")
    assert ts.rollout_args.temperature == 1.0 and ts.rollout_args.n == 8
    assert ts.rollout_args.max_tokens == 1024
    (ev,) = cfg.buffer.explorer_input.eval_tasksets
    assert (ev.name, ev.split, ev.repeat_times, ev.rollout_args.n) == ("gsm8k-eval", "test", 1, 1)
    eb = cfg.buffer.trainer_input.experience_buffer
    assert (eb.name, eb.storage_type, eb.path) == ("gsm8k_buffer", "queue", "sqlite:///gsm8k.db")
    assert (cfg.explorer.eval_interval, cfg.explorer.runner_per_model) == (50, 16)
    assert cfg.explorer.rollout_model.engine_num == 1
    assert (cfg.synchronizer.sync_method, cfg.synchronizer.sync_interval) == ("nccl", 1)
    assert cfg.trainer.save_interval == 100
    assert cfg.job_dir == Path("./checkpoints/<project_name>/<experiment_name>")
    assert [t.name for t in cfg.tasksets] == ["gsm8k"]
    # the preset fills what the seed leaves to algorithm_type
    assert cfg.algorithm.advantage_fn == "grpo" and cfg.algorithm.policy_loss_fn == "ppo"
    assert cfg.algorithm.kl_loss_fn == "k2" and cfg.algorithm.kl_loss_fn_args["kl_coef"] == 0.001


def test_env_variables_fill_the_seed(clean_env, tmp_path):
    clean_env.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    clean_env.setenv("TRINITY_MODEL_PATH", "/models/qwen")
    clean_env.setenv("TRINITY_TASKSET_PATH", "/data/gsm8k")
    cfg = load_config(SEED)
    assert cfg.model.model_path == "/models/qwen"
    assert cfg.buffer.explorer_input.taskset.path == "/data/gsm8k"
    assert cfg.buffer.explorer_input.eval_tasksets[0].path == "/data/gsm8k"
    assert cfg.job_dir == tmp_path / "ckpt" / "<project_name>" / "<experiment_name>"


def test_seed_with_sft_warmup_resolves_two_stages(clean_env):
    cfg = load_config(SEED_SFT)
    sft, rft = resolve_stages(cfg)
    assert sft.job_dir == Path("./checkpoints/<project_name>/<experiment_name>/sft_warmup")
    assert rft.job_dir == Path("./checkpoints/<project_name>/<experiment_name>/rft")
    assert (sft.stage_name, sft.mode, sft.algorithm.algorithm_type) == (
        "sft_warmup",
        "train",
        "sft",
    )
    assert (sft.buffer.train_batch_size, sft.buffer.total_steps) == (128, 10)
    eb = sft.buffer.trainer_input.experience_buffer
    assert (eb.name, eb.storage_type) == (
        "sft_warmup_dataset",
        "file",
    )  # derived: train mode reads a file
    # the global nccl was written for mode both; the train stage syncs by checkpoint
    assert sft.synchronizer.sync_method == "checkpoint"
    assert sft.algorithm.repeat_times == 1 and sft.algorithm.policy_loss_fn == "sft"
    assert (rft.mode, rft.algorithm.algorithm_type, rft.buffer.train_batch_size) == (
        "both",
        "grpo",
        1024,
    )
    assert rft.synchronizer.sync_method == "nccl"
    assert rft.buffer.trainer_input.experience_buffer.storage_type == "queue"


def test_a_stage_section_replaces_the_global_one():
    d = dict(
        MINIMAL, algorithm={"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 3e-5}}
    )
    d["stages"] = [
        {"stage_name": "one", "algorithm": {"algorithm_type": "rloo"}},
        {"stage_name": "two"},
    ]
    one, two = resolve_stages(load_config_from_dict(d))
    # stage one's algorithm is rloo with rloo's own defaults, not the global lr or group size
    assert one.algorithm.algorithm_type == "rloo"
    assert one.algorithm.repeat_times == 4  # rloo's preset, not inherited
    assert one.algorithm.optimizer.lr == pytest.approx(1e-6)
    assert two.algorithm.optimizer.lr == pytest.approx(3e-5)
    # derived values are computed per stage from what was written
    assert one.buffer.train_batch_size == 4 * 4 and two.buffer.train_batch_size == 4 * 4
    assert one.buffer.explorer_input.taskset.rollout_args.n == 4


def test_derived_train_batch_size_follows_the_stage_group_size():
    d = dict(MINIMAL, algorithm={"algorithm_type": "grpo", "repeat_times": 8})
    d["stages"] = [
        {"stage_name": "small", "algorithm": {"algorithm_type": "grpo", "repeat_times": 2}}
    ]
    (small,) = resolve_stages(load_config_from_dict(d))
    assert small.buffer.train_batch_size == 4 * 2


def test_interpolation_reaches_written_and_default_values(monkeypatch):
    monkeypatch.setenv("RFT_TEST_LR", "0.002")
    d = dict(MINIMAL)
    d["name"] = "${project}-run"  # project is not written: its default is used
    d["algorithm"] = {"optimizer": {"lr": "${oc.env:RFT_TEST_LR,1e-6}"}}
    d["trainer"] = {"max_token_len_per_gpu": "${model.max_model_len}"}
    cfg = load_config_from_dict(d)
    assert cfg.name == "Trinity-RFT-run"
    assert cfg.algorithm.optimizer.lr == pytest.approx(0.002)
    assert cfg.trainer.max_token_len_per_gpu == 256


def test_env_default_is_used_when_unset(monkeypatch):
    monkeypatch.delenv("RFT_TEST_BATCH", raising=False)
    d = dict(MINIMAL)
    d["buffer"] = dict(MINIMAL["buffer"], batch_size="${oc.env:RFT_TEST_BATCH,16}")
    assert load_config_from_dict(d).buffer.batch_size == 16


def test_overrides_apply_on_top_of_the_file(clean_env):
    cfg = load_config(
        SEED,
        [
            "buffer.batch_size=8",
            "algorithm.repeat_times=4",
            "buffer.explorer_input.eval_tasksets.0.split=validation",
            "trainer.save_interval=5",
        ],
    )
    assert cfg.buffer.batch_size == 8
    assert cfg.buffer.train_batch_size == 32
    assert cfg.buffer.explorer_input.eval_tasksets[0].split == "validation"
    assert cfg.trainer.save_interval == 5


def test_an_override_with_a_typo_names_its_path(clean_env):
    with pytest.raises(ConfigError) as info:
        load_config(SEED, ["buffer.batchsize=8"])
    assert info.value.path == "buffer.batchsize"
    assert "did you mean 'batch_size'?" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(SEED, ["buffer.batch_size"])
    assert "section.key=value" in str(info.value)


def test_an_override_whose_value_is_not_yaml_says_so_and_how_to_quote_it(clean_env):
    with pytest.raises(ConfigError) as info:
        load_config(SEED, ["buffer.batch_size={"])
    assert info.value.path == "buffer.batch_size"
    message = str(info.value)
    assert "the value '{' is not valid YAML (did not find expected node content)" in message
    assert "e.g. buffer.batch_size='\"{\"'" in message
    assert "<unicode string>" not in message  # not the YAML parser's own position text


def test_enums_are_case_insensitive_and_aliases_map():
    d = dict(MINIMAL, mode="Both")
    d["synchronizer"] = {"sync_method": "ONLINE", "sync_style": "dynamic_by_explorer"}
    d["algorithm"] = {"algorithm_type": "GRPO", "optimizer": {"lr_scheduler_type": "Cosine"}}
    cfg = load_config_from_dict(d)
    assert cfg.mode == "both"
    assert cfg.synchronizer.sync_method == "nccl"
    assert cfg.synchronizer.sync_style == "explorer_driven"
    assert cfg.algorithm.algorithm_type == "grpo"
    assert cfg.algorithm.optimizer.lr_scheduler_type == "cosine"
    d["mode"], d["synchronizer"] = "explore", {"sync_method": "offline"}
    assert load_config_from_dict(d).synchronizer.sync_method == "checkpoint"


@pytest.mark.parametrize(
    ("mode", "extra", "expected"),
    [
        ("both", {}, "nccl"),
        ("colocate", {}, "memory"),
        ("explore", {}, "checkpoint"),
        (
            "bench",
            {
                "eval_tasksets": [
                    {"name": "t", "path": "/d", "format": {"prompt_key": "q", "response_key": "a"}}
                ]
            },
            "checkpoint",
        ),
    ],
)
def test_sync_method_default_follows_the_mode(mode, extra, expected):
    d = dict(MINIMAL, mode=mode)
    d["buffer"] = dict(MINIMAL["buffer"])
    d["buffer"]["explorer_input"] = dict(MINIMAL["buffer"]["explorer_input"], **extra)
    assert load_config_from_dict(d).synchronizer.sync_method == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"max_model_len": 2048, "max_response_tokens": 512}, (2048, 1536, 512)),
        ({"max_model_len": 2048, "max_prompt_tokens": 1500}, (2048, 1500, 548)),
        ({"max_prompt_tokens": 100, "max_response_tokens": 50}, (150, 100, 50)),
        ({"max_model_len": 1000}, (1000, 500, 500)),
        ({"max_response_tokens": 300}, (1324, 1024, 300)),
        ({}, (2048, 1024, 1024)),
        (
            {"max_model_len": 300, "max_prompt_tokens": 100, "max_response_tokens": 100},
            (300, 100, 100),
        ),
    ],
)
def test_any_two_lengths_determine_the_third(given, expected):
    d = dict(MINIMAL, model={"model_path": "/m", **given})
    m = load_config_from_dict(d).model
    assert (m.max_model_len, m.max_prompt_tokens, m.max_response_tokens) == expected


@pytest.mark.parametrize(("algorithm", "group"), [("grpo", 8), ("rloo", 4), ("ppo", 1)])
def test_group_algorithms_default_to_a_real_group(algorithm, group):
    cfg = load_config_from_dict(dict(MINIMAL, algorithm={"algorithm_type": algorithm}))
    assert cfg.algorithm.repeat_times == group
    assert cfg.buffer.train_batch_size == 4 * group


def test_trainer_grad_clip_overrides_the_optimizer_clip():
    d = dict(MINIMAL, trainer={"grad_clip": 0.5})
    cfg = load_config_from_dict(d)
    assert cfg.algorithm.optimizer.clip_grad == 0.5 and cfg.trainer.grad_clip == 0.5
    cfg = load_config_from_dict(MINIMAL)
    assert cfg.trainer.grad_clip == cfg.algorithm.optimizer.clip_grad == 1.0


def test_engine_type_auto_is_hf_without_gpus():
    assert load_config_from_dict(MINIMAL).explorer.rollout_model.engine_type == "hf"


def test_free_form_dicts_accept_any_key():
    d = dict(MINIMAL)
    d["algorithm"] = {"policy_loss_fn_args": {"clip_range_low": 0.2, "anything": [1, 2]}}
    d["trainer"] = {"trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}}
    d["monitor"] = {"monitor_type": "WandB", "monitor_args": {"entity": "me"}}
    cfg = load_config_from_dict(d)
    assert cfg.algorithm.policy_loss_fn_args["anything"] == [1, 2]
    assert cfg.algorithm.policy_loss_fn_args["clip_range"] == 0.2  # preset default kept beside it
    assert cfg.trainer.trainer_config["actor_rollout_ref"]["actor"]["ppo_epochs"] == 2
    assert cfg.monitor.monitor_type == "wandb"


def test_job_dir_includes_group_and_stage(tmp_path):
    d = dict(MINIMAL, checkpoint_root_dir=str(tmp_path), project="p", group="g", name="n")
    d["stages"] = [{"stage_name": "s1"}]
    cfg = load_config_from_dict(d)
    assert cfg.job_dir == tmp_path / "p" / "g" / "n"
    assert resolve_stages(cfg)[0].job_dir == tmp_path / "p" / "g" / "n" / "s1"


@pytest.mark.parametrize("path", [SEED, SEED_SFT], ids=["seed", "seed_sft"])
def test_resolved_yaml_loads_back_to_the_same_config(clean_env, path):
    cfg = load_config(path)
    text = config_to_yaml(cfg)
    again = load_config_from_dict(yaml.safe_load(text))
    assert config_to_dict(again) == config_to_dict(cfg)
    assert [config_to_dict(s) for s in resolve_stages(again)] == [
        config_to_dict(s) for s in resolve_stages(cfg)
    ]


def test_yaml_syntax_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  model_path: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert "not valid YAML" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_json_schema_describes_every_field_for_the_forms(clean_env):
    schema = json_schema()
    props = schema["properties"]
    assert set(props) >= {
        "mode",
        "algorithm",
        "model",
        "cluster",
        "buffer",
        "explorer",
        "synchronizer",
        "trainer",
        "monitor",
        "stages",
    }
    mode = props["mode"]
    assert mode["enum"] == ["both", "explore", "train", "bench", "serve", "colocate"]
    assert mode["default"] == "both" and mode["x-level"] == "beginner" and mode["description"]
    lr = props["algorithm"]["properties"]["optimizer"]["properties"]["lr"]
    assert lr["type"] == "number" and lr["default"] == 1e-6 and lr["x-section"] == "algorithm"
    sync = props["synchronizer"]["properties"]["sync_method"]
    assert sync["enum"] == ["nccl", "checkpoint", "memory", None] and sync["x-derived"] is True
    assert sync["x-aliases"]["online"] == "nccl"
    fmt = props["buffer"]["properties"]["explorer_input"]["properties"]["eval_tasksets"]["items"][
        "properties"
    ]["format"]
    assert (
        fmt["properties"]["prompt_key"]["x-path"]
        == "buffer.explorer_input.eval_tasksets[].format.prompt_key"
    )
    assert props["trainer"]["properties"]["trainer_config"]["additionalProperties"] is True
    levels = {p["x-level"] for p in _walk(schema)}
    assert levels == {"beginner", "expert"}
    # the seed, as written and as resolved, is valid against the schema
    validator = jsonschema.Draft202012Validator(schema)
    as_written = OmegaConf.to_container(
        OmegaConf.load(SEED), resolve=False
    )  # OmegaConf reads 1e-5 as a float
    validator.validate(as_written)
    validator.validate(config_to_dict(load_config(SEED)))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(
            {"buffer": {"explorer_input": {"taskset": {"format": {"promt_key": "q"}}}}}
        )


def _walk(node):
    for prop in node.get("properties", {}).values():
        yield prop
        yield from _walk(prop)
        if "items" in prop:
            yield from _walk(prop["items"])


def test_reference_yaml_is_up_to_date():
    committed = (ROOT / "docs" / "config_reference.yaml").read_text()
    assert committed == reference_yaml(), (
        "regenerate: python -m rft_core.config.reference > docs/config_reference.yaml"
    )


def test_reference_yaml_lists_every_field_with_its_help():
    text = reference_yaml()
    data = yaml.safe_load(text)
    assert data["algorithm"]["optimizer"]["lr"] == 1e-6
    assert data["buffer"]["explorer_input"]["taskset"]["format"]["prompt_key"] == "prompt"
    assert "max_response_tokens: null  # longest response" in text
    assert "sync_method: null  # how weights reach the explorer" in text
    for path in (
        "explorer.rollout_model.engine_type",
        "trainer.save_hf_checkpoint",
        "monitor.monitor_type",
    ):
        section = data
        for key in path.split("."):
            section = section[key]
        assert section is not None


def test_reference_module_prints_the_reference():
    out = subprocess.run(
        [sys.executable, "-m", "rft_core.config.reference"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert out == reference_yaml()


def test_dry_run_prints_the_resolved_config(clean_env, tmp_path):
    proc = dry_run(SEED, "buffer.batch_size=4", timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    assert printed["buffer"]["batch_size"] == 4 and printed["buffer"]["train_batch_size"] == 32
    assert printed["synchronizer"]["sync_method"] == "nccl"
    assert not (tmp_path / "checkpoints").exists()  # a dry run writes nothing


def test_form_posted_strings_are_converted():
    d = {
        "model": {
            "model_path": "/m",
            "max_model_len": "",
            "max_prompt_tokens": "100",
            "max_response_tokens": "50",
        },
        "buffer": dict(MINIMAL["buffer"], batch_size="8", total_steps=""),
        "explorer": {"eval_on_startup": "false"},
        "algorithm": {"optimizer": {"lr": "3e-6"}},
    }
    cfg = load_config_from_dict(d)
    assert cfg.model.max_model_len == 150  # blank: derived
    assert cfg.buffer.batch_size == 8 and cfg.buffer.total_steps is None
    assert cfg.explorer.eval_on_startup is False
    assert cfg.algorithm.optimizer.lr == pytest.approx(3e-6)


def test_a_pickled_config_still_resolves_its_stages(clean_env):
    import pickle

    cfg = load_config(SEED_SFT)
    again = pickle.loads(pickle.dumps(cfg))  # how Ray ships it to actors
    assert config_to_dict(again) == config_to_dict(cfg)
    assert [config_to_dict(s) for s in resolve_stages(again)] == [
        config_to_dict(s) for s in resolve_stages(cfg)
    ]


def test_registered_names_are_checked_with_their_paths():
    from rft_core.config.registered import check_registered_names
    from rft_core.registries import registered_names_table

    check_registered_names(
        load_config_from_dict(MINIMAL), registered_names_table()
    )  # math_workflow, grpo: registered
    d = dict(MINIMAL)
    d["buffer"] = dict(MINIMAL["buffer"])
    d["buffer"]["explorer_input"] = dict(
        MINIMAL["buffer"]["explorer_input"],
        eval_tasksets=[{"name": "t", "path": "/d", "default_workflow_type": "math_wrokflow"}],
    )
    with pytest.raises(ConfigError) as info:
        check_registered_names(load_config_from_dict(d), registered_names_table())
    assert info.value.path == "buffer.explorer_input.eval_tasksets[0].default_workflow_type"
    assert "did you mean 'math_workflow'?" in str(info.value)
    d = dict(MINIMAL, algorithm={"advantage_fn": "gae2"})
    with pytest.raises(ConfigError) as info:
        check_registered_names(load_config_from_dict(d), registered_names_table())
    assert info.value.path == "algorithm.advantage_fn"
    d = dict(
        MINIMAL,
        stages=[
            {
                "stage_name": "s",
                "buffer": dict(
                    MINIMAL["buffer"],
                    explorer_input={"taskset": {"path": "/d", "default_reward_fn_type": "nope"}},
                ),
            }
        ],
    )
    with pytest.raises(ConfigError) as info:
        check_registered_names(load_config_from_dict(d), registered_names_table())
    assert info.value.path == "stages[0].buffer.explorer_input.taskset.default_reward_fn_type"


@pytest.mark.parametrize(
    ("section", "key", "meant"),
    [
        ("kl_loss_fn_args", "kl_coeff", "kl_coef"),
        ("kl_penalty_fn_args", "klcoef", "kl_coef"),
        ("policy_loss_fn_args", "clip_rnage", "clip_range"),
        ("advantage_fn_args", "epsilonn", "epsilon"),
        ("entropy_loss_fn_args", "entropy_coeff", "entropy_coef"),
    ],
)
def test_a_misspelt_fn_argument_is_an_error_naming_it(section, key, meant, caplog):
    from rft_core.config.registered import check_registered_names
    from rft_core.registries import registered_names_table

    d = dict(MINIMAL, algorithm={section: {key: 0.1}})
    with pytest.raises(ConfigError) as info:
        check_registered_names(load_config_from_dict(d), registered_names_table())
    assert info.value.path == f"algorithm.{section}.{key}"
    assert f"did you mean '{meant}'?" in str(info.value)
    # a Trinity argument this engine does not have is accepted with a warning
    d = dict(MINIMAL, algorithm={"kl_loss_fn_args": {"kl_coef": 0.01, "adaptive": True}})
    with caplog.at_level("WARNING"):
        check_registered_names(load_config_from_dict(d), registered_names_table())
    assert "algorithm.kl_loss_fn_args.adaptive: not used by this engine" in caplog.text


def test_eval_repeat_times_may_come_from_rollout_args_n():
    ev = {"name": "t", "path": "/d", "rollout_args": {"n": 4}}
    d = dict(MINIMAL)
    d["buffer"] = dict(MINIMAL["buffer"])
    d["buffer"]["explorer_input"] = dict(MINIMAL["buffer"]["explorer_input"], eval_tasksets=[ev])
    (t,) = load_config_from_dict(d).buffer.explorer_input.eval_tasksets
    assert (t.repeat_times, t.rollout_args.n) == (4, 4)


def test_user_errors_survive_pickling_as_themselves():
    # an error raised in a Ray actor is pickled to the driver; it must arrive whole
    import pickle

    from rft_core.errors import ActorFailed, DataError

    err = ConfigError("buffer.batch_size", "must be >= 1, got 0", value=0, allowed=[1, 2])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ConfigError and str(back) == "buffer.batch_size: must be >= 1, got 0"
    assert (back.path, back.message, back.value, back.allowed) == (
        "buffer.batch_size",
        "must be >= 1, got 0",
        0,
        [1, 2],
    )
    for other in (DataError("row 3 has no 'answer'"), ActorFailed("trainer failed")):
        assert str(pickle.loads(pickle.dumps(other))) == str(other)


def test_null_interpolations_of_optional_keys_still_load():
    # `${oc.env:X,null}` and references to keys that are null by choice are ordinary configs;
    # only a plain reference to a key the validator derives is an error (broken_configs/)
    d = dict(
        MINIMAL,
        cluster={"ray_address": "${oc.env:RFT_TEST_NO_SUCH_VAR,null}"},
        trainer={"trainer_config": {"a": {"b": None}, "c": "${trainer.trainer_config.a.b}"}},
    )
    cfg = load_config_from_dict(d)
    assert cfg.cluster.ray_address is None and cfg.trainer.trainer_config["c"] is None
