"""Capacity planning for the status-dissemination overlay: the stochastic model of seed 001.

``trees`` (broker trees, the paper's ``T_k``), ``workloads`` (per-broker, per-class rates),
``model`` (equations 1-14, per-broker figures, break-even against flooding), ``simulation``
(a seeded discrete-event check of the model), ``loading`` (the YAML input of ``gridstat
analyze``), ``plotting`` (PNG, needs matplotlib) and ``live`` / ``live_broker`` /
``live_routing`` (a live run of broker processes for ``gridstat analyze --live``, measured
against the model by ``spark/model_validation.py``). Nothing here runs on the data plane:
roles do not import it; the CLI and the benchmarks do. See ``docs/analysis.md``.

Layer: a tool over the runtime, shipped with it (the README's layout table; ``.importlinter``).
"""
