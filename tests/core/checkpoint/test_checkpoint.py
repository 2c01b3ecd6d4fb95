"""The checkpoint format: sharding rule, save/load round trip with a real Qwen2 model and a real
AdamW state, the seed's tree, atomic latest files, sync-only dirs and pruning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checkpoint_fixtures import logits_of, tiny_model_fixtures
from transformers import AutoModelForCausalLM

from rft_core.checkpoint.formats.hf_safetensors import write_hf_weights
from rft_core.checkpoint.layout import (
    latest_checkpoint_step,
    latest_state_dict_step,
)
from rft_core.checkpoint.retention import prune_checkpoints
from rft_core.checkpoint.shards import merge_shards, shard_state_dict
from rft_core.checkpoint.store import load_checkpoint, save_checkpoint, save_state_dict_for_sync
from rft_core.errors import CheckpointError

tokenizer, model = tiny_model_fixtures()


def trained_optimizer(model):
    """A real AdamW state after one step (exp_avg/exp_avg_sq per parameter, a step scalar)."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.0)
    loss = model(torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return opt


def save(job, step, model, tokenizer, *, world_size=1, save_hf=True, opt=None):
    return save_checkpoint(
        job,
        step,
        state_dict=model.state_dict(),
        optimizer_state=opt.state_dict() if opt else None,
        extra_state={"lr_scheduler": {"last_epoch": step}, "trainer_step": step},
        hf_config=model.config,
        tokenizer=tokenizer,
        save_hf=save_hf,
        world_size=world_size,
    )


def test_sharding_follows_torch_chunk_and_pads_missing_ranks_with_empty_tensors():
    sd = {"w": torch.arange(15.0).reshape(5, 3), "b": torch.arange(3.0), "s": torch.tensor(7.0)}
    shards = shard_state_dict(sd, 4)
    assert [s["w"].shape[0] for s in shards] == [2, 2, 1, 0]
    assert [s["b"].shape[0] for s in shards] == [1, 1, 1, 0]
    assert shards[3]["w"].shape == (0, 3)
    assert all(s["s"].item() == 7.0 for s in shards)
    assert torch.equal(shards[2]["w"], torch.tensor([[12.0, 13.0, 14.0]]))
    merged = merge_shards(shards)
    for k in sd:
        assert torch.equal(merged[k], sd[k])


def test_shards_do_not_carry_the_whole_storage(tmp_path):
    big = {"w": torch.zeros(1000, 100)}
    shards = shard_state_dict(big, 4)
    torch.save(shards[0], tmp_path / "r0.pt")
    # a view would serialize all 400 kB; the rank's quarter is ~100 kB
    assert (tmp_path / "r0.pt").stat().st_size < 120_000
    # at world size 1 too: a parameter that views a flat buffer is saved alone
    flat = torch.zeros(100_000)
    torch.save(shard_state_dict({"w": flat[:1000].view(10, 100)}, 1)[0], tmp_path / "w1.pt")
    assert (tmp_path / "w1.pt").stat().st_size < 20_000


def test_a_failed_save_leaves_no_step_dir_and_keeps_latest(tmp_path, model, tokenizer):
    save(tmp_path, 1, model, tokenizer, save_hf=False)

    class BrokenTokenizer:
        def save_pretrained(self, path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(
            tmp_path,
            2,
            state_dict=model.state_dict(),
            optimizer_state=None,
            extra_state={},
            hf_config=model.config,
            tokenizer=BrokenTokenizer(),
            save_hf=True,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_1",
        "latest_checkpointed_iteration.txt",
        "latest_state_dict_iteration.txt",
    ]
    assert latest_checkpoint_step(tmp_path) == 1


def test_save_writes_the_seeds_tree_at_world_size_2(tmp_path, model, tokenizer):
    job = tmp_path / "proj" / "name"
    path = save(job, 3, model, tokenizer, world_size=2, opt=trained_optimizer(model))
    actor = path / "actor"
    names = {p.name for p in actor.iterdir()}
    for r in (0, 1):
        for kind in ("model", "optim", "extra_state"):
            assert f"{kind}_world_size_2_rank_{r}.pt" in names
    assert json.loads((actor / "fsdp_config.json").read_text()) == {
        "FSDP_version": 2,
        "world_size": 2,
    }
    hf = {p.name for p in (actor / "huggingface").iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors"} <= hf
    assert (path / ".full_checkpoint").exists()
    assert (job / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert (job / "latest_state_dict_iteration.txt").read_text().strip() == "3"
    assert not [p for p in job.iterdir() if p.name.startswith(".")]  # no temp dir left


def test_load_returns_merged_weights_optimizer_and_extra_state(tmp_path, model, tokenizer):
    opt = trained_optimizer(model)
    rng_at_save = torch.get_rng_state()
    save(tmp_path, 5, model, tokenizer, world_size=4, save_hf=False, opt=opt)
    loaded = load_checkpoint(tmp_path)
    assert loaded.step == 5
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict[k], v), k
    want = opt.state_dict()
    assert loaded.optimizer_state["param_groups"] == want["param_groups"]
    for pid, st in want["state"].items():
        for name, t in st.items():
            assert torch.equal(loaded.optimizer_state["state"][pid][name], t), (pid, name)
    # the merged optimizer state loads into a fresh optimizer
    fresh = torch.optim.AdamW(model.parameters(), lr=0.0)
    fresh.load_state_dict(loaded.optimizer_state)
    assert loaded.extra_state["trainer_step"] == 5
    assert loaded.extra_state["global_step"] == 5
    assert torch.equal(loaded.extra_state["rng"]["cpu"], rng_at_save)


def test_hf_weights_load_with_transformers_and_give_the_same_logits(tmp_path, model, tokenizer):
    path = save(tmp_path, 1, model, tokenizer)
    reloaded = AutoModelForCausalLM.from_pretrained(path / "actor" / "huggingface")
    assert torch.allclose(logits_of(reloaded, tokenizer), logits_of(model, tokenizer), atol=1e-5)


def test_sharded_hf_weights_write_an_index(tmp_path, model, tokenizer):
    path = save(tmp_path, 1, model, tokenizer, save_hf=False)
    hf = path / "actor" / "huggingface"
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    names = write_hf_weights(hf, sd, max_shard_bytes=100_000)
    index = json.loads((hf / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3 and names[-1] == "model.safetensors.index.json"
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in sd.values())
    reloaded = AutoModelForCausalLM.from_pretrained(hf)
    assert torch.allclose(logits_of(reloaded, tokenizer), logits_of(model, tokenizer), atol=1e-5)
    # rewriting as one file removes the old shards and index
    write_hf_weights(hf, sd)
    assert sorted(p.name for p in hf.glob("model*")) == ["model.safetensors"]


def test_corrupt_or_missing_shard_names_the_file(tmp_path, model, tokenizer):
    path = save(tmp_path, 2, model, tokenizer, world_size=2, save_hf=False)
    bad = path / "actor" / "model_world_size_2_rank_1.pt"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="model_world_size_2_rank_1.pt"):
        load_checkpoint(tmp_path, 2)
    bad.unlink()
    with pytest.raises(CheckpointError, match="missing.*model_world_size_2_rank_1.pt"):
        load_checkpoint(tmp_path, 2)
    with pytest.raises(CheckpointError, match="global_step_9"):
        load_checkpoint(tmp_path, 9)


def test_latest_step_falls_back_to_scanning(tmp_path, model, tokenizer):
    assert latest_checkpoint_step(tmp_path) is None
    save(tmp_path, 2, model, tokenizer, save_hf=False)
    save(tmp_path, 10, model, tokenizer, save_hf=False)
    assert latest_checkpoint_step(tmp_path) == 10
    (tmp_path / "latest_checkpointed_iteration.txt").unlink()
    assert latest_checkpoint_step(tmp_path) == 10
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("garbage")
    assert latest_checkpoint_step(tmp_path) == 10


def test_sync_dirs_are_cleaned_but_full_checkpoints_survive(tmp_path, model, tokenizer):
    save(tmp_path, 1, model, tokenizer, save_hf=False)
    for step in (2, 3, 4, 5):
        save_state_dict_for_sync(tmp_path, step, model.state_dict())
    steps = sorted(p.name for p in tmp_path.glob("global_step_*"))
    assert steps == ["global_step_1", "global_step_4", "global_step_5"]
    assert not (tmp_path / "global_step_5" / ".full_checkpoint").exists()
    assert latest_state_dict_step(tmp_path) == 5
    assert latest_checkpoint_step(tmp_path) == 1
    # a sync at the step of a full checkpoint keeps the full checkpoint intact
    save_state_dict_for_sync(tmp_path, 1, model.state_dict())
    assert (tmp_path / "global_step_1" / ".full_checkpoint").exists()
    assert (tmp_path / "global_step_1" / "actor" / "huggingface" / "config.json").exists()
    loaded = load_checkpoint(tmp_path, 5)
    assert torch.equal(
        loaded.state_dict["model.norm.weight"], model.state_dict()["model.norm.weight"]
    )


def test_prune_keeps_the_newest_full_checkpoints(tmp_path, model, tokenizer):
    for step in (1, 2, 3, 4):
        save(tmp_path, step, model, tokenizer, save_hf=False)
    save_state_dict_for_sync(tmp_path, 5, model.state_dict())
    assert prune_checkpoints(tmp_path, None) == [] and prune_checkpoints(tmp_path, -1) == []
    assert prune_checkpoints(tmp_path, 2) == [1, 2]
    left = sorted(p.name for p in tmp_path.glob("global_step_*"))
    assert left == ["global_step_3", "global_step_4", "global_step_5"]


def test_resaving_a_step_replaces_it(tmp_path, model, tokenizer):
    save(tmp_path, 1, model, tokenizer, world_size=4, save_hf=False)
    save(tmp_path, 1, model, tokenizer, world_size=1, save_hf=False)
    actor = tmp_path / "global_step_1" / "actor"
    assert not list(actor.glob("model_world_size_4_*"))
    assert load_checkpoint(Path(tmp_path)).step == 1


def test_retention_spares_a_step_while_it_converts(tmp_path, model, tokenizer):
    from rft_core.checkpoint.retention import pins_of
    from rft_core.convert import convert_step

    for step in (1, 2, 3):
        save(tmp_path, step, model, tokenizer, save_hf=False)
    step_1 = tmp_path / "global_step_1"
    pruned_meanwhile = []

    def progress(done, total):  # called while the weights are written: step 1 is pinned
        assert pins_of(step_1)
        pruned_meanwhile.extend(prune_checkpoints(tmp_path, 1))

    outcome = convert_step(step_1, progress=progress)
    assert outcome.files and pruned_meanwhile == [2]  # 3 is the newest, 1 was converting
    assert pins_of(step_1) == [] and step_1.is_dir()
    assert prune_checkpoints(tmp_path, 1) == [1]
