"""A resumed run's sql experience buffer: the rows its explorer wrote after the resume
checkpoint go before the actors start (``drop_stale_experiences``, called by the driver), and
a trainer told so leaves the rows the resumed explorer writes meanwhile alone (it used to drop
them itself at start, racing the explorer: the run then waited forever for its next batch)."""

from __future__ import annotations

from run_configs import run_config

from rft_core.buffer.sql import SQLBuffer
from rft_core.checkpoint.layout import read_trainer_meta
from rft_core.config import load_config_from_dict
from rft_core.experience import Experience
from rft_core.runtime.launcher import run_experiment
from rft_core.trainer.trainer import Trainer, drop_stale_experiences


def _config(demo, tmp_path):
    d = run_config(demo, tmp_path, "sqlresume")
    d["buffer"]["trainer_input"]["experience_buffer"] = {
        "name": "exp",
        "storage_type": "sql",
        "path": f"sqlite:///{tmp_path / 'experiences.db'}",
    }
    return load_config_from_dict(d)


def _rows(n: int, step: int) -> list[Experience]:
    return [Experience(prompt_ids=[1], response_ids=[2], explorer_step=step)] * n


def test_the_rows_after_the_checkpoint_go_and_the_trainer_keeps_the_new_ones(
    demo, local_ray, tmp_path
):
    cfg = _config(demo, tmp_path)
    cfg.buffer.total_steps = 2
    cfg.synchronizer.sync_method = "checkpoint"
    first = run_experiment(cfg).last
    assert read_trainer_meta(first.job_dir)["experience_buffer"]["consumed"] == 8
    db = SQLBuffer(tmp_path / "experiences.db", name="exp")
    db.put(_rows(4, 3))  # written after the checkpoint, by the run that "died"
    db.shutdown()
    cfg = _config(demo, tmp_path)
    assert drop_stale_experiences(cfg, None) == 0  # a fresh run drops nothing
    assert drop_stale_experiences(cfg, 2) == 4

    # the resumed explorer writes its step 3 before the trainer has started
    db = SQLBuffer(tmp_path / "experiences.db", name="exp")
    db.put(_rows(4, 3))
    db.shutdown()
    trainer = Trainer(cfg, stale_experiences_dropped=True)
    trainer.start(resume_step=2)
    try:
        batch = trainer._source.get(4, timeout=5)  # noqa: SLF001 - the reader it trains from
    finally:
        trainer.finish()
    assert [e.explorer_step for e in batch] == [3] * 4
    reader = SQLBuffer(tmp_path / "experiences.db", name="exp", role="reader")
    assert reader.total() == 12  # 8 trained on, the 4 stale dropped, the 4 new kept
    reader.shutdown()
