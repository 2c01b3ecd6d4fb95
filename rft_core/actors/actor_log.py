"""One log file per Ray actor in ``<job_dir>/log/`` (the seed's tree): ``log_to_file`` adds a
file handler to the ``rft_core`` loggers of the process an actor runs in.

Files: explorer.log, trainer.log, synchronizer.log (set up by their actors), and for the
helpers ``trainer_rank<R>.log``, ``explorer_engine_<I>.log``, ``queue_<buffer name>.log``.

What an actor prints goes there too (:func:`capture_output`): what is written to its
``sys.stdout`` and ``sys.stderr`` (their ``write`` wrapped in place and still writing, so Ray's
own log keeps it; ``trinity run`` does not forward it to the driver's stderr:
``rft_core.runtime.ray_cluster``)
and the records of other libraries' loggers at WARNING and up (the root logger's, Python
``warnings``, and ``transformers``', which does not propagate to the root) become records of
the role's logger (``<logger>.stdout`` INFO, ``<logger>.stderr`` WARNING, ``<logger>.library``
at the record's level), so its log file and its monitor (the run page's log) hold them. In one
process holding two roles (``InProcessRun``) the role that is running (:func:`activate`) gets
them. Bounded: at most ``RFT_ACTOR_OUTPUT_MAX_LINES`` captured lines per role (default
20,000), each cut at ``MAX_LINE_CHARS``; beyond the cap lines are counted, not kept, and
:func:`report_dropped` (an actor's finish or failure) and :func:`release_output` write
"… N lines dropped" into the role's log. A line a logging
``StreamHandler`` writes for a record that reaches the log by its own way (``rft_core``'s, or a
library's WARNING and up) is not taken from the stream again. Only Python-level writes
are seen: a C extension writing to file descriptor 1 or 2 directly reaches Ray's log only.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ENV_MAX_LINES = "RFT_ACTOR_OUTPUT_MAX_LINES"
DEFAULT_MAX_LINES = 20_000
MAX_LINE_CHARS = 2_000
CAP_REACHED = f"output cap of %d lines reached ({ENV_MAX_LINES}): later lines are counted, not kept"
DROPPED = f"… %d lines dropped (the output cap of %d lines per actor, {ENV_MAX_LINES})"
_STREAM_EMIT = logging.StreamHandler.emit.__code__
LIBRARY_LOGGERS = ("", "transformers")  # the root, and the ones that do not propagate to it


def log_to_file(path: str | Path | None, logger_name: str = "rft_core") -> None:
    """Send ``logger_name``'s records (INFO and up) to ``path`` too; None: nothing."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(logger_name)
    if any(
        isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path.resolve()
        for h in logger.handlers
    ):
        return  # an actor process reused for the same file
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def max_lines() -> int:
    """The cap on captured lines per role (``RFT_ACTOR_OUTPUT_MAX_LINES``), checked."""
    raw = os.environ.get(ENV_MAX_LINES, str(DEFAULT_MAX_LINES))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{ENV_MAX_LINES}={raw!r} must be a whole number of lines (0 or more)")
    return value


@dataclass
class _Role:
    logger_name: str
    max_lines: int
    kept: int = 0
    dropped: int = 0
    reported: int = 0  # of ``dropped``, the lines a "… N lines dropped" line counted already


class _Busy(threading.local):
    on = False


def capture_warnings() -> None:
    """Python warnings into logging (``py.warnings``), so they reach the role's log.
    ``logging.captureWarnings(True)`` does nothing when it ran before in the process, even if
    something replaced ``warnings.showwarning`` since (a ``warnings.catch_warnings`` block, as
    pytest opens around each test): then it is turned off and on again."""
    logging.captureWarnings(True)
    if getattr(warnings.showwarning, "__module__", None) != "logging":
        logging.captureWarnings(False)
        logging.captureWarnings(True)


