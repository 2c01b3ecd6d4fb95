"""Real runs on Ray with the tiny demo model (few tokens per response): the explorer/trainer
sync timeline of TRINITY_COMPAT.md, and resume from a checkpoint."""

import json
from pathlib import Path

import pytest
import torch
from run_configs import colocate_eval_config, logged_steps, run_config, run_taskset, trinity_run

from rft_core.checkpoint.store import load_checkpoint
from rft_core.config import load_config_from_dict
from rft_core.runtime.launcher import run_experiment
from rft_core.sync.schedule import expected_model_versions


def _sft_buffer(demo) -> dict:
    """A buffer section for 2 SFT steps of 4 examples from the demo's messages file."""
    return {
        "train_batch_size": 4,
        "total_steps": 2,
        "trainer_input": {
            "experience_buffer": {
                "name": "sft",
                "storage_type": "file",
                "path": str(demo.sft_path),
                "format": {"messages_key": "messages"},
            }
        },
    }


@pytest.mark.slow
def test_sync_offset_1_interval_2_follows_the_documented_timeline(demo, local_ray, tmp_path):
    # explorer |1|2|3|sync|4|5|  trainer |1|2|sync|3|4|sync|5|  (nccl sync, gloo on CPU)
    cfg = load_config_from_dict(
        run_config(demo, tmp_path, "timeline", synchronizer={"sync_offset": 1, "sync_interval": 2})
    )
    result = run_experiment(cfg).last
    versions = [v for _, v in result.explorer["model_versions"]]
    assert [s for s, _ in result.explorer["model_versions"]] == [1, 2, 3, 4, 5]
    assert versions == [0, 0, 0, 2, 2]
    assert versions == expected_model_versions(5, 2, 1)
    assert result.trainer["steps"] == 5
    log = (Path(result.job_dir) / "log" / "synchronizer.log").read_text()
    assert "published weights version 2" in log and "published weights version 4" in log
    assert "published weights version 3" not in log  # trainer syncs only at multiples of 2
    explorer_log = (Path(result.job_dir) / "log" / "explorer.log").read_text()
    assert "explorer step 3: loaded weights version 2" in explorer_log


