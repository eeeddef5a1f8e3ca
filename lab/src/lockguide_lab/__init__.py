"""lockguide_lab: the machinery that breaks locks on purpose.

The reference library, :mod:`lockguide`, is what a reader copies; this package
is the lab beside it, in three parts:

* :mod:`lockguide_lab.testbed`: servers to start, freeze, crash and restart
  (real ``redis-server`` processes, or fakeredis), the one TCP link that
  delays, cuts, retargets, observes and gates, and the one fake clock;
* :mod:`lockguide_lab.scenarios`: failure scenarios run broken and fixed on a
  testbed, their timelines, outcomes and figures;
* :mod:`lockguide_lab.audit`: the audit that runs any lock against the
  guide's checklist (the ``lockguide-audit`` command).

It reaches ``lockguide`` through its public API (a lock's ``clock=`` and
``on_attempt=``, never a patched module); ``lockguide`` never imports it.

Install it from a clone with ``pip install . ./lab`` (or, once both are published, the
``lab`` extra: ``pip install 'lockguide[lab]'``).
"""
