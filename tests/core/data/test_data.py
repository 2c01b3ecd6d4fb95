"""Tasksets: dataset layouts (HF/ModelScope directories, single files, offline caches), format
keys, errors that name the key and the columns, resumable reading, SFT/DPO rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rft_core.config import load_config_from_dict
from rft_core.data import (
    TasksetReader,
    find_files,
    load_sft_dataset,
    load_taskset,
    load_training_tasksets,
)
from rft_core.errors import DataError

ROWS = [
    {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
    for i in range(5)
]


def _parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(taskset: dict, **top) -> object:
    d = {
        "model": {"model_path": "/m", "max_model_len": 256, "max_response_tokens": 64},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "buffer": {"batch_size": 2, "explorer_input": {"taskset": taskset}},
        **top,
    }
    return load_config_from_dict(d)


def _taskset_cfg(path, **kw):
    ts = {
        "name": "arith",
        "path": str(path),
        "format": {"prompt_key": "question", "response_key": "answer"},
    }
    ts.update(kw)
    return _config(ts).buffer.explorer_input.taskset


@pytest.fixture
def hf_dir(tmp_path: Path) -> Path:
    """A dataset laid out as `huggingface-cli download openai/gsm8k` / `modelscope download` leave it."""
    root = tmp_path / "gsm8k"
    _parquet(root / "main" / "train-00000-of-00001.parquet", ROWS)
    _parquet(root / "main" / "test-00000-of-00001.parquet", ROWS[:2])
    _parquet(root / "socratic" / "train-00000-of-00001.parquet", ROWS[:1])
    (root / "README.md").write_text("---\nconfigs:\n- config_name: main\n---\n# gsm8k\n")
    # ModelScope's dataset_infos.json: features without dtype, which breaks datasets.load_dataset
    infos = {"main": {"features": {"question": {"_type": "Value"}, "answer": {"_type": "Value"}}}}
    (root / "dataset_infos.json").write_text(json.dumps(infos))
    (root / ".msc").write_bytes(b"\x00\x01")
    return root


def test_hf_directory_with_subset_and_split(hf_dir):
    cfg = _taskset_cfg(hf_dir, subset_name="main", split="train")
    taskset = load_taskset(cfg)
    assert len(taskset) == 5
    task = taskset[3]
    assert task.index == 3 and task.taskset == "arith"
    assert task.prompt == "What is 3 + 3?"
    assert task.truth == "3 + 3 = 6\n#### 6"
    assert task.workflow == "math_workflow" and task.reward_fn is None and task.is_eval is False
    assert task.rollout_args == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 64,
        "n": 4,
        "logprobs": 0,
    }
    assert task.raw == ROWS[3]
    test = load_taskset(_taskset_cfg(hf_dir, subset_name="main", split="test"), is_eval=True)
    assert len(test) == 2 and test[1].is_eval
    assert len(load_taskset(_taskset_cfg(hf_dir, subset_name="socratic"))) == 1


def test_modelscope_dataset_infos_without_dtype_is_not_read(hf_dir):
    files = find_files(str(hf_dir), "main", "train")
    assert files == [hf_dir / "main" / "train-00000-of-00001.parquet"]
    assert len(load_taskset(_taskset_cfg(hf_dir, subset_name="main"))) == 5


def test_unknown_subset_lists_the_subsets(hf_dir):
    with pytest.raises(DataError) as info:
        load_taskset(_taskset_cfg(hf_dir, subset_name="mian"))
    message = str(info.value)
    assert message.startswith("buffer.explorer_input.taskset.path: ")
    assert "subset_name 'mian'" in message and "main, socratic" in message


def test_several_subsets_need_a_subset_name(hf_dir):
    with pytest.raises(DataError) as info:
        load_taskset(_taskset_cfg(hf_dir))
    assert "several subsets (main, socratic); set subset_name" in str(info.value)


def test_unknown_split_lists_the_splits(hf_dir):
    with pytest.raises(DataError) as info:
        load_taskset(_taskset_cfg(hf_dir, subset_name="main", split="validation"))
    assert "split 'validation' not found" in str(info.value)
    assert "test, train" in str(info.value)


def test_shards_are_read_in_order_and_data_dirs_are_searched(tmp_path):
    root = tmp_path / "ds"
    _parquet(root / "data" / "train-00001-of-00002.parquet", ROWS[3:])
    _parquet(root / "data" / "train-00000-of-00002.parquet", ROWS[:3])
    _parquet(root / "data" / "test-00000-of-00001.parquet", ROWS[:1])
    taskset = load_taskset(_taskset_cfg(root))
    assert [t.prompt for t in taskset] == [r["question"] for r in ROWS]


def test_files_naming_no_split_are_the_train_split(tmp_path):
    _jsonl(tmp_path / "plain" / "problems.jsonl", ROWS)
    assert len(load_taskset(_taskset_cfg(tmp_path / "plain"))) == 5
    with pytest.raises(DataError, match="split 'test' not found"):
        load_taskset(_taskset_cfg(tmp_path / "plain", split="test"))


@pytest.mark.parametrize(
    "kind", ["jsonl", "json_list", "json_columns", "json_data_key", "parquet", "arrow"]
)
def test_single_files(tmp_path, kind):
    if kind == "jsonl":
        path = _jsonl(tmp_path / "t.jsonl", ROWS)
    elif kind == "json_list":
        path = tmp_path / "t.json"
        path.write_text(json.dumps(ROWS))
    elif kind == "json_columns":
        path = tmp_path / "t.json"
        path.write_text(json.dumps({k: [r[k] for r in ROWS] for k in ROWS[0]}))
    elif kind == "json_data_key":
        path = tmp_path / "t.json"
        path.write_text(json.dumps({"data": ROWS}))
    elif kind == "parquet":
        path = _parquet(tmp_path / "t.parquet", ROWS)
    else:
        path = tmp_path / "t.arrow"
        table = pa.Table.from_pylist(ROWS)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    taskset = load_taskset(_taskset_cfg(path, split="test"))  # split is ignored for one file
    assert len(taskset) == 5
    assert taskset[4].prompt == "What is 4 + 4?" and taskset[4].truth.endswith("#### 8")


def test_datasets_save_to_disk_layout(tmp_path):
    import datasets

    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS[:2])}
    )
    dd.save_to_disk(str(tmp_path / "saved"))
    assert len(load_taskset(_taskset_cfg(tmp_path / "saved"))) == 5
    assert len(load_taskset(_taskset_cfg(tmp_path / "saved", split="test"))) == 2


def test_a_dataset_name_resolves_from_the_offline_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "datasets--someorg--arith" / "snapshots" / "0123abcd"
    _parquet(snapshot / "main" / "train-00000-of-00001.parquet", ROWS)
    _parquet(snapshot / "main" / "test-00000-of-00001.parquet", ROWS[:2])
    assert len(load_taskset(_taskset_cfg("someorg/arith", subset_name="main"))) == 5
    assert len(load_taskset(_taskset_cfg("someorg/arith", subset_name="main", split="test"))) == 2


def test_a_dataset_name_resolves_from_the_datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "dscache"))
    built = tmp_path / "dscache" / "someorg___arith" / "main" / "0.0.0" / "f00d"
    built.mkdir(parents=True)
    for split, rows in (("train", ROWS), ("test", ROWS[:2])):
        table = pa.Table.from_pylist(rows)
        with (
            pa.OSFile(str(built / f"arith-{split}.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as w,
        ):
            w.write_table(table)
    assert len(load_taskset(_taskset_cfg("someorg/arith", subset_name="main", split="test"))) == 2


def test_an_unknown_name_says_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    with pytest.raises(DataError) as info:
        load_taskset(_taskset_cfg("openai/gsm8k", subset_name="main"))
    message = str(info.value)
    assert message.startswith(
        "buffer.explorer_input.taskset.path: 'openai/gsm8k' is neither a local file"
    )
    assert "huggingface-cli download openai/gsm8k --repo-type dataset" in message
    assert "\n" not in message


def test_a_missing_prompt_column_names_the_key_the_columns_and_the_yaml_path(hf_dir):
    cfg = _taskset_cfg(
        hf_dir, subset_name="main", format={"prompt_key": "problem", "response_key": "answer"}
    )
    with pytest.raises(DataError) as info:
        load_taskset(cfg)
    message = str(info.value)
    assert message.startswith("buffer.explorer_input.taskset.format.prompt_key: column 'problem'")
    assert "columns present: question, answer" in message


def test_a_missing_response_column_in_an_eval_taskset(hf_dir):
    ts = {
        "name": "arith",
        "path": str(hf_dir),
        "subset_name": "main",
        "format": {"prompt_key": "question", "response_key": "answer"},
    }
    ev = dict(
        ts, name="test", split="test", format={"prompt_key": "question", "response_key": "solution"}
    )
    cfg = load_config_from_dict(
        {
            "model": {"model_path": "/m"},
            "buffer": {"explorer_input": {"taskset": ts, "eval_tasksets": [ts, ev]}},
        }
    )
    with pytest.raises(DataError) as info:
        load_taskset(cfg.buffer.explorer_input.eval_tasksets[1], is_eval=True)
    assert str(info.value).startswith(
        "buffer.explorer_input.eval_tasksets[1].format.response_key: column 'solution'"
    )


def test_per_row_workflow_reward_and_system_prompt(tmp_path):
    rows = [
        {"q": "a", "a": "1", "wf": "simple_workflow", "rf": "exact_match", "sys": "Be brief."},
        {"q": "b", "a": "2", "wf": None, "rf": "", "sys": None},
    ]
    path = _jsonl(tmp_path / "mixed.jsonl", rows)
    fmt = {
        "prompt_key": "q",
        "response_key": "a",
        "workflow_key": "wf",
        "reward_fn_key": "rf",
        "system_prompt_key": "sys",
        "system_prompt": "Think first.",
    }
    taskset = load_taskset(
        _taskset_cfg(path, format=fmt, default_reward_fn_type="math_reward", workflow_args={"k": 1})
    )
    first, second = taskset[0], taskset[1]
    assert (first.workflow, first.reward_fn, first.system_prompt) == (
        "simple_workflow",
        "exact_match",
        "Be brief.",
    )
    assert (second.workflow, second.reward_fn, second.system_prompt) == (
        "math_workflow",
        "math_reward",
        "Think first.",
    )
    assert second.workflow_args == {"k": 1}
    # a task says where its workflow and reward fn were named, for errors about them
    assert first.yaml_path == "buffer.explorer_input.taskset"
    assert first.workflow_from == "format.workflow_key (column 'wf' of row 0)"
    assert first.reward_fn_from == "format.reward_fn_key (column 'rf' of row 0)"
    assert (second.workflow_from, second.reward_fn_from) == (
        "default_workflow_type",
        "default_reward_fn_type",
    )


def test_explorer_input_defaults_reach_the_tasks(hf_dir):
    d = {
        "model": {"model_path": "/m"},
        "buffer": {
            "explorer_input": {
                "default_workflow_type": "simple_workflow",
                "default_eval_workflow_type": "math_workflow",
                "system_prompt": "Answer with a number.",
                "taskset": {
                    "path": str(hf_dir),
                    "subset_name": "main",
                    "format": {"prompt_key": "question", "response_key": "answer"},
                },
                "eval_tasksets": [
                    {
                        "name": "t",
                        "path": str(hf_dir),
                        "subset_name": "main",
                        "split": "test",
                        "repeat_times": 3,
                        "format": {"prompt_key": "question", "response_key": "answer"},
                    }
                ],
            }
        },
    }
    cfg = load_config_from_dict(d)
    train = load_taskset(cfg.buffer.explorer_input.taskset)
    evalset = load_taskset(cfg.buffer.explorer_input.eval_tasksets[0], is_eval=True)
    assert train.name == "gsm8k"  # derived from the path
    assert (
        train[0].workflow == "simple_workflow" and train[0].system_prompt == "Answer with a number."
    )
    assert evalset[0].workflow == "math_workflow" and evalset[0].rollout_args["n"] == 3


# ---------------------------------------------------------------- reading


@pytest.fixture
def five(tmp_path):
    return load_taskset(_taskset_cfg(_jsonl(tmp_path / "five.jsonl", ROWS)))


def _indices(batches):
    return [[t.index for t in b] for b in batches]


def test_reader_crosses_epochs_and_stops_after_total_epochs(five):
    reader = TasksetReader(five, batch_size=2, total_epochs=2)
    assert _indices(reader) == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    assert reader.next_batch() is None
    assert reader.state()["index"] == 10 and reader.state()["epoch"] == 2


def test_reader_last_batch_may_be_short(five):
    assert _indices(TasksetReader(five, batch_size=3, total_epochs=1)) == [[0, 1, 2], [3, 4]]


def test_total_steps_overrides_epochs(five):
    reader = TasksetReader(five, batch_size=2, total_epochs=1, total_steps=4)
    assert _indices(reader) == [[0, 1], [2, 3], [4, 0], [1, 2]]


def test_reader_resumes_from_its_state(five):
    whole = _indices(TasksetReader(five, batch_size=2, total_epochs=3, shuffle=True, seed=7))
    first = TasksetReader(five, batch_size=2, total_epochs=3, shuffle=True, seed=7)
    head = [first.next_batch(), first.next_batch(), first.next_batch()]
    state = json.loads(json.dumps(first.state()))  # as stored in explorer_meta.json
    rest = TasksetReader.from_state(five, state, batch_size=2, total_epochs=3, shuffle=True, seed=7)
    assert _indices(head) + _indices(rest) == whole
    # resuming at an explorer step gives the same stream
    at_step = TasksetReader(
        five, batch_size=2, total_epochs=3, shuffle=True, seed=7, start_index=3 * 2
    )
    assert _indices(at_step) == whole[3:]


def test_resumed_total_steps_counts_the_steps_already_done(five):
    reader = TasksetReader(five, batch_size=2, total_steps=4, start_index=2 * 2)
    assert _indices(reader) == [[4, 0], [1, 2]]


def test_shuffle_is_a_seeded_permutation_per_epoch(five):
    batches = _indices(TasksetReader(five, batch_size=5, total_epochs=3, shuffle=True, seed=1))
    assert all(sorted(b) == [0, 1, 2, 3, 4] for b in batches)
    assert len({tuple(b) for b in batches}) > 1  # epochs differ
    assert batches == _indices(
        TasksetReader(five, batch_size=5, total_epochs=3, shuffle=True, seed=1)
    )
    assert batches != _indices(
        TasksetReader(five, batch_size=5, total_epochs=3, shuffle=True, seed=2)
    )


def test_shuffle_comes_from_the_data_selector(tmp_path):
    cfg = _taskset_cfg(
        _jsonl(tmp_path / "five.jsonl", ROWS), data_selector={"selector_type": "Shuffle", "seed": 3}
    )
    reader = TasksetReader(load_taskset(cfg), batch_size=5)
    assert reader.shuffle and reader.seed == 3
    with pytest.raises(ValueError, match="seed"):
        reader.load_state({"index": 0, "shuffle": True, "seed": 4})


def test_start_index_defaults_to_the_taskset_index(tmp_path):
    cfg = _taskset_cfg(_jsonl(tmp_path / "five.jsonl", ROWS), index=3)
    assert _indices(TasksetReader(load_taskset(cfg), batch_size=2)) == [[3, 4]]


# ---------------------------------------------------------------- SFT / DPO


def _sft_cfg(path, **eb):
    d = {
        "mode": "train",
        "model": {"model_path": "/m"},
        "algorithm": {"algorithm_type": "sft"},
        "buffer": {
            "train_batch_size": 2,
            "trainer_input": {"experience_buffer": {"name": "sft", "path": str(path), **eb}},
        },
    }
    return load_config_from_dict(d)


def test_sft_messages_rows(tmp_path):
    chat = [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "<answer>2</answer>"},
    ]
    path = _jsonl(
        tmp_path / "sft" / "train.jsonl", [{"messages": chat}, {"messages": json.dumps(chat)}]
    )
    rows = load_sft_dataset(_sft_cfg(path).buffer)
    assert rows == [{"messages": chat}, {"messages": chat}]


def test_sft_prompt_response_columns_become_messages(tmp_path):
    path = _parquet(tmp_path / "sft.parquet", ROWS[:2])
    cfg = _sft_cfg(
        path,
        format={"prompt_key": "question", "response_key": "answer", "system_prompt": "Be exact."},
    )
    rows = load_sft_dataset(cfg.buffer.trainer_input.experience_buffer)
    assert rows[1]["messages"] == [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "1 + 1 = 2\n#### 2"},
    ]


def test_sft_without_usable_columns_names_the_key(tmp_path):
    path = _jsonl(tmp_path / "sft.jsonl", [{"text": "hello"}])
    with pytest.raises(DataError) as info:
        load_sft_dataset(_sft_cfg(path).buffer)
    message = str(info.value)
    assert message.startswith(
        "buffer.trainer_input.experience_buffer.format.prompt_key: column 'prompt'"
    )
    assert "columns present: text" in message and "messages_key" in message
    with pytest.raises(DataError, match="format.messages_key: column 'messages'"):
        load_sft_dataset(_sft_cfg(path, format={"prompt_type": "messages"}).buffer)


def test_dpo_rows(tmp_path):
    path = _jsonl(tmp_path / "dpo.jsonl", [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}])
    rows = load_sft_dataset(_sft_cfg(path).buffer, schema="dpo")
    assert rows == [{"chosen": "4", "rejected": "5", "prompt": "2+2?"}]
    with pytest.raises(DataError, match="format.rejected_key: column 'rejected'"):
        load_sft_dataset(
            _sft_cfg(_jsonl(tmp_path / "bad.jsonl", [{"prompt": "x", "chosen": "y"}])).buffer,
            schema="dpo",
        )


def test_the_demo_data_loads_through_the_demo_config(tmp_path, monkeypatch):
    from rft_core.config import load_config, resolve_stages
    from rft_core.demo import build_demo

    build_demo(tmp_path / "demo")
    monkeypatch.setenv("RFT_DEMO_DIR", str(tmp_path / "demo"))
    root = Path(__file__).resolve().parents[3]
    sft, rft = resolve_stages(load_config(root / "examples" / "demo" / "grpo_demo.yaml"))
    rows = load_sft_dataset(sft.buffer)
    assert rows and rows[0]["messages"][-1]["role"] == "assistant"
    train = load_taskset(rft.buffer.explorer_input.taskset)
    test = load_taskset(rft.buffer.explorer_input.eval_tasksets[0], is_eval=True)
    assert len(train) > len(test) > 0
    assert "####" in train[0].truth


def test_several_training_tasksets_are_read_one_after_another(tmp_path):
    other = [{"q": f"Name {i}", "a": f"#### {i}"} for i in range(3)]
    d = {
        "model": {"model_path": "/m", "max_model_len": 256, "max_response_tokens": 64},
        "buffer": {
            "batch_size": 3,
            "explorer_input": {
                "tasksets": [
                    {
                        "name": "arith",
                        "path": str(_jsonl(tmp_path / "a.jsonl", ROWS)),
                        "format": {"prompt_key": "question", "response_key": "answer"},
                    },
                    {
                        "name": "names",
                        "path": str(_jsonl(tmp_path / "b.jsonl", other)),
                        "format": {"prompt_key": "q", "response_key": "a"},
                        "default_workflow_type": "simple_workflow",
                    },
                ]
            },
        },
    }
    cfg = load_config_from_dict(d)
    chain = load_training_tasksets(cfg.buffer.explorer_input.all_tasksets)
    assert len(chain) == 8
    reader = TasksetReader(chain, batch_size=3, total_epochs=2)
    batches = list(iter(reader.next_batch, None))
    assert [[(t.taskset, t.index) for t in b] for b in batches[:3]] == [
        [("arith", 0), ("arith", 1), ("arith", 2)],
        [("arith", 3), ("arith", 4), ("names", 0)],
        [("names", 1), ("names", 2), ("arith", 0)],  # the second epoch starts over
    ]
    assert sum(len(b) for b in batches) == 16
    # each task keeps its own taskset's format and workflow
    assert chain[5].prompt == "Name 0" and chain[5].truth == "#### 0"
    assert chain[5].workflow == "simple_workflow" and chain[0].workflow == "math_workflow"


def test_a_row_without_its_truth_or_response_is_an_error_naming_the_row(tmp_path):
    rows = [dict(r) for r in ROWS] + [{"question": "What is 9 + 9?"}]  # row 5: no answer
    taskset = load_taskset(_taskset_cfg(_jsonl(tmp_path / "t.jsonl", rows)))
    assert taskset[4].truth is not None
    with pytest.raises(DataError) as info:
        taskset[5]
    message = str(info.value)
    assert message.startswith("buffer.explorer_input.taskset.format.response_key: row 5 of")
    assert "no 'answer' value" in message
    # SFT: a bad row past the first hundred, and a null response, name the row (no KeyError)
    good = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(150)]
    for bad, index in (
        ([{"question": "q", "ans": "x"}], 150),
        ([{"question": "q", "answer": None}], 150),
    ):
        path = _jsonl(tmp_path / "sft.jsonl", good + bad)
        cfg = _sft_cfg(path, format={"prompt_key": "question", "response_key": "answer"})
        with pytest.raises(DataError) as info:
            load_sft_dataset(cfg.buffer.trainer_input.experience_buffer)
        message = str(info.value)
        assert message.startswith(
            f"buffer.trainer_input.experience_buffer.format.response_key: row {index} of"
        ), message
        assert "no 'answer' value" in message


def test_subsets_under_data_are_chosen_by_subset_name(tmp_path):
    root = tmp_path / "ds"
    for subset, rows in (("main", ROWS[:3]), ("other", ROWS[3:])):
        _parquet(root / "data" / subset / "train-00000-of-00001.parquet", rows)
        _parquet(root / "data" / subset / "test-00000-of-00001.parquet", rows[:1])
    main = load_taskset(_taskset_cfg(root, subset_name="main", split="test"))
    assert len(main) == 1 and main[0].prompt == ROWS[0]["question"]
    assert len(load_taskset(_taskset_cfg(root, subset_name="other"))) == 2
    for subset_name, text in ((None, "several subsets (main, other)"), ("mian", "subsets there")):
        with pytest.raises(DataError, match=re.escape(text)):
            load_taskset(_taskset_cfg(root, subset_name=subset_name))


def test_a_missing_local_path_says_so_without_a_download_hint(tmp_path):
    with pytest.raises(DataError) as info:
        load_taskset(_taskset_cfg(tmp_path / "nope.jsonl"))
    message = str(info.value)
    assert message.startswith("buffer.explorer_input.taskset.path: ")
    assert "does not exist" in message and "download" not in message
