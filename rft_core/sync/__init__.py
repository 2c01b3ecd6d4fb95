"""Weight sync between the trainer and the explorer: when (``schedule``), how a version is
published and awaited (``synchronizer``: memory, checkpoint or nccl), the broadcast itself
(``nccl``) and the explore job's watch on the job dir when no synchronizer actor runs
(``checkpoint_watch``). Checkpoint-based sync writes and reads steps through
:mod:`rft_core.checkpoint.store`."""
