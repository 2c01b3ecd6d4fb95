"""Typed errors a user can cause. The CLI prints ``str(err)`` as one line and exits non-zero;
the dashboard shows the same text on the run page. Internal bugs are not RFTErrors: they raise
loudly with a traceback."""

from __future__ import annotations


class RFTError(Exception):
    """Base class of every user-facing error raised by rft_core."""

    exit_code = 2


class ConfigError(RFTError):
    """A config value is wrong. ``path`` is the dotted YAML path (``buffer.batch_size``).
    ``cross_field``: raised by a rule over several fields (``rft_core.config.problems.refuse``)."""

    cross_field = False

    def __init__(self, path: str, message: str, *, value: object = None, allowed: object = None):
        self.path = path
        self.value = value
        self.allowed = allowed
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self):
        # picklable with its keyword fields, so an error raised in a Ray actor reaches the
        # driver as itself (one clean line, exit 2), not as an UnserializableException
        return (
            _rebuild_config_error,
            (type(self), self.path, self.message, self.value, self.allowed),
        )

    @property
    def errors(self) -> list[ConfigError]:
        """Every error this one stands for, in the order found (``[self]`` for one)."""
        return [self]


class ConfigErrors(ConfigError):
    """Several config errors found in one pass (``rft_core.config.problems``): ``errors`` in
    the order found, each its own ``path: message`` line; ``path`` and ``message`` are the
    first one's, so a caller that handles one ConfigError still names a real problem."""

    def __init__(self, errors: list[ConfigError]):
        first = errors[0]
        super().__init__(first.path, first.message, value=first.value, allowed=first.allowed)
        self._errors = list(errors)
        self.args = ("\n".join(str(e) for e in self._errors),)

    @property
    def errors(self) -> list[ConfigError]:
        return list(self._errors)

    def __reduce__(self):
        return (ConfigErrors, (self._errors,))


def _rebuild_config_error(
    cls: type, path: str, message: str, value: object, allowed: object
) -> ConfigError:
    return cls(path, message, value=value, allowed=allowed)


class DataError(RFTError):
    """A taskset or dataset cannot be read (missing file, missing column, bad format)."""


class CheckpointError(RFTError):
    """A checkpoint is missing, corrupt or does not match the model."""


class ConvertError(CheckpointError):
    """A checkpoint could not be converted to Hugging Face format."""


class EngineUnavailable(RFTError):
    """An optional backend (vLLM, a GPU, NCCL) is asked for but not present on this machine."""


class ServiceUnavailable(RFTError):
    """A service (Ray, Redis, a database) cannot be reached. The message says how to start it."""


class ActorFailed(RFTError):
    """An explorer or trainer actor failed; the run stops with a non-zero exit."""

    exit_code = 1
