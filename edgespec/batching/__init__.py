"""Many sequences per decode, and resumable JSONL batches.

``runner`` (``BatchRunner``: continuous batching over one multi-sequence context),
``sequence`` (``BatchSeq``: one sequence of a batch, around the decoding sequence),
``protocol`` (``BatchEngine``: what batching asks of the engine),
``run`` (``PreparedBatch``: a batch job, every request checked first, N chosen or checked),
``jobs`` (the JSONL input, read and checked line by line), ``writer`` (the
append-only JSONL output: whole lines, a torn one mended, resuming) and ``results``
(``run_batch``: the pending jobs through the engine, each outcome settled).

Each sequence runs the round of ``edgespec.decoding``; knows nothing of plans,
measuring, HTTP or the terminal.
"""
