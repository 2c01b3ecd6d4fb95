"""The broken-config corpus: every file in broken_configs/ must be rejected with a ConfigError
whose one-line message starts with the YAML path named in the file's ``# expect:`` header (and
holds the text of its ``# contains:`` header)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from run_configs import dry_run

from rft_core.config import load_config
from rft_core.errors import ConfigError

CORPUS = Path(__file__).parents[1] / "broken_configs"
FILES = sorted(CORPUS.glob("*.yaml"))


def _header(path: Path, key: str) -> str | None:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}: "):
            return line.removeprefix(f"# {key}: ")
    return None


def test_the_corpus_is_large_enough():
    assert len(FILES) >= 30
    assert all(_header(f, "expect") for f in FILES), "every broken config names the path it expects"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_broken_config_is_rejected_naming_its_path(path: Path):
    expected = _header(path, "expect")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    message = str(err.errors[0])  # the first of its errors, one line each
    assert err.path == expected, message
    assert message.startswith(f"{expected}: "), message
    assert all("\n" not in str(e) for e in err.errors)
    contains = _header(path, "contains")
    if contains:
        assert contains in message, message


def test_trinity_run_dry_run_prints_one_line_and_exits_non_zero():
    env = dict(os.environ)
    env.pop("RFT_TEST_SURELY_UNSET_VAR_42", None)
    proc = dry_run(CORPUS / "typo_taskset_format.yaml", env=env, timeout=120)
    assert proc.returncode == ConfigError.exit_code != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "buffer.explorer_input.taskset.format.promt_key" in lines[0]
    assert "did you mean 'prompt_key'?" in lines[0]
    assert proc.stdout == ""
