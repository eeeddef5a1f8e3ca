"""lockguide_lab: the machinery that breaks locks on purpose.

The reference library, :mod:`lockguide`, is what a reader copies; this package
is the lab beside it: failure scenarios run broken and fixed on fakeredis or
real ``redis-server`` processes, their timelines and figures, and the audit
that runs any lock against the guide's checklist. It imports ``lockguide``
through its public API; ``lockguide`` never imports it.

Install it with the ``lab`` extra: ``pip install 'lockguide[lab]'``.
"""
