"""User plugins: Python files in the user's own directories that register workflows, reward
functions and algorithm pieces with our decorators (``rft_core.workflows.register``,
``rft_core.rewards.register``, the ``rft_core.algorithms`` registries), so that a config can
name them.

Directories come from ``trinity run --plugin-dir DIR`` (repeatable) and ``TRINITY_PLUGIN_DIRS``
(several joined with ``os.pathsep``), as Trinity-RFT's ``--plugin-dir`` / ``PLUGIN_DIRS``. Every
``*.py`` directly in a directory (not ``_``-prefixed) is imported once per process, in name
order, as the module ``rft_plugins.<stem>``. ``trinity run`` loads them in the driver before the
config check, and exports the directories in ``TRINITY_PLUGIN_DIRS`` so that the run's Ray
actors (other processes) load them too when they start (``actor_setup.RunActor``).

Differences from Trinity, on purpose: a directory that does not exist, a file that fails to
import and a name registered twice are errors (one line naming the file, and for a duplicate
both registrations), not log lines a run goes on past. Plugins are not copied into the package.

The dashboard never loads plugins from the environment: only a deployment's
``RFT_PLUGIN_DIRS`` setting (webapp/settings.py) names directories for it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from rft_core.errors import RFTError

ENV_PLUGIN_DIRS = "TRINITY_PLUGIN_DIRS"
PACKAGE = "rft_plugins"

log = logging.getLogger(__name__)

_loaded: dict[str, Path] = {}  # module name -> the file it came from


class PluginError(RFTError):
    """A plugin directory or file the user named cannot be used."""


def split_dirs(value: str | None) -> list[str]:
    """``os.pathsep``-joined directories (empty parts dropped)."""
    return [part.strip() for part in (value or "").split(os.pathsep) if part.strip()]


def plugin_dirs_from_env() -> list[str]:
    return split_dirs(os.environ.get(ENV_PLUGIN_DIRS))


def load_plugins(dirs: Iterable[str | os.PathLike]) -> list[Path]:
    """Import every plugin file of ``dirs`` not imported yet; returns the files imported now."""
    imported = []
    for entry in dirs:
        directory = Path(entry).expanduser()
        if not directory.is_dir():
            what = "is not a directory" if directory.exists() else "does not exist"
            raise PluginError(
                f"plugin directory {str(entry)!r} {what} (--plugin-dir / {ENV_PLUGIN_DIRS})"
            )
        for file in sorted(directory.resolve().glob("*.py")):
            if not file.name.startswith("_") and _load_file(file):
                imported.append(file)
    return imported


def load_plugins_from_env() -> list[Path]:
    """``load_plugins`` of ``TRINITY_PLUGIN_DIRS`` (what a run's actors call when they start)."""
    return load_plugins(plugin_dirs_from_env())


def export_plugin_dirs(dirs: Iterable[str | os.PathLike]) -> None:
    """Put ``dirs`` (absolute) in front of ``TRINITY_PLUGIN_DIRS``, which the run's Ray actors
    inherit."""
    merged = [str(Path(d).expanduser().resolve()) for d in dirs]
    for existing in plugin_dirs_from_env():
        resolved = str(Path(existing).expanduser().resolve())
        if resolved not in merged:
            merged.append(resolved)
    if merged:
        os.environ[ENV_PLUGIN_DIRS] = os.pathsep.join(merged)


def _load_file(file: Path) -> bool:
    name = f"{PACKAGE}.{file.stem}"
    if name in _loaded:
        if _loaded[name] != file:
            raise PluginError(
                f"plugin {file}: a plugin module named {file.stem!r} was already loaded from "
                f"{_loaded[name]}; rename one of the files"
            )
        return False
    _ensure_package()
    # registries are imported first, so that an error names the plugin, not a built-in import;
    # here, not at the top: the web process imports this module (torch-free slice)
    from rft_core.algorithms.advantages import ADVANTAGE_FNS
    from rft_core.algorithms.policy_losses import POLICY_LOSSES

    ADVANTAGE_FNS.names(), POLICY_LOSSES.names()  # their built-ins registered before a plugin's
    import rft_core.rewards  # noqa: F401
    import rft_core.workflows  # noqa: F401

    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _loaded[name] = file
    try:
        spec.loader.exec_module(module)
    except RFTError as err:  # a duplicate name, a bad registration
        _forget(name)
        raise PluginError(f"plugin {file}: {err}") from err
    except Exception as err:  # noqa: BLE001 - the user's code: any failure, one line
        _forget(name)
        where = _line_in(file, err)
        raise PluginError(
            f"plugin {file}{where}: failed to import: {type(err).__name__}: {err}"
        ) from err
    log.info("loaded plugin %s as %s", file, name)
    return True


def _forget(name: str) -> None:
    sys.modules.pop(name, None)
    _loaded.pop(name, None)


def _line_in(file: Path, err: BaseException) -> str:
    """``:LINE`` of the innermost frame of ``err`` in ``file`` (or of a SyntaxError there)."""
    if isinstance(err, SyntaxError) and err.lineno and Path(err.filename or "") == file:
        return f":{err.lineno}"
    line = ""
    tb = err.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == file:
            line = f":{tb.tb_lineno}"
        tb = tb.tb_next
    return line


def _ensure_package() -> None:
    if PACKAGE not in sys.modules:
        package = importlib.util.module_from_spec(
            importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        )
        package.__path__ = []  # type: ignore[attr-defined]
        sys.modules[PACKAGE] = package
