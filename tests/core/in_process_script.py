"""Run an ``InProcessRun`` step by step in a process where ``import ray`` fails (the device
machine has no Ray), and write what each step reported as JSON.

    python in_process_script.py CONFIG.json OUT.json
"""

import json
import sys

sys.modules["ray"] = None  # type: ignore[assignment]  # `import ray` raises ImportError

from rft_core.config import load_config_from_dict  # noqa: E402
from rft_core.runtime.in_process import InProcessRun  # noqa: E402


def main(config_path: str, out_path: str) -> None:
    with open(config_path) as f:
        cfg = load_config_from_dict(json.load(f))
    run = InProcessRun(cfg)
    run.start()
    reports = []
    while (report := run.step()) is not None:
        reports.append(report)
    summaries = run.finish()
    run.close()
    ray_modules = sorted(m for m, v in sys.modules.items() if m.split(".")[0] == "ray" and v)
    with open(out_path, "w") as f:
        json.dump({"reports": reports, "summaries": summaries, "ray": ray_modules}, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
