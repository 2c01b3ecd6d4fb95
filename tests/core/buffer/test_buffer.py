"""file, sql and (in-process) queue buffers: ordering, blocking, end of data, resume offsets."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest

from rft_core.buffer import BufferTimeout, build_buffer, resolve_buffer_path
from rft_core.errors import ConfigError, DataError
from rft_core.experience import Experience


def exps(start: int, count: int) -> list[Experience]:
    return [
        Experience(
            prompt_ids=[1, 2, i],
            response_ids=[i, i + 1],
            logprobs=[-0.5, -1.25],
            reward=float(i),
            advantage=i / 10,
            group_id=f"g{i // 4}",
            metrics={"accuracy": float(i % 2)},
            model_version=i // 8,
        )
        for i in range(start, start + count)
    ]


@pytest.mark.parametrize("storage", ["file", "sql"])
def test_round_trip_in_order_with_all_fields(tmp_path, storage):
    path = "exp.jsonl" if storage == "file" else "sqlite:///exp.db"
    writer = build_buffer(storage, name="exp", path=path, job_dir=tmp_path)
    reader = build_buffer(storage, name="exp", path=path, job_dir=tmp_path, role="reader")
    writer.put(exps(0, 6))
    assert reader.qsize() == len(reader) == 6
    got = reader.get(4)
    assert [e.reward for e in got] == [0.0, 1.0, 2.0, 3.0]
    assert got[3] == exps(3, 1)[0]  # every field survives JSON
    writer.put(exps(6, 2))
    assert [e.reward for e in reader.get(4)] == [4.0, 5.0, 6.0, 7.0]
    assert reader.state()["consumed"] == 8


@pytest.mark.parametrize("storage", ["file", "sql"])
def test_get_blocks_until_enough_then_drains_after_close(tmp_path, storage):
    path = "exp.jsonl" if storage == "file" else "sqlite:///exp.db"
    writer = build_buffer(storage, name="exp", path=path, job_dir=tmp_path)
    reader = build_buffer(storage, name="exp", path=path, job_dir=tmp_path, role="reader")
    writer.put(exps(0, 2))

    def late_writer():
        time.sleep(0.3)
        writer.put(exps(2, 3))
        time.sleep(0.2)
        writer.close()

    thread = threading.Thread(target=late_writer)
    thread.start()
    assert [e.reward for e in reader.get(4, timeout=30)] == [0.0, 1.0, 2.0, 3.0]
    # only one left: blocks until the writer closes, then returns the remainder
    assert [e.reward for e in reader.get(4, timeout=30)] == [4.0]
    assert reader.get(4, timeout=30) == []
    thread.join()


@pytest.mark.parametrize("storage", ["file", "sql", "queue"])
def test_timeout_raises_a_clear_error(tmp_path, storage):
    path = {"file": "e.jsonl", "sql": "sqlite:///e.db", "queue": None}[storage]
    buffer = build_buffer(storage, name="exp", path=path, job_dir=tmp_path)
    buffer.put(exps(0, 1))
    with pytest.raises(BufferTimeout, match=r"waited 0.2s for 3 experiences, 1 available"):
        buffer.get(3, timeout=0.2)


@pytest.mark.parametrize("storage", ["file", "sql"])
def test_a_resumed_reader_continues_from_its_saved_offset(tmp_path, storage):
    path = "exp.jsonl" if storage == "file" else "sqlite:///exp.db"
    writer = build_buffer(storage, name="exp", path=path, job_dir=tmp_path)
    writer.put(exps(0, 10))
    first = build_buffer(storage, name="exp", path=path, job_dir=tmp_path, role="reader")
    first.get(3)
    saved = json.loads(json.dumps(first.state()))  # survives a JSON checkpoint
    first.get(3)  # consumed after the checkpoint: must be read again after resume
    resumed = build_buffer(storage, name="exp", path=path, job_dir=tmp_path, role="reader")
    resumed.load_state(saved)
    assert resumed.qsize() == 7
    assert [e.reward for e in resumed.get(7)] == [float(i) for i in range(3, 10)]


def test_file_reader_ignores_a_half_written_line(tmp_path):
    writer = build_buffer("file", name="exp", path="e.jsonl", job_dir=tmp_path)
    writer.put(exps(0, 2))
    target = tmp_path / "buffer" / "e.jsonl"
    with target.open("a") as fh:
        fh.write('{"prompt_ids": [1], "respon')  # the writer is mid-line
    reader = build_buffer("file", name="exp", path="e.jsonl", job_dir=tmp_path, role="reader")
    assert reader.qsize() == 2
    with target.open("a") as fh:
        fh.write('se_ids": [2], "reward": 9.0}\n')
    assert [e.reward for e in reader.get(3)] == [0.0, 1.0, 9.0]


def test_file_reader_names_a_corrupt_line(tmp_path):
    target = tmp_path / "buffer" / "bad.jsonl"
    target.parent.mkdir()
    target.write_text(json.dumps(exps(0, 1)[0].to_dict()) + "\nnot json\n")
    reader = build_buffer("file", name="exp", path="bad.jsonl", job_dir=tmp_path, role="reader")
    with pytest.raises(DataError, match=r"bad.jsonl: line 2 is not an experience"):
        reader.get(2, timeout=1)


def test_relative_paths_land_in_the_job_buffer_dir(tmp_path):
    assert resolve_buffer_path("sqlite:///gsm8k.db", tmp_path) == tmp_path / "buffer/gsm8k.db"
    assert resolve_buffer_path("sqlite:////abs/x.db", tmp_path).as_posix() == "/abs/x.db"
    assert resolve_buffer_path("out/e.jsonl", tmp_path) == tmp_path / "buffer/out/e.jsonl"


def test_in_process_queue_mirrors_to_sqlite_and_jsonl(tmp_path):
    for path in ("sqlite:///mirror.db", "mirror.jsonl"):
        queue = build_buffer("queue", name="exp_buffer", path=path, job_dir=tmp_path)
        queue.put(exps(0, 5))
        assert [e.reward for e in queue.get(3)] == [0.0, 1.0, 2.0]
        queue.close()
        assert [e.reward for e in queue.get(3)] == [3.0, 4.0]
        assert queue.state() == {"consumed": 5}
    with sqlite3.connect(tmp_path / "buffer" / "mirror.db") as db:
        rows = db.execute("SELECT reward, data FROM exp_buffer ORDER BY id").fetchall()
    assert [r[0] for r in rows] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert json.loads(rows[4][1])["response_ids"] == [4, 5]
    lines = (tmp_path / "buffer" / "mirror.jsonl").read_text().splitlines()
    assert [json.loads(line)["reward"] for line in lines] == [0.0, 1.0, 2.0, 3.0, 4.0]
    # the mirror is a real buffer: a later `train` mode run can read it back
    reader = build_buffer(
        "sql", name="exp_buffer", path="sqlite:///mirror.db", job_dir=tmp_path, role="reader"
    )
    assert [e.reward for e in reader.get(10)] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_bad_storage_type_and_missing_path_name_the_yaml_key(tmp_path):
    with pytest.raises(ConfigError, match=r"experience_buffer.storage_type: unknown .*'redis'"):
        build_buffer("redis", name="e", path="x", job_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"experience_buffer.path: storage_type sql needs"):
        build_buffer("sql", name="e", path=None, job_dir=tmp_path)


def test_sql_rejects_a_file_that_is_not_sqlite(tmp_path):
    (tmp_path / "buffer").mkdir()
    (tmp_path / "buffer" / "x.db").write_text("this is not a database" * 100)
    with pytest.raises(DataError, match=r"x.db: cannot use as a SQLite experience buffer"):
        build_buffer("sql", name="e", path="sqlite:///x.db", job_dir=tmp_path)


@pytest.mark.parametrize("kind, path", [("file", "exp.jsonl"), ("sql", "sqlite:///exp.db")])
def test_drop_after_removes_what_came_after_a_reader_position(tmp_path, kind, path):
    writer = build_buffer(kind, name="exp", path=path, job_dir=tmp_path, role="writer")
    writer.put([Experience(prompt_ids=[1], response_ids=[i]) for i in range(5)])
    reader = build_buffer(kind, name="exp", path=path, job_dir=tmp_path, role="reader")
    assert [e.response_ids for e in reader.get(2, timeout=5)] == [[0], [1]]
    state = reader.state()  # what a checkpoint saves
    assert writer.drop_after(state) == 3
    writer.put([Experience(prompt_ids=[1], response_ids=[9])])
    writer.close()
    resumed = build_buffer(kind, name="exp", path=path, job_dir=tmp_path, role="reader")
    resumed.load_state(state)
    assert [e.response_ids for e in resumed.get(5, timeout=5)] == [[9]]
