"""Other users' Trinity-RFT configs: real example configs from Trinity-RFT repositories
(``trinity_configs/``, each naming its source repo, path and commit on its first line) load and
validate with our schema, or fail with one clear message that names the YAML path and what is
supported. Model and data paths in them do not exist on this machine; loading never touches them
(they are checked when the run starts). Keys Trinity accepts but RFT Studio does not implement
load with a warning, never silently, and deprecated spellings map onto their current keys."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import pytest
from run_configs import dry_run
from trinity_corpus import ACCEPTED, CORPUS, EXPECTED, FILES, SOURCE

from rft_core.config import (
    check_registered_names,
    config_to_dict,
    config_to_yaml,
    json_schema,
    load_config,
    load_config_from_dict,
)
from rft_core.config.fields import iter_fields
from rft_core.errors import ConfigError
from rft_core.registries import registered_names_table


@pytest.fixture
def trinity_env(monkeypatch, tmp_path):
    """The env variables Trinity's examples read: unset, except the taskset path two of them need."""
    for var in ("TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_MODEL_PATH", "TRINITY_SFT_DATASET_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(tmp_path / "no_such_taskset"))


def _load_and_check(path: Path):
    cfg = load_config(path)
    check_registered_names(cfg, registered_names_table())
    return cfg


def test_the_corpus_names_its_sources_and_expectations():
    assert len(FILES) >= 20
    assert {f.stem for f in FILES} == set(EXPECTED)
    for f in FILES:
        first = f.read_text().splitlines()[0]
        assert SOURCE.match(first), (
            f"{f.name}: first line must be '# source: <repo> <path> @ <commit>'"
        )
    assert sum(v is None for v in EXPECTED.values()) >= 7


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_trinity_config_loads_or_names_what_is_not_supported(trinity_env, path: Path):
    expected = EXPECTED[path.stem]
    if expected is None:
        cfg = _load_and_check(path)
        assert cfg.model.model_path
        return
    where, text = expected
    with pytest.raises(ConfigError) as info:
        _load_and_check(path)
    # the first error (a config may have several: one line each) is the one expected
    message = str(info.value.errors[0])
    assert info.value.path == where, message
    assert message.startswith(f"{where}: ") and "\n" not in message
    assert text in message, message


@pytest.mark.parametrize("path", ACCEPTED, ids=[f.stem for f in ACCEPTED])
def test_missing_model_and_data_are_reported_when_the_run_starts(trinity_env, monkeypatch, path):
    """The model and dataset paths of these configs do not exist here: ``trinity run``'s checks
    before any actor starts name them (and the GPUs this machine lacks), in one message."""
    from rft_core.runtime.preflight import preflight

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = load_config(path)
    if importlib.util.find_spec(cfg.monitor.monitor_type) is None:
        # a monitor package this machine lacks (mix_chord's wandb) is refused before the rest,
        # on its own (test_monitor's test of it)
        cfg.monitor.monitor_type = "tensorboard"
    with pytest.raises(ConfigError) as info:
        preflight(cfg)
    message = str(info.value)
    assert "model.model_path: " in message and "does not exist; download the model first" in message
    assert "unknown key" not in message and "\n" not in message


@pytest.mark.parametrize("path", ACCEPTED, ids=[f.stem for f in ACCEPTED])
def test_resolved_trinity_config_loads_back_to_itself(trinity_env, path):
    """``trinity run --dry-run`` output (and the dashboard's stored YAML) is a config that loads
    to the same values: deprecated keys were mapped, Trinity-only sections survive."""
    import yaml

    cfg = load_config(path)
    again = load_config_from_dict(yaml.safe_load(config_to_yaml(cfg)))
    assert config_to_dict(again) == config_to_dict(cfg)


def test_the_seed_like_config_keeps_its_values(trinity_env):
    cfg = load_config(CORPUS / "grpo_gsm8k.yaml")
    assert cfg.algorithm.repeat_times == 8 and cfg.buffer.batch_size == 96
    assert cfg.trainer.max_token_len_per_gpu == 16384
    assert cfg.explorer.rollout_model.gpu_memory_utilization == 0.7
    assert cfg.trainer.trainer_type == "verl" and cfg.trainer.ulysses_sequence_parallel_size == 1


def test_unimplemented_settings_warn_and_defaults_stay_quiet(trinity_env, caplog):
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        load_config(CORPUS / "grpo_gsm8k.yaml")  # trainer_type verl, use_dynamic_bsz true: defaults
    assert not [r for r in caplog.records if "does not implement" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config(CORPUS / "grpo_lora_gsm8k.yaml")
    warned = [r.getMessage() for r in caplog.records if "does not implement" in r.getMessage()]
    # its trainer_config keys with no setting here are named too (test_trainer_config.py)
    warned = [w for w in warned if not w.startswith("trainer.trainer_config.")]
    assert len(warned) == 1 and warned[0].startswith("model.lora_configs = [{'name': 'lora'")
    assert cfg.model.lora_configs[0].lora_rank == 16
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        load_config(CORPUS / "grpo_gsm8k_task_pipeline.yaml")
    warned = {r.getMessage().split(" = ")[0] for r in caplog.records}
    assert {"data_processor", "service", "trainer.trainer_config_path"} <= warned


def test_unimplemented_settings_in_stages_and_list_items_are_found(trinity_env):
    from rft_core.config.trinity_compat import unimplemented_settings

    cfg = load_config(CORPUS / "grpo_gsm8k.yaml")
    cfg.buffer.explorer_input.eval_tasksets[0].format.image_key = "images"
    cfg.explorer.rollout_model.base_port = 9000
    found = dict(unimplemented_settings(cfg))
    assert found == {
        "buffer.explorer_input.eval_tasksets[0].format.image_key": "images",
        "explorer.rollout_model.base_port": 9000,
    }


def test_deprecated_spellings_map_onto_current_keys(trinity_env, caplog):
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config(CORPUS / "dpo_humanlike.yaml")
    o = cfg.algorithm.optimizer
    assert o.lr_scheduler_type == "cosine" and o.warmup_style is None and o.betas == [0.9, 0.95]
    assert (
        cfg.trainer.max_token_len_per_gpu == 16384 and cfg.trainer.ppo_max_token_len_per_gpu is None
    )
    text = caplog.text
    assert (
        "warmup_style is deprecated" in text and "ppo_max_token_len_per_gpu is an old name" in text
    )
    assert "trainer.use_dynamic_bsz = False" in text  # set, not implemented: said out loud


def test_deprecated_spelling_that_contradicts_the_current_key_is_an_error(trinity_env):
    d = yaml_of("dpo_humanlike.yaml")
    d["algorithm"]["optimizer"]["lr_scheduler_type"] = "linear"
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    assert info.value.path == "algorithm.optimizer.warmup_style"
    assert "contradicts algorithm.optimizer.lr_scheduler_type 'linear'" in str(info.value)


def test_the_deprecated_warmup_style_takes_the_schedules_lr_scheduler_type_offers(trinity_env):
    import dataclasses

    from rft_core.config.schema import OptimizerConfig

    d = yaml_of("dpo_humanlike.yaml")
    d["algorithm"]["optimizer"]["warmup_style"] = "bogus"
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    field = next(f for f in dataclasses.fields(OptimizerConfig) if f.name == "lr_scheduler_type")
    assert info.value.path == "algorithm.optimizer.warmup_style"
    assert info.value.allowed == field.metadata["choices"]  # one list of schedules


def test_runner_num_and_old_buffer_retry_keys_load_with_a_warning(trinity_env, caplog):
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config(CORPUS / "async_gsm8k_explorer.yaml")
    assert cfg.explorer.runner_per_model == 8 and cfg.explorer.runner_num is None
    assert cfg.explorer.rollout_model.engine_type == "vllm"  # vllm_async is an alias
    assert "explorer.runner_num = 32 is deprecated" in caplog.text
    assert "buffer.max_retry_times = 3 is an old key" in caplog.text


def test_task_selector_is_read_as_data_selector(trinity_env):
    d = yaml_of("grpo_gsm8k.yaml")
    d["buffer"]["explorer_input"]["taskset"]["task_selector"] = {
        "selector_type": "shuffle",
        "seed": 7,
    }
    cfg = load_config_from_dict(d)
    ts = cfg.buffer.explorer_input.taskset
    assert (ts.data_selector.selector_type, ts.data_selector.seed) == ("shuffle", 7)
    assert ts.task_selector is None


def test_rollout_model_lengths_fill_the_model_lengths(trinity_env, caplog):
    """Trinity lets explorer.rollout_model carry max_prompt_tokens / max_response_tokens (dapo,
    grpo_math examples); one engine serves rollouts and training here, so they become model's."""
    d = yaml_of("grpo_gsm8k.yaml")
    del d["model"]["max_response_tokens"], d["model"]["max_model_len"]
    d["explorer"]["rollout_model"].update(max_prompt_tokens=1024, max_response_tokens=3072)
    cfg = load_config_from_dict(d)
    m = cfg.model
    assert (m.max_prompt_tokens, m.max_response_tokens, m.max_model_len) == (1024, 3072, 4096)
    assert cfg.buffer.explorer_input.taskset.rollout_args.max_tokens == 3072
    d = yaml_of("grpo_gsm8k.yaml")
    d["explorer"]["rollout_model"]["max_response_tokens"] = 512
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config_from_dict(d)
    assert cfg.model.max_response_tokens == 1024
    assert (
        "explorer.rollout_model.max_response_tokens = 512 differs from model.max_response_tokens = 1024"
        in caplog.text
    )


def test_null_free_form_arguments_mean_none_given(trinity_env):
    d = yaml_of("grpo_gsm8k.yaml")
    d["algorithm"]["kl_loss_fn_args"] = None
    d["monitor"] = {"monitor_args": None}
    cfg = load_config_from_dict(d)
    assert cfg.algorithm.kl_loss_fn_args == {"kl_coef": 0.001} and cfg.monitor.monitor_args == {}


# Every key of Trinity-RFT's config dataclasses (trinity/common/config.py, agentscope-ai/Trinity-RFT
# @ 1d7fae4a63f5e3a30e1927559d28a348a2167dd6) that a user may set, i.e. not marked "DO NOT SET".
TRINITY_KEYS = """
mode project group name checkpoint_root_dir ray_namespace continue_from_checkpoint
ignore_validator_suggestions
algorithm.{algorithm_type,repeat_times,sample_strategy,sample_strategy_args,advantage_fn,advantage_fn_args,kl_penalty_fn,kl_penalty_fn_args,policy_loss_fn,policy_loss_fn_args,kl_loss_fn,kl_loss_fn_args,entropy_loss_fn,entropy_loss_fn_args,loss_agg_mode,enable_router_replay,bypass_old_logprobs,rollout_correction}
algorithm.optimizer.{lr,lr_warmup_steps,lr_warmup_steps_ratio,min_lr_ratio,warmup_style,lr_scheduler_type,optimizer_type,betas,weight_decay,clip_grad}
model.{model_path,trust_remote_code,critic_model_path,custom_chat_template,chat_template_path,temperature,top_p,top_k,logprobs,max_model_len,max_prompt_tokens,max_response_tokens,min_response_tokens,enable_prompt_truncation,repetition_penalty,enable_thinking,lora_configs,fully_sharded_loras,max_cpu_loras,rope_scaling,rope_theta,tinker,external_model}
model.lora_configs[].{name,path,base_model_name,lora_rank,lora_alpha,lora_dtype,target_modules,exclude_modules}
model.tinker.{enable,rank,seed,train_mlp,train_attn,train_unembed,base_url}
model.external_model.{enable,base_url_env,api_key_env,model_name}
cluster.{ray_address,node_num,gpu_per_node}
buffer.{batch_size,train_batch_size,total_epochs,total_steps,explorer_input,trainer_input}
buffer.explorer_input.{taskset,tasksets,eval_tasksets,default_workflow_type,default_eval_workflow_type,default_reward_fn_type}
buffer.explorer_input.taskset.{name,storage_type,path,default_workflow_type,default_reward_fn_type,rollout_args,workflow_args,reward_fn_args,task_selector,data_selector,split,subset_name,format,max_retry_times,max_retry_interval,enable_progress_bar,repeat_times}
buffer.explorer_input.eval_tasksets[].{name,path,split,repeat_times,rollout_args,data_selector}
buffer.explorer_input.taskset.rollout_args.{temperature,top_p,top_k,logprobs,max_tokens}
buffer.explorer_input.taskset.format.{prompt_type,prompt_key,response_key,system_prompt_key,system_prompt,messages_key,tools_key,image_key,video_key,reply_prefix,workflow_key,reward_fn_key,chosen_key,rejected_key,enable_concatenated_multi_turn,chat_template,enable_thinking}
buffer.explorer_input.taskset.data_selector.{selector_type,seed,feature_keys,kwargs}
buffer.trainer_input.{experience_buffer,auxiliary_buffers}
buffer.trainer_input.experience_buffer.{name,storage_type,path,capacity,max_read_timeout,replay_buffer,max_retry_times,max_retry_interval,split,subset_name,format,enable_progress_bar,data_selector}
buffer.trainer_input.experience_buffer.replay_buffer.{enable,priority_fn,reuse_cooldown_time,priority_fn_args}
explorer.{name,runner_per_model,runner_prepare_concurrency,runner_prepare_max_retries,max_timeout,max_retry_times,env_vars,concurrent_mode,max_repeat_times_per_runner,runner_num,rollout_model,auxiliary_models,eval_interval,eval_on_startup,bench_on_latest_checkpoint,proxy_port,listen_address,service_status_check_interval,min_running_model_num,db_url,over_rollout,dynamic_timeout,runner_state_report_interval,max_inflight_batches}
explorer.rollout_model.{name,trust_remote_code,engine_type,engine_num,tensor_parallel_size,data_parallel_size,pipeline_parallel_size,enable_expert_parallel,extra_engine_args,use_v1,enforce_eager,enable_prefix_caching,enable_chunked_prefill,gpu_memory_utilization,dtype,seed,max_model_len,max_prompt_tokens,max_response_tokens,min_response_tokens,enable_prompt_truncation,repetition_penalty,ignore_eos,enable_multimodal,chat_template,enable_thinking,enable_history,enable_openai_api,enable_log_requests,base_port,api_key,enable_auto_tool_choice,tool_call_parser,reasoning_parser,weight_sync_buffer_size}
explorer.auxiliary_models[].{engine_type,engine_num,tensor_parallel_size,enable_openai_api}
explorer.over_rollout.{ratio,wait_after_min,return_partial_tasks}
explorer.dynamic_timeout.{enable,warmup_min_steps,ratio}
trainer.{name,trainer_type,trainer_strategy,save_interval,enable_preview,total_steps,save_hf_checkpoint,grad_clip,use_dynamic_bsz,use_remove_padding,balance_batch,critic_warmup,max_token_len_per_gpu,ulysses_sequence_parallel_size,fix_actor_microbatch_loss_scale,param_offload,optimizer_offload,grad_offload,offload_policy,save_strategy,max_checkpoints_to_keep,megatron,trainer_config,trainer_config_path}
trainer.megatron.{tensor_model_parallel_size,pipeline_model_parallel_size,virtual_pipeline_model_parallel_size,expert_model_parallel_size,expert_tensor_parallel_size,context_parallel_size,sequence_parallel}
monitor.{monitor_type,monitor_args,detailed_stats,enable_ray_timeline}
synchronizer.{sync_method,sync_style,sync_interval,explorer_sync_interval,trainer_sync_interval,sync_offset,sync_timeout,group_name,wait_for_checkpoint}
data_processor.{task_pipeline,experience_pipeline}
data_processor.task_pipeline.{operators,num_process,config_path,inputs,output,target_fields,priority_weights,top_k}
data_processor.task_pipeline.operators[].{name,args}
data_processor.experience_pipeline.{operators,save_input,input_save_path,inputs,output}
service.data_juicer.{server_url,auto_start,port}
log.{level,group_by_node}
stages[].{stage_name,mode,algorithm,buffer,data_processor,explorer,trainer}
"""


def _expand(spec: str) -> list[str]:
    out = []
    for word in spec.split():
        head, brace, rest = word.partition("{")
        out += [head + k for k in rest.rstrip("}").split(",")] if brace else [word]
    return out


def test_every_key_trinity_accepts_is_in_the_schema():
    ours = {info.path for info in iter_fields()}
    missing = [key for key in _expand(TRINITY_KEYS) if key not in ours]
    assert not missing, f"keys Trinity-RFT accepts that the schema lacks: {missing}"


def test_unimplemented_help_says_so_in_the_reference():
    from rft_core.config.meta import UNIMPLEMENTED_NOTE

    flagged = [i for i in iter_fields() if UNIMPLEMENTED_NOTE in i.help]
    assert len(flagged) > 40
    assert any(i.path == "model.lora_configs" for i in flagged)
    assert not any(i.path == "model.model_path" for i in flagged)
    assert {i.path for i in flagged} == {i.path for i in iter_fields() if i.unimplemented}
    props = json_schema()["properties"]["model"]["properties"]
    assert props["lora_configs"]["x-unimplemented"] is True
    assert "x-unimplemented" not in props["model_path"]


def test_trinity_run_dry_run_warns_about_unimplemented_keys(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRINITY_")}
    proc = dry_run(CORPUS / "grpo_lora_gsm8k.yaml", env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "model.lora_configs" in proc.stderr and "does not implement" in proc.stderr


def yaml_of(name: str) -> dict:
    import yaml

    return yaml.safe_load((CORPUS / name).read_text())


def _set(path: str, value):
    def edit(d: dict) -> None:
        *parents, key = path.split(".")
        for p in parents:
            d = d.setdefault(p, {})
        d[key] = value

    return edit


BAD_TRINITY_VALUES = [
    ("algorithm.optimizer.warmup_style", "bogus", "'bogus' is not one of constant, cosine, linear"),
    ("model.lora_configs", 5, "must be a list, got 5 (int)"),
    ("model.lora_configs", [{"lora_rnk": 8}], "did you mean 'lora_rank'?"),
    ("buffer.trainer_input.auxiliary_buffers", [1], "must be a mapping"),
    ("trainer.megatron", {"tensor_parallel_size": 2}, "did you mean 'tensor_model_parallel_size'?"),
    ("trainer.ppo_max_token_len_per_gpu", 8192, "contradicts trainer.max_token_len_per_gpu 16384"),
    ("synchronizer.sync_iteration_interval", 3, "renamed to synchronizer.sync_interval"),
    ("explorer.rollout_model.engine_type", "tinker", "'tinker' is not one of auto, hf, vllm"),
    ("explorer.runner_num", "many", "must be an integer"),
]


@pytest.mark.parametrize(
    "path, value, text", BAD_TRINITY_VALUES, ids=[f"{p}={v}" for p, v, _ in BAD_TRINITY_VALUES]
)
def test_bad_values_of_trinity_keys_name_their_path(trinity_env, path, value, text):
    d = yaml_of("grpo_gsm8k.yaml")
    _set(path, value)(d)
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    message = str(info.value)
    assert message.startswith(path) and text in message and "\n" not in message


def test_a_stage_section_trinity_accepts_is_warned_about_with_its_stage_path(trinity_env, caplog):
    d = yaml_of("grpo_gsm8k.yaml")
    d["stages"] = [{"stage_name": "rft", "data_processor": {"task_pipeline": {"top_k": 5}}}]
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        load_config_from_dict(d)
    assert "stages[0].data_processor = {'task_pipeline'" in caplog.text


def test_unimplemented_keys_are_in_the_run_log_of_each_actor(trinity_env, monkeypatch, tmp_path):
    """The actors' logs (job_dir/log/<role>.log, also streamed to the dashboard) say which keys
    of the config this run ignores, not only the terminal that loaded it."""
    from rft_core.actor_setup import setup_actor_logging
    from rft_core.actors.actor_log import release_output

    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    cfg = load_config(CORPUS / "grpo_lora_gsm8k.yaml")
    logger = logging.getLogger("rft_core")
    before = list(logger.handlers)
    monitor = setup_actor_logging(cfg, "explorer")
    for handler in [h for h in logger.handlers if h not in before]:
        logger.removeHandler(handler)
        handler.close()
    release_output("explorer")
    monitor.close()
    run_log = (Path(cfg.job_dir) / "log" / "explorer.log").read_text()
    assert "WARNING" in run_log and "model.lora_configs = [{'name': 'lora'" in run_log
    assert "does not implement" in run_log


def test_opmd_and_gspo_examples_resolve_to_trinitys_defaults(trinity_env):
    opmd = load_config(CORPUS / "opmd_gsm8k.yaml").algorithm
    assert (opmd.advantage_fn, opmd.policy_loss_fn, opmd.kl_loss_fn) == ("opmd", "opmd", "k2")
    assert opmd.policy_loss_fn_args == {"tau": 1.0} and opmd.repeat_times == 8
    assert opmd.advantage_fn_args == {"opmd_baseline": "mean", "tau": 1.0}
    gspo = load_config(CORPUS / "gspo_gsm8k.yaml").algorithm
    assert (gspo.advantage_fn, gspo.policy_loss_fn) == ("grpo", "gspo")
    assert gspo.policy_loss_fn_args == {"clip_range_low": 3e-4, "clip_range_high": 4e-4}
    assert gspo.loss_agg_mode == "seq-mean-token-mean"


def test_dapo_is_grpo_with_decoupled_clip_and_dynamic_sampling(trinity_env):
    """Trinity's DAPO example with the taskset key it misspells (``subset``) fixed and a
    workflow we have: its clip_range_low/high reach ppo's loss, ``std_threshold`` the grpo fn."""
    from rft_core.algorithms.settings import AlgorithmSettings

    raw = yaml_of("dapo_math.yaml")
    taskset = raw["buffer"]["explorer_input"]["taskset"]
    taskset["subset_name"] = taskset.pop("subset")
    raw["buffer"]["explorer_input"]["default_workflow_type"] = "math_workflow"
    raw["algorithm"]["advantage_fn_args"] = {"std_threshold": 0.0}
    raw["algorithm"]["loss_agg_mode"] = "token-mean"
    cfg = load_config_from_dict(raw)
    check_registered_names(cfg, registered_names_table())
    algo = AlgorithmSettings.resolve(cfg.algorithm)
    assert (algo.policy_loss_fn, algo.advantage_fn) == ("ppo", "grpo")
    assert algo.policy_loss_args == {
        "clip_range": 0.2,
        "clip_ratio_c": 3.0,
        "clip_range_low": 0.2,
        "clip_range_high": 0.28,
    }
    assert algo.advantage_args == {"epsilon": 1e-6, "std_threshold": 0.0}
    assert algo.advantages_in_explorer and algo.loss_agg_mode == "token-mean"


def test_a_trinity_algorithm_we_lack_is_refused_in_a_config_and_dapo_is_explained(trinity_env):
    raw = yaml_of("grpo_gsm8k.yaml")
    raw["algorithm"]["algorithm_type"] = "JSD"
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(raw)
    assert info.value.path == "algorithm.algorithm_type"
    assert "is a Trinity-RFT algorithm that RFT Studio does not implement" in str(info.value)
    assert "did you mean" not in str(info.value)
    raw["algorithm"]["algorithm_type"] = "dapo"
    with pytest.raises(ConfigError, match="DAPO is algorithm_type grpo with policy_loss_fn_args"):
        load_config_from_dict(raw)
    raw["algorithm"]["algorithm_type"] = "gspoo"
    with pytest.raises(ConfigError, match="did you mean 'gspo'"):
        load_config_from_dict(raw)


def test_the_docs_table_lists_each_trinity_example_as_the_loader_treats_it():
    table = (CORPUS.parents[2] / "docs" / "trinity_examples.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in table.splitlines()
        if line.startswith("| `") and ".yaml`" in line.split("|")[1]
    }
    assert sorted(rows) == sorted(f.name for f in FILES)
    for path in FILES:
        row, expected = rows[path.name], EXPECTED[path.stem]
        if expected is None:
            assert "| loads and validates |" in row, row
        else:
            yaml_path, text = expected
            assert f"| refused at `{yaml_path}` |" in row and text in row, row
