"""How long one step takes: the latency of a shape (GPU type, TP, PP) for a phase and a batch.

A :class:`~pdplan.latency.profile.PhaseProfile` answers the step time of a prefill batch or a
decode step and carries its provenance. :class:`~pdplan.latency.source.ProfileSource` is the one
door the planner uses: it hands out each shape's profile from the best evidence there is, in
this order:

* measured — :mod:`pdplan.latency.importers` reads measured sources (one module per format) and
  :mod:`pdplan.latency.fit` fits them; :mod:`pdplan.latency.calibration` corrects a profile from
  benchmark runs of a live engine;
* composed — :mod:`pdplan.latency.compose` sums AIConfigurator's measured operator tables;
* roofline — :mod:`pdplan.latency.roofline` from the GPU's datasheet, with the efficiencies
  :mod:`pdplan.latency.roofline_fit` calibrates against measured profiles.
"""