@pytest.mark.slow
def test_rerun_resumes_from_the_checkpoint_not_from_zero(demo, local_ray, tmp_path):
    # checkpoint weight sync this time; first run stops after 2 steps (final checkpoint)
    first = run_config(demo, tmp_path, "resume", synchronizer={"sync_method": "checkpoint"})
    first["buffer"]["total_steps"] = 2
    r1 = run_experiment(load_config_from_dict(first)).last
    job_dir = Path(r1.job_dir)
    assert r1.trainer["steps"] == 2
    assert (job_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    ckpt2 = load_checkpoint(job_dir, 2)
    assert max(s["step"] for s in ckpt2.optimizer_state["state"].values()) == 2

    second = run_config(demo, tmp_path, "resume", synchronizer={"sync_method": "checkpoint"})
    second["buffer"]["total_steps"] = 4
    r2 = run_experiment(load_config_from_dict(second)).last
    # step numbers continue: the explorer did steps 3 and 4 with the step-2 weights first
    assert [tuple(sv) for sv in r2.explorer["model_versions"]] == [(3, 2), (4, 3)]
    assert r2.trainer["steps"] == 4
    assert logged_steps(job_dir, "trainer") == [1, 2, 3, 4]
    # taskset offset: 4 steps x batch_size 2 tasks, not 2 x 2 replayed from the start
    meta = json.loads((job_dir / "explorer_meta.json").read_text())
    assert meta["latest_iteration"] == 4 and meta["taskset_offset"]["index"] == 8
    # optimizer state was restored: Adam's step counter went on from 2 to 4 (fresh would be 2)
    ckpt4 = load_checkpoint(job_dir, 4)
    assert max(s["step"] for s in ckpt4.optimizer_state["state"].values()) == 4
    assert ckpt4.extra_state["global_step"] == 4
    # and the weights changed from step 2 to step 4
    assert any(not torch.equal(ckpt2.state_dict[k], ckpt4.state_dict[k]) for k in ckpt2.state_dict)
    # bench mode on the same job dir evaluates every full checkpoint in order
    bench = run_config(demo, tmp_path, "resume", synchronizer={"sync_method": "checkpoint"})
    bench["mode"] = "bench"
    bench["buffer"]["explorer_input"]["eval_tasksets"] = [run_taskset(demo, "test", "held-out")]
    bench["buffer"]["explorer_input"]["eval_tasksets"][0]["rollout_args"] = {"temperature": 0.0}
    r3 = run_experiment(load_config_from_dict(bench)).last
    assert list(r3.bench) == ["2", "4"]
    assert all("bench/held-out/accuracy/mean@1" in m for m in r3.bench.values())


@pytest.mark.slow
def test_a_failing_actor_stops_the_run_with_a_non_zero_exit(demo, tmp_path):
    # a job dir whose latest checkpoint is corrupt: resuming from it fails inside the actors
    cfg = run_config(demo, tmp_path, "broken")
    job_dir = tmp_path / "orchestration" / "broken"
    actor = job_dir / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"not a checkpoint")
    (job_dir / "global_step_1" / ".full_checkpoint").write_text("1\n")
    (job_dir / "latest_checkpointed_iteration.txt").write_text("1\n")
    config = tmp_path / "broken.yaml"
    config.write_text(json.dumps(cfg))  # JSON is YAML
    proc = trinity_run(
        config,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("trinity run: error:") and "failed" in last
    assert "model_world_size_1_rank_0.pt" in last or "log/" in last


@pytest.mark.slow
def test_colocate_hands_weights_over_in_memory_every_step(demo, local_ray, tmp_path):
    cfg = colocate_eval_config(demo, tmp_path, "colocate", steps=3, eval_interval=2)
    result = run_experiment(load_config_from_dict(cfg)).last
    assert [tuple(sv) for sv in result.explorer["model_versions"]] == [(1, 0), (2, 1), (3, 2)]
    assert result.trainer["steps"] == 3
    # eval at step 2 (every 2 steps) and the closing eval on the final weights at step 3
    assert sorted(result.explorer["eval"]) == ["2", "3"]
    assert result.explorer["final_model_version"] == 3


@pytest.mark.slow
def test_memory_sync_in_mode_both_goes_through_the_object_store(demo, local_ray, tmp_path):
    # Trinity's Tinker example: mode both, sync_method memory. Explorer and trainer are two
    # actors; each sync step the trainer's weights go through Ray's object store (ray.put /
    # ray.get), so with sync_interval 1, offset 0 the explorer's step s runs on version s-1
    cfg = run_config(demo, tmp_path, "memory_both", synchronizer={"sync_method": "memory"})
    cfg["buffer"]["total_steps"] = 3
    result = run_experiment(load_config_from_dict(cfg)).last
    assert [tuple(sv) for sv in result.explorer["model_versions"]] == [(1, 0), (2, 1), (3, 2)]
    assert result.trainer["steps"] == 3
    log = (Path(result.job_dir) / "log" / "synchronizer.log").read_text()
    assert "published weights version 1" in log and "published weights version 2" in log


@pytest.mark.slow
def test_two_trainer_ranks_train_sync_and_checkpoint_in_mode_both(demo, local_ray, tmp_path):
    # trainer.world_size 2: FSDP2 over gloo; the gathered weights reach the explorer by nccl
    # (gloo) sync, the final checkpoint is sharded W=2 and converts to a loadable HF model
    from transformers import AutoModelForCausalLM

    from rft_core.convert import convert_checkpoints

    cfg = run_config(
        demo,
        tmp_path,
        "ranks",
        trainer={"world_size": 2, "save_hf_checkpoint": "never"},
    )
    cfg["buffer"]["total_steps"] = 3
    result = run_experiment(load_config_from_dict(cfg)).last
    job_dir = Path(result.job_dir)
    assert result.trainer["steps"] == 3
    assert [v for _, v in result.explorer["model_versions"]] == [0, 1, 2]
    assert "trainer: 2 ranks (gloo), FSDP2" in (job_dir / "log" / "trainer.log").read_text()
    logs = {p.name for p in (job_dir / "log").iterdir()}
    assert {"trainer_rank1.log", "queue_exp.log", "synchronizer.log", "explorer.log"} <= logs
    # the trainer's log-probs of every kept rollout (2 groups a step: one a rank), each once
    monitor = job_dir / "monitor"
    kept = [json.loads(x) for x in (monitor / "explorer_samples.jsonl").read_text().splitlines()]
    recorded = [json.loads(x) for x in (monitor / "trainer_samples.jsonl").read_text().splitlines()]
    assert len(kept) == 3 * 4 and all(e["tokens"] for e in kept)
    assert sorted((e["explorer_step"], e["sample_index"]) for e in recorded) == sorted(
        (e["step"], e["sample_index"]) for e in kept
    )
    tokens = {(e["step"], e["sample_index"]): len(e["tokens"]) for e in kept}
    assert all(
        len(e["trainer_logprobs"]) == tokens[e["explorer_step"], e["sample_index"]]
        for e in recorded
    )
    actor = job_dir / "global_step_3" / "actor"
    assert sorted(p.name for p in actor.glob("model_*.pt")) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    report = convert_checkpoints(str(job_dir))
    assert report.failed == [] and len(report.converted) == 1
    model = AutoModelForCausalLM.from_pretrained(actor / "huggingface")
    saved = load_checkpoint(job_dir, 3).state_dict
    torch.testing.assert_close(model.state_dict()["model.norm.weight"], saved["model.norm.weight"])
    assert not torch.equal(
        saved["model.norm.weight"],
        AutoModelForCausalLM.from_pretrained(demo.model_dir).state_dict()["model.norm.weight"],
    )  # three steps of training moved the weights


@pytest.mark.slow
def test_a_resumed_run_reads_its_sql_buffer_on_from_where_the_checkpoint_left_it(
    demo, local_ray, tmp_path
):
    def run(steps: int):
        cfg = run_config(demo, tmp_path, "sql", synchronizer={"sync_method": "checkpoint"})
        cfg["buffer"]["total_steps"] = steps
        cfg["buffer"]["trainer_input"]["experience_buffer"] = {
            "name": "exp",
            "storage_type": "sql",
            "path": f"sqlite:///{tmp_path / 'experiences.db'}",
        }
        return run_experiment(load_config_from_dict(cfg)).last

    from rft_core.buffer.sql import SQLBuffer
    from rft_core.experience import Experience

    first = run(2)
    meta = json.loads((Path(first.job_dir) / "trainer_meta.json").read_text())
    assert meta["experience_buffer"]["consumed"] == 8  # 2 steps x batch 2 x repeat 2
    # rows an explorer wrote after the checkpoint before the run died: made again on resume
    late = SQLBuffer(tmp_path / "experiences.db", name="exp")
    late.put([Experience(prompt_ids=[1], response_ids=[2], explorer_step=3)] * 4)
    late.shutdown()
    second = run(4)
    assert second.trainer["steps"] == 4
    meta = json.loads((Path(second.job_dir) / "trainer_meta.json").read_text())
    # steps 3 and 4 read the rows after the first 8, not the first 8 again
    assert meta["experience_buffer"]["consumed"] == 16
    db = SQLBuffer(tmp_path / "experiences.db", name="exp", role="reader")
    assert db.total() == 16  # the 4 late rows were dropped, not trained on
    db.shutdown()


@pytest.mark.slow
def test_a_rerun_skips_finished_stages_without_starting_ray(demo, tmp_path, monkeypatch):
    import rft_core.runtime.launcher as launcher

    cfg = run_config(demo, tmp_path, "staged")
    cfg["stages"] = [
        {
            "stage_name": "sft_warmup",
            "mode": "train",
            "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-4}},
            "buffer": _sft_buffer(demo),
        },
        {"stage_name": "rft", "mode": "both"},
    ]
    cfg["buffer"]["total_steps"] = 2
    first = run_experiment(load_config_from_dict(cfg))
    assert [s.skipped for s in first.stages] == [False, False]
    assert first.stages[1].trainer["steps"] == 2
    # the GRPO stage started from the SFT stage's weights
    sft_dir = tmp_path / "orchestration" / "staged" / "sft_warmup"
    meta = json.loads((sft_dir / "stage_meta.json").read_text())
    assert meta["finished"] is True and meta["hf_dir"].endswith("global_step_2/actor/huggingface")

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray started although every stage had finished")

    monkeypatch.setattr(launcher, "start_ray", no_ray)
    again = run_experiment(load_config_from_dict(cfg))
    assert [s.skipped for s in again.stages] == [True, True]


@pytest.mark.slow
def test_the_final_interval_checkpoint_gets_hf_weights_once_even_after_a_crash(
    demo, local_ray, tmp_path
):
    cfg = run_config(
        demo, tmp_path, "sft_hf", trainer={"save_interval": 2, "save_hf_checkpoint": "last"}
    )
    cfg["mode"] = "train"
    cfg["synchronizer"] = {"sync_method": "checkpoint"}
    cfg["algorithm"] = {"algorithm_type": "sft", "optimizer": {"lr": 1e-4}}
    cfg["buffer"] = _sft_buffer(demo)
    result = run_experiment(load_config_from_dict(cfg)).last
    job_dir = Path(result.job_dir)
    hf = job_dir / "global_step_2" / "actor" / "huggingface" / "model.safetensors"
    assert hf.exists()
    log = (job_dir / "log" / "trainer.log").read_text()
    assert log.count("saved checkpoint") == 1  # the shards once, then the HF weights added
    assert "added Hugging Face weights to global_step_2" in log
    # a run that died between the interval checkpoint and its HF weights: the rerun adds them
    hf.unlink()
    meta = json.loads((job_dir / "trainer_meta.json").read_text())
    (job_dir / "trainer_meta.json").write_text(json.dumps(dict(meta, saved_hf=False)))
    again = run_experiment(load_config_from_dict(cfg)).last
    assert again.trainer["steps"] == 2 and hf.exists()
    assert json.loads((job_dir / "trainer_meta.json").read_text())["saved_hf"] is True
