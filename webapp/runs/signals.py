"""What the runs app tells the apps above it, which it never imports (the checkpoints app imports
this one, not the other way): Django signals, sent in the same thread as the change.

    run_finished(sender=Run, run=Run)   a run reached its final status (``actions.finish_run``),
                                        sent after that change committed; the checkpoints app
                                        reads the job dir's checkpoint tree then
                                        (``webapp.checkpoints.receivers``)
"""

from __future__ import annotations

from django.dispatch import Signal

run_finished = Signal()