class _ActorOutput:
    """The process's captured output, routed to the active role's logger (module docstring)."""

    def __init__(self) -> None:
        self.roles: dict[str, _Role] = {}
        self.active: str | None = None
        self._lock = threading.Lock()
        self._partial: dict[str, str] = {}
        self._busy = _Busy()  # a line being logged that comes back through stderr: not again
        self._hooks: dict[str, _WriteHook] = {}
        self._library: _LibraryHandler | None = None

    # -- roles --------------------------------------------------------------------------------

    def add(self, role: str, logger_name: str) -> None:
        with self._lock:
            self.roles[role] = _Role(logger_name, max_lines())
            self.active = role
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            hook = self._hooks.get(name)
            if hook is None or hook.stream is not stream or not hook.on:
                self._hooks[name] = _WriteHook(stream, name, self)
        if self._library is None:
            self._library = _LibraryHandler(self)
            for name in LIBRARY_LOGGERS:
                logging.getLogger(name).addHandler(self._library)
        capture_warnings()

    def report_dropped(self, role: str) -> None:
        """Writes "… N lines dropped" into the role's log for the lines dropped since the last report."""
        self.flush()
        with self._lock:
            state = self.roles.get(role)
            if state is None or state.dropped == state.reported:
                return
            count, state.reported = state.dropped - state.reported, state.dropped
        self._log(f"{state.logger_name}.output", logging.WARNING, DROPPED, count, state.max_lines)

    def release(self, role: str) -> None:
        self.report_dropped(role)
        with self._lock:
            self.roles.pop(role, None)
            if self.active == role:
                self.active = next(iter(self.roles), None)
            last = not self.roles
        if last:
            for hook in self._hooks.values():
                hook.remove()
            self._hooks.clear()
            if self._library is not None:
                for name in LIBRARY_LOGGERS:
                    logging.getLogger(name).removeHandler(self._library)
                self._library = None

    # -- lines --------------------------------------------------------------------------------

    def logged_elsewhere(self, frame) -> bool:
        """A write by a logging ``StreamHandler`` (a few frames up: another hook may wrap
        ours) of a record that reaches the run's log by its own way: an ``rft_core`` record
        (its role's handlers) or one that reaches the library handler; such a line is not
        captured a second time from the stream."""
        for _ in range(3):
            if frame is None:
                return False
            if frame.f_code is _STREAM_EMIT:
                record = frame.f_locals.get("record")
                return isinstance(record, logging.LogRecord) and self._reaches_log(record)
            frame = frame.f_back
        return False

    def _reaches_log(self, record: logging.LogRecord) -> bool:
        if record.name == "rft_core" or record.name.startswith("rft_core."):
            return True
        if self._library is None or record.levelno < self._library.level:
            return False
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if self._library in logger.handlers:
                return True
            if not logger.propagate:
                return False
            logger = logger.parent  # type: ignore[assignment]
        return False

    def feed(self, stream: str, text: str) -> None:
        if self._busy.on or not text:
            return
        with self._lock:
            pending = self._partial.get(stream, "") + text
            *lines, rest = pending.split("\n")
            if len(rest) > MAX_LINE_CHARS:  # a line without an end (a progress bar) still goes
                lines.append(rest)
                rest = ""
            self._partial[stream] = rest
        for line in lines:
            self.emit(logging.WARNING if stream == "stderr" else logging.INFO, line, stream)

    def flush(self) -> None:
        with self._lock:
            partial, self._partial = self._partial, {}
        for stream, line in partial.items():
            if line:
                self.emit(logging.WARNING if stream == "stderr" else logging.INFO, line, stream)

    def emit(self, level: int, text: str, source: str) -> None:
        """One captured line into the active role's log, within the role's cap."""
        text = text.rsplit("\r", 1)[-1] if "\r" in text.rstrip("\r") else text.rstrip("\r")
        if not text.strip():
            return
        with self._lock:
            state = self.roles.get(self.active) if self.active is not None else None
            if state is None:
                return
            keep = state.kept < state.max_lines
            if keep:
                state.kept += 1
            else:
                state.dropped += 1
            notice = state.dropped == 1 and not keep
            cap = state.max_lines
            logger_name = state.logger_name
        if len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]}… ({len(text) - MAX_LINE_CHARS} more characters)"
        if notice:
            self._log(f"{logger_name}.output", logging.WARNING, CAP_REACHED, cap)
        elif keep:
            self._log(f"{logger_name}.{source}", level, "%s", text)

    def _log(self, logger_name: str, level: int, message: str, *args: object) -> None:
        # a handler that writes to stderr (a root StreamHandler) must not feed the line back
        self._busy.on = True
        try:
            logging.getLogger(logger_name).log(level, message, *args)
        finally:
            self._busy.on = False


class _WriteHook:
    """``stream.write`` wrapped in place (the stream object stays the same, as W&B's console
    capture does it; a wrapper object in ``sys.stdout`` broke a W&B run started after it): the
    text goes to the stream, then to the capture."""

    def __init__(self, stream, name: str, output: _ActorOutput):
        self.stream = stream
        self.on = True
        self._original = stream.write
        self._own = vars(stream).get("write")  # an instance's own write (another hook), or None

        def write(text, /):
            written = self._original(text)
            if self.on and not output.logged_elsewhere(sys._getframe(1)):
                try:
                    output.feed(name, text)
                except Exception:  # noqa: BLE001 - a print must never fail because of its capture
                    pass
            return written

        self._write = write
        stream.write = write

    def remove(self) -> None:
        """The stream's own ``write`` back; when another hook wrapped ours since (W&B), ours
        stays in its chain but only passes the text on."""
        self.on = False
        if vars(self.stream).get("write") is self._write:
            if self._own is None:
                del self.stream.write  # the class's write again
            else:
                self.stream.write = self._own


class _LibraryHandler(logging.Handler):
    """Other libraries' WARNING+ records (not ``rft_core``'s: those have their own handlers)."""

    def __init__(self, output: _ActorOutput):
        super().__init__(logging.WARNING)
        self.output = output
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "rft_core" or record.name.startswith("rft_core."):
            return
        if getattr(record, "_rft_captured", False):  # met on "transformers", then on the root
            return
        record._rft_captured = True
        try:
            self.output.emit(record.levelno, self.format(record), "library")
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


_OUTPUT = _ActorOutput()


def capture_output(role: str, logger_name: str = "rft_core") -> None:
    """From now on this process's prints and library warnings are records of ``logger_name``'s
    children while ``role`` is active (the latest role captured is)."""
    _OUTPUT.add(role, logger_name)


def activate(role: str) -> None:
    """``role`` (captured in this process) gets the output from now on."""
    if role in _OUTPUT.roles:
        _OUTPUT.active = role


def report_dropped(role: str) -> None:
    """Writes "… N lines dropped" in ``role``'s log when its cap dropped lines since the last report
    (an actor's ``finish`` and ``failed`` call it before their status: a Ray actor is killed
    after its run, not closed)."""
    _OUTPUT.report_dropped(role)


def captured_roles() -> list[str]:
    """The roles whose output this process captures now."""
    return list(_OUTPUT.roles)


def release_output(role: str) -> None:
    """Ends ``role``'s capture: its last partial line, then "… N lines dropped" when the cap
    dropped some; the streams' ``write`` and the handlers go back once no role is captured."""
    _OUTPUT.release(role)
