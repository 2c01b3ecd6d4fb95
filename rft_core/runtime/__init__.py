"""The run's machinery: how a config becomes running actors. ``launcher`` (``trinity run``:
the stages in order), ``preflight`` (what a run needs, checked before any actor starts),
``stage`` (one stage's actors on Ray), ``in_process`` (the explorer and trainer in one process:
the CPU demo and the tests) and ``ray_cluster`` (reaching or starting Ray). What each actor uses
is ``rft_core.actors``; the explorer's and trainer's start, ``rft_core.actor_setup``. Imports nothing here: each module is imported by name
(the torch-free slice of ``trinity run --dry-run`` must stay light).
"""
