"""The choice before generating: the pair that fits this machine, the drafter, k, and why.

``planner`` (``plan`` -> ``Plan``), ``record`` (the ``Plan`` record and its
``Explanation``), ``choice`` (the pair that fits, then the drafter and k), ``costs``
(the cost model's inputs for a pair), ``pairing`` (every local model that can draft for a
named target, ranked by the cost model) and ``explain`` (the choice in words).

Reads the profiles, the catalog and the cost model; knows nothing of decoding or
batches: ``edgespec.load`` and the CLI hand its ``Plan`` to the Engine.
"""
