"""``trinity``: the command line of rft_core.

    trinity run --config X.yaml [--plugin-dir DIR ...] [--dry-run] [--quiet] [key=value ...]
    trinity convert --checkpoint-dir D [--base-model-dir B] [--step 100,200] [--dtype auto|bf16|fp32] [--force]
    trinity init-demo [--out DIR] [--force] [--judge] [--synthetic qwen2.5-1.5b|smoke]

Each sub-command's work lives in the module named after its concept (``launcher``, ``convert``,
``demo``); this file only parses arguments and turns user errors into one line and an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rft_core.dtypes import AUTO, SHORT_ALIASES
from rft_core.errors import ConfigError, RFTError

# sub-command -> (module, function); the function takes the parsed args and returns an exit code.
COMMANDS = {
    "run": ("rft_core.runtime.launcher", "cli_run"),
    "convert": ("rft_core.convert", "cli_convert"),
    "init-demo": ("rft_core.demo", "cli_init_demo"),
}
# checks of auxiliary model directories a sub-command's preflight makes that belong to modules
# above rft_core.runtime (the demo judge's: built on request, refused when of an older recipe):
# (module, function), registered here so that rft_core.runtime imports no demo module
AUX_MODEL_CHECKS_OF = {"run": (("rft_core.demo", "demo_judge_problem"),)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trinity", description="Reinforcement fine-tuning of LLMs"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an experiment from a Trinity-RFT YAML config")
    run.add_argument("--config", required=True, help="path to the YAML config")
    run.add_argument(
        "--plugin-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="load the *.py files of DIR (repeatable; also $TRINITY_PLUGIN_DIRS): workflows, "
        "rewards and algorithm pieces registered there can be named in the config",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="load and validate the config, print it resolved, run nothing",
    )
    run.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="warnings and errors only: no progress bar, no stage, eval, checkpoint or progress "
        "lines in the log (as log.level=warning)",
    )
    run.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides applied on top of the YAML, e.g. buffer.batch_size=8",
    )

    conv = sub.add_parser(
        "convert", help="convert global_step_* checkpoints to Hugging Face safetensors"
    )
    conv.add_argument(
        "--checkpoint-dir", required=True, help="job dir, one global_step_N, or a path inside one"
    )
    conv.add_argument(
        "--base-model-dir",
        default=None,
        help="config/tokenizer source when huggingface/config.json is missing",
    )
    conv.add_argument(
        "--step", default=None, help="comma-separated steps to convert, e.g. 100,200 (default: all)"
    )
    conv.add_argument(
        "--dtype",
        default="auto",
        choices=[AUTO, *SHORT_ALIASES],
        help="dtype of the written weights",
    )
    conv.add_argument(
        "--force", action="store_true", help="convert again even when model.safetensors exists"
    )

    demo = sub.add_parser(
        "init-demo", help="generate the tiny demo model and synthetic GSM8K-style data"
    )
    demo.add_argument(
        "--out", default=None, help="output directory (default: $RFT_DEMO_DIR or ./var/demo)"
    )
    demo.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty directory that is not a demo dir",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the generated model and data")
    demo.add_argument(
        "--judge",
        action="store_true",
        help="also train the demo judge (var/demo/judge: the tiny model taught on the CPU, in 15-20 "
        "CPU-minutes, to judge the arithmetic answers; rft_core/demo_judge.py); "
        "examples/demo/judge_ruler_trained_judge.yaml needs it",
    )
    demo.add_argument(
        "--synthetic",
        default=None,
        choices=["qwen2.5-1.5b", "smoke"],
        help="instead of the demo: a random model of this shape and a GSM8K-shaped taskset of "
        "128-token prompts (default --out: $RFT_SYNTHETIC_DIR or ./var/synthetic); what "
        "examples/gpu/grpo_synthetic_1p5b.yaml runs",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module_name, func_name = COMMANDS[args.command]
    if args.command in AUX_MODEL_CHECKS_OF:
        from rft_core.runtime.preflight import register_aux_model_check  # torch: run only

        for check_module, check_name in AUX_MODEL_CHECKS_OF[args.command]:
            register_aux_model_check(getattr(importlib.import_module(check_module), check_name))
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        return int(func(args) or 0)
    except RFTError as err:
        # a config with several errors: one line each (ConfigErrors), all in one go
        for one in err.errors if isinstance(err, ConfigError) else [err]:
            print(f"trinity {args.command}: error: {one}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"trinity {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
