"""What comes into the dashboard as a run's events, on top of the apps it writes through (events,
runs, checkpoints, experiments), none of which imports it:

    actions.py     the public functions the ingestor (``workers.ingestor``) calls: store and
                   project one batch of a run's stream, push it to the run's live page
    store.py       a batch of events -> ``RunEvent`` rows with dense seqs, projected, in one
                   transaction
    projection.py  each new event -> metric points, log lines, samples, checkpoints, run status,
                   through the owning apps' actions
    job_dir.py     an existing job dir read in as a run with its whole history (the same store)
    views.py       ``/runs/import/``, the page of that import

A package, not a Django app: it owns no model (``RunEvent`` is ``webapp.events``'s, read by the
live pages in ``webapp.runs``).
"""
