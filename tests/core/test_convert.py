"""``trinity convert`` on real tiny Qwen2 models: every supported layout round-trips to
logits equal to the original's, the seed's path rules, idempotence, failures, atomicity."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess

import pytest
import torch
from checkpoint_fixtures import build_model, chat_generate, tiny_config, tiny_model_fixtures
from convert_fixtures import (
    PYTHON,
    assert_same_logits,
    hf_dir,
    python_env,
    run_trinity,
    save_job_step,
    tree_fingerprint,
    write_megatron,
    write_real_fsdp_shards,
)
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from rft_core.checkpoint.layout import find_step_dirs, hf_weights_complete
from rft_core.convert import convert_checkpoints
from rft_core.errors import ConvertError

tokenizer, model = tiny_model_fixtures()


@pytest.fixture(scope="module")
def larger(tokenizer):
    return build_model(tiny_config(len(tokenizer), larger=True), seed=1)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("which", ["model", "larger"])
def test_fsdp_shards_round_trip_to_equal_logits(tmp_path, request, tokenizer, which, world_size):
    m = request.getfixturevalue(which)
    step = save_job_step(tmp_path, 7, m, tokenizer, world_size=world_size)
    report = convert_checkpoints(tmp_path)
    assert report.ok and [o.step for o in report.converted] == [7]
    assert report.converted[0].format == "fsdp"
    assert_same_logits(hf_dir(step), m, tokenizer)


def test_converted_model_generates_through_the_chat_template(tmp_path, model, tokenizer):
    step = save_job_step(tmp_path, 1, model, tokenizer, world_size=2)
    convert_checkpoints(step)
    text = chat_generate(hf_dir(step))
    assert isinstance(text, str) and len(text) > 0


@pytest.mark.parametrize(
    ("which", "tp", "pp"), [("model", 2, 1), ("larger", 2, 1), ("larger", 2, 2)]
)
def test_megatron_tensor_parallel_round_trip(tmp_path, request, tokenizer, which, tp, pp):
    m = request.getfixturevalue(which)
    actor = tmp_path / "job" / "global_step_3" / "actor"
    write_megatron(actor, m, tp=tp, pp=pp)
    m.config.save_pretrained(actor / "huggingface")
    tokenizer.save_pretrained(actor / "huggingface")
    report = convert_checkpoints(tmp_path / "job")
    assert report.ok, report.summary()
    assert report.converted[0].format == f"megatron tp={tp} pp={pp}"
    assert_same_logits(actor / "huggingface", m, tokenizer)


def test_demo_model_round_trips(tmp_path):
    from transformers import AutoTokenizer

    from rft_core.demo import build_demo

    paths = build_demo(tmp_path / "demo")
    demo_model = AutoModelForCausalLM.from_pretrained(paths.model_dir).eval()
    demo_tok = AutoTokenizer.from_pretrained(paths.model_dir)
    for ws in (1, 2, 4):
        save_job_step(tmp_path / f"job{ws}", 5, demo_model, demo_tok, world_size=ws)
        assert convert_checkpoints(tmp_path / f"job{ws}").ok
        assert_same_logits(hf_dir(tmp_path / f"job{ws}" / "global_step_5"), demo_model, demo_tok)
    write_megatron(tmp_path / "mg" / "global_step_5" / "actor", demo_model, tp=2)
    assert convert_checkpoints(tmp_path / "mg", base_model_dir=paths.model_dir).ok
    converted = tmp_path / "mg" / "global_step_5" / "actor" / "huggingface"
    assert_same_logits(converted, demo_model, demo_tok)
    assert chat_generate(converted)  # generation runs end to end through the chat template
    assert (converted / "tokenizer.json").is_file() and (
        converted / "chat_template.jinja"
    ).is_file()


@pytest.mark.parametrize("kind", ["fsdp2", "fsdp1"])
def test_real_fsdp_sharded_tensor_files_convert(tmp_path, kind, larger, tokenizer):
    """Files saved by real FSDP2 (DTensor) and FSDP1 (ShardedTensor) in 2 gloo processes."""
    actor = tmp_path / "global_step_9" / "actor"
    write_real_fsdp_shards(actor, kind, world_size=2, larger=True, seed=1)
    larger.config.save_pretrained(actor / "huggingface")  # fsdp_config.json absent: W from names
    report = convert_checkpoints(actor)
    assert report.ok, report.summary()
    assert_same_logits(actor / "huggingface", larger, tokenizer)


def test_dtype_bf16_writes_bf16_and_updates_the_config(tmp_path, larger, tokenizer):
    step = save_job_step(tmp_path, 2, larger, tokenizer, world_size=2)
    assert convert_checkpoints(tmp_path, dtype="bf16").ok
    with safe_open(str(hf_dir(step) / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert json.loads((hf_dir(step) / "config.json").read_text())["dtype"] == "bfloat16"
    reloaded = AutoModelForCausalLM.from_pretrained(hf_dir(step))
    want = larger.to(torch.bfloat16)
    try:
        ids = tokenizer("12 plus 30", return_tensors="pt").input_ids
        with torch.no_grad():
            assert torch.equal(reloaded.to(torch.bfloat16)(ids).logits, want(ids).logits)
    finally:
        larger.to(torch.float32)


def test_auto_dtype_follows_config_json(tmp_path, larger, tokenizer):
    """Trainers keep fp32 master weights while config.json says bfloat16 (as Qwen2.5's does)."""
    step = save_job_step(tmp_path, 2, larger, tokenizer, world_size=2)
    cfg_path = hf_dir(step) / "config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "dtype": "bfloat16"}))
    assert convert_checkpoints(tmp_path).ok
    with safe_open(str(hf_dir(step) / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
        norm = f.get_tensor("model.norm.weight")
    assert torch.equal(norm, larger.state_dict()["model.norm.weight"].to(torch.bfloat16))


def test_large_output_is_sharded_with_an_index(tmp_path, larger, tokenizer):
    step = save_job_step(tmp_path, 4, larger, tokenizer, world_size=4)
    report = convert_checkpoints(tmp_path, max_shard_bytes=200_000)
    files = report.converted[0].files
    assert files[-1] == "model.safetensors.index.json" and len(files) > 3
    assert not (hf_dir(step) / "model.safetensors").exists()
    assert_same_logits(hf_dir(step), larger, tokenizer)


def test_second_run_skips_without_reading_weights_and_changes_nothing(tmp_path, model, tokenizer):
    for s in (1, 2):
        save_job_step(tmp_path, s, model, tokenizer, world_size=2)
    assert len(convert_checkpoints(tmp_path).converted) == 2
    before = tree_fingerprint(tmp_path)
    # a shard that can no longer be read proves the skip does not load the model
    (tmp_path / "global_step_1" / "actor" / "model_world_size_2_rank_0.pt").write_bytes(b"junk")
    before["global_step_1/actor/model_world_size_2_rank_0.pt"] = tree_fingerprint(tmp_path)[
        "global_step_1/actor/model_world_size_2_rank_0.pt"
    ]
    report = convert_checkpoints(tmp_path)
    assert report.ok and not report.converted and len(report.skipped) == 2
    assert tree_fingerprint(tmp_path) == before
    # --force converts again (and now meets the broken shard)
    forced = convert_checkpoints(tmp_path, force=True)
    assert [o.step for o in forced.converted] == [2]
    assert "model_world_size_2_rank_0.pt" in forced.failed[0].reason


def test_missing_or_corrupt_shard_fails_that_step_only(tmp_path, model, tokenizer):
    for s in (10, 20, 30):
        save_job_step(tmp_path, s, model, tokenizer, world_size=2)
    bad = tmp_path / "global_step_20" / "actor" / "model_world_size_2_rank_1.pt"
    bad.write_bytes(bad.read_bytes()[:300])
    (tmp_path / "global_step_30" / "actor" / "model_world_size_2_rank_0.pt").unlink()
    report = convert_checkpoints(tmp_path)
    assert not report.ok
    assert [o.step for o in report.converted] == [10]
    reasons = {o.step: o.reason for o in report.failed}
    assert "global_step_20/actor/model_world_size_2_rank_1.pt" in reasons[20]
    assert "global_step_30/actor/model_world_size_2_rank_0.pt" in reasons[30]
    assert not hf_weights_complete(hf_dir(tmp_path / "global_step_20"))
    cli = run_trinity("--checkpoint-dir", str(tmp_path))
    assert cli.returncode == 1
    assert "model_world_size_2_rank_1.pt" in cli.stdout and "skipped 1" in cli.stdout


KILL_SCRIPT = """
import sys, time
from rft_core.convert import convert_checkpoints
def progress(label, done, total):
    if done == 12:
        print("KILL ME", flush=True)
        time.sleep(600)
convert_checkpoints(sys.argv[1], progress=progress, max_shard_bytes=50_000)
"""


def test_killed_conversion_is_never_mistaken_for_finished(tmp_path, larger, tokenizer):
    step = save_job_step(tmp_path / "job", 1, larger, tokenizer, world_size=4)
    script = tmp_path / "convert_and_hang.py"
    script.write_text(KILL_SCRIPT)
    proc = subprocess.Popen(
        [str(PYTHON), str(script), str(tmp_path / "job")],
        stdout=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    try:
        assert proc.stdout.readline().strip() == "KILL ME"
        actor = step / "actor"
        partial = [p for p in actor.iterdir() if ".weights-tmp-" in p.name]
        assert partial and any(partial[0].iterdir())  # some shard files were already written
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not hf_weights_complete(hf_dir(step))
    report = convert_checkpoints(tmp_path / "job")
    assert [o.step for o in report.converted] == [1]
    assert not [p for p in (step / "actor").iterdir() if ".weights-tmp-" in p.name]
    assert_same_logits(hf_dir(step), larger, tokenizer)


def test_missing_config_needs_base_model_dir(tmp_path, model, tokenizer):
    step = save_job_step(tmp_path / "job", 3, model, tokenizer)
    shutil.rmtree(hf_dir(step))
    report = convert_checkpoints(tmp_path / "job")
    assert not report.ok
    assert "huggingface/config.json is missing: pass --base-model-dir" in report.failed[0].reason
    cli = run_trinity("--checkpoint-dir", str(tmp_path / "job"))
    assert cli.returncode == 1 and "--base-model-dir" in cli.stdout
    base = tmp_path / "base"
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    cli = run_trinity("--checkpoint-dir", str(tmp_path / "job"), "--base-model-dir", str(base))
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert_same_logits(hf_dir(step), model, tokenizer)
    assert chat_generate(hf_dir(step))


def test_base_model_of_another_architecture_is_refused(tmp_path, model, larger, tokenizer):
    step = save_job_step(tmp_path, 3, model, tokenizer)
    shutil.rmtree(hf_dir(step))
    larger.config.save_pretrained(tmp_path / "wrong_base")
    report = convert_checkpoints(tmp_path, base_model_dir=tmp_path / "wrong_base")
    assert "do not match the architecture" in report.failed[0].reason
    assert "shape mismatch" in report.failed[0].reason


def test_path_rules(tmp_path, model, tokenizer):
    job = tmp_path / "my_global_step_runs" / "proj" / "exp"
    save_job_step(job / "sft_warmup", 2, model, tokenizer)
    save_job_step(job / "rft", 4, model, tokenizer)
    (job / "rft" / "loop").symlink_to(job, target_is_directory=True)  # must not be followed
    assert [s for s, _ in find_step_dirs(tmp_path)] == [2, 4]
    inside = job / "rft" / "global_step_4" / "actor" / "huggingface"
    assert find_step_dirs(inside) == [(4, job / "rft" / "global_step_4")]
    assert find_step_dirs(job / "rft" / "global_step_4") == [(4, job / "rft" / "global_step_4")]
    (tmp_path / "x" / "global_step_foo").mkdir(parents=True)
    assert find_step_dirs(tmp_path / "x" / "global_step_foo") == []
    with pytest.raises(ConvertError, match="no global_step_<N> directories found"):
        convert_checkpoints(tmp_path / "x" / "global_step_foo")
    with pytest.raises(ConvertError, match="no such directory"):
        convert_checkpoints(tmp_path / "nope")
    cli = run_trinity("--checkpoint-dir", str(tmp_path / "x" / "global_step_foo"))
    assert cli.returncode == 2 and "no global_step_<N> directories found" in cli.stderr


def test_step_selection_and_critic_left_alone(tmp_path, model, tokenizer):
    for s in (100, 200, 300):
        save_job_step(tmp_path, s, model, tokenizer)
    critic = tmp_path / "global_step_200" / "critic"
    critic.mkdir()
    (critic / "model_world_size_1_rank_0.pt").write_bytes(b"not touched")
    cli = run_trinity("--checkpoint-dir", str(tmp_path), "--step", "100,200")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "converted 2" in cli.stdout and "critic left alone" in cli.stdout
    assert not hf_weights_complete(hf_dir(tmp_path / "global_step_300"))
    assert sorted(p.name for p in critic.iterdir()) == ["model_world_size_1_rank_0.pt"]
    cli = run_trinity("--checkpoint-dir", str(tmp_path), "--step", "300,999")
    assert cli.returncode == 1 and "global_step_999 not found" in cli.stdout


def test_megatron_dist_ckpt_is_reported_as_unsupported(tmp_path, model):
    actor = tmp_path / "global_step_5" / "actor"
    (actor / "dist_ckpt").mkdir(parents=True)
    model.config.save_pretrained(actor / "huggingface")
    report = convert_checkpoints(tmp_path)
    assert not report.ok
    assert "no model weights found" in report.failed[0].reason
    assert "mp_rank_XX/model_optim_rng.pt" in report.failed[0].reason


def test_state_dict_only_safetensors_converts(tmp_path, larger, tokenizer):
    from safetensors.torch import save_file

    actor = tmp_path / "global_step_8" / "actor"
    actor.mkdir(parents=True)
    save_file(
        {k: v.contiguous() for k, v in larger.state_dict().items()}, actor / "model.safetensors"
    )
    larger.config.save_pretrained(actor / "huggingface")
    tokenizer.save_pretrained(actor / "huggingface")
    report = convert_checkpoints(tmp_path)
    assert report.ok and report.converted[0].format == "safetensors"
    assert_same_logits(actor / "huggingface", larger, tokenizer)


def test_unreadable_config_fails_that_step_with_the_file_named(tmp_path, model, tokenizer):
    bad = save_job_step(tmp_path, 1, model, tokenizer)
    save_job_step(tmp_path, 2, model, tokenizer)
    (hf_dir(bad) / "config.json").write_text("{not json")
    report = convert_checkpoints(tmp_path)
    assert [o.step for o in report.converted] == [2]
    assert "global_step_1/actor/huggingface/config.json cannot be read" in report.failed[0].reason
