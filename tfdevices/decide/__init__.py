"""Decide: which way of running a model is fastest here, and why a step is slow.

* :func:`~tfdevices.decide.tune.tune` builds every sensible way to run a model on this
  machine's devices (one device, mirrored over the k best, the layers split over k,
  multi-worker over several GPUs), runs each in a process of its own, and measures them in
  rounds interleaved in time (:class:`~tfdevices.decide.config.TuneConfig` says how).
* :func:`~tfdevices.decide.advise.advise` reads one captured step (a
  :class:`~tfdevices.verify.PlacementReport`) and says where its time went, with the
  numbers and a fix.

Planning is pure (:mod:`~tfdevices.decide.candidates`: the candidates and their predicted step times;
:mod:`~tfdevices.decide.ties`: which candidates are tied with the fastest, and the winner);
the effects live in :mod:`~tfdevices.decide.runner` (processes), :mod:`~tfdevices.decide.child`
(one candidate in one process; :mod:`~tfdevices.decide.messages`: what it and the parent say) and
:mod:`~tfdevices.decide.probe` (the copy cost between devices).
"""

from tfdevices.decide.advise import Finding, advise, format_findings
from tfdevices.decide.config import TuneConfig
from tfdevices.decide.results import CandidateResult, TuneResult
from tfdevices.decide.tune import tune

__all__ = ["tune", "TuneConfig", "TuneResult", "CandidateResult", "advise", "Finding", "format_findings"]
