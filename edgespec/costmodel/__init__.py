"""The cost model of speculative decoding: pure arithmetic over numbers handed in.

``adaptive`` (expected tokens, the speedup S(k), best k, the drafter choice, N for a
batch, draft lengths for a batch), ``priors`` (c(n) before the first round, by backend
and weight-type mix) and ``costs`` (what a verify or a batch costs: the priors and their
online refinement). No llama.cpp and no timing of its own: the
ground the drafting policy, the planner, the profiles and the batches stand on.
"""
