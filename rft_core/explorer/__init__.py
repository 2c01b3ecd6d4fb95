"""The explorer side of a run: ``explorer`` (the actor: tasks → workflows → experiences into
the buffer, evaluations, weight syncs received) and ``rollout_samples`` (which rollouts of a
step are kept for the dashboard's rollout explorer). The trainer side is ``rft_core.trainer``;
what both exchange is ``rft_core.experience``.
"""
