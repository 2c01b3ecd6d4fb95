"""Which Ray cluster a run uses: the one ``RAY_ADDRESS`` / ``cluster.ray_address`` names
(probed first, so an address nothing listens on fails in seconds, not after ray.init's minutes of
retries), or a local Ray of the run's own; and the environment variables every actor of the run
gets (``FORWARDED_ENV``: the event stream, the demo dir, plugin dirs)."""

from __future__ import annotations

import logging
import os
import socket
import time

import ray

from rft_core.config import Config
from rft_core.errors import ServiceUnavailable
from rft_core.monitor.events import ENV_REDIS_PREFIX, ENV_REDIS_URL, ENV_RUN_ID
from rft_core.plugins import ENV_PLUGIN_DIRS

log = logging.getLogger("rft_core.launcher")
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_AUTH_ENABLED_NOTICE = "Token authentication is enabled for this Ray cluster"
# what an actor prints is in its own <job_dir>/log/<role>.log (rft_core.actors.actor_log);
# forwarded to the driver as well, a vLLM engine's start-up would bury the run's log
LOG_TO_DRIVER = False

# set in the driver, needed by the actors (Ray starts them with its own environment)
FORWARDED_ENV = (
    ENV_REDIS_URL,
    ENV_REDIS_PREFIX,
    ENV_RUN_ID,
    "RFT_DEMO_DIR",
    "HF_HUB_OFFLINE",
    ENV_PLUGIN_DIRS,
)


def ray_address(cfg: Config) -> str | None:
    """The cluster ``ray.init`` joins: ``RAY_ADDRESS``, else ``cluster.ray_address``. A job
    server address (``http://head:8265``, what the dashboard submits runs to, so often exported
    in a user's shell) cannot be joined by a driver: ``cluster.ray_address`` wins over it when
    set, else the same head's GCS (``head:6379``, Ray's default port) is joined."""
    env = os.environ.get("RAY_ADDRESS")
    if env and env.startswith(("http://", "https://")):
        if cfg.cluster.ray_address:
            return cfg.cluster.ray_address
        host = env.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
        log.warning(
            "RAY_ADDRESS=%s is a Ray job server address; joining that head's cluster at %s:6379 "
            "(set cluster.ray_address to choose another)",
            env,
            host,
        )
        return f"{host}:6379"
    return env or cfg.cluster.ray_address or None


def _probe_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds on an address nothing listens on (ray.init retries for minutes)."""
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    if address == "auto" or ":" not in hostport:
        return
    host, port = hostport.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as err:
        raise ServiceUnavailable(
            f"cannot reach the Ray cluster at {address!r} (RAY_ADDRESS / cluster.ray_address): "
            f"{err}; start one with `ray start --head` or unset RAY_ADDRESS to run on a local Ray"
        ) from err


class _TokenAuthNotice(logging.Filter):
    """Drops Ray's notice that a new local Ray turned token authentication on (its default, so
    nothing to act on); its warning that token authentication is off stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(TOKEN_AUTH_ENABLED_NOTICE)


def _quiet_ray_start_up() -> None:
    """Ray's start-up notices stay out of the run's log (``rft_core.runtime.run_log``)."""
    notices = logging.getLogger(TOKEN_AUTH_LOGGER)
    if not any(isinstance(f, _TokenAuthNotice) for f in notices.filters):
        notices.addFilter(_TokenAuthNotice())


def start_ray(cfg: Config, min_cpus: int = 0) -> bool:
    """Join the given Ray cluster or start a local one (with at least ``min_cpus`` logical
    CPUs). Returns True when this call started (and so must stop) Ray."""
    if ray.is_initialized():
        return False
    _quiet_ray_start_up()
    address = ray_address(cfg)
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    # in a Ray job (the dashboard's launches; Ray's supervisor sets the variable) the actors
    # inherit the job's runtime_env, which carries these; our own would conflict with it
    in_ray_job = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ
    runtime_env = {"env_vars": env} if env and not in_ray_job else None
    namespace = f"rft-{os.getpid()}-{int(time.time())}"
    if address:
        _probe_ray_address(address)
        try:
            ray.init(
                address=address,
                namespace=namespace,
                runtime_env=runtime_env,
                logging_level=logging.WARNING,
                log_to_driver=LOG_TO_DRIVER,
            )
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ServiceUnavailable(
                f"cannot reach the Ray cluster at {address!r} (RAY_ADDRESS / cluster.ray_address): "
                f"{err}; start one with `ray start --head` or unset RAY_ADDRESS to run on a local Ray"
            ) from err
        return True
    # Ray starts workers at nice 15 by default; the actors are the run, so give them normal priority
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(
        # "local": a new Ray of our own even when `ray start` left a cluster address on this
        # machine (ray.init() would join that one, and refuse num_cpus)
        address="local",
        num_cpus=max(2, os.cpu_count() or 2, min_cpus),
        include_dashboard=False,
        namespace=namespace,
        runtime_env=runtime_env,
        logging_level=logging.WARNING,
        log_to_driver=LOG_TO_DRIVER,
    )
    return True
