"""What every run actor uses, whatever its role (explorer, trainer and its ranks, engine pool,
buffer queue, synchronizer): ``actor_log`` (one log file per actor, and what it prints captured
into the run's log) and ``placement`` (which actor gets which GPUs). Below
``rft_core.runtime`` (the launcher that starts the actors) and below the actors' own packages,
which import it. The explorer's and trainer's shared start (plugins, logging, seeds) is
``rft_core.actor_setup``: it loads the user's plug-ins, which import workflows and engines, so it
sits above them.
"""
