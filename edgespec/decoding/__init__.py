"""One stream: propose -> verify -> accept -> roll back, and the reply it makes.

``drafting`` (an engine's drafting state in one object: the drafter, its policy, k, the
learned costs, the memory), ``drafters`` (the Drafter protocol: a draft model, prompt
lookup, none), ``memory`` (prompt lookup plus the memory of earlier answers), ``policy``
(each round's draft length, learned online), ``params`` (the sampling options),
``sampling`` (pure numpy: logits -> probabilities, acceptance, residuals), ``speculative``
(one round, read top to bottom), ``sequence``
(one decoding sequence, request to ``Done``: what the single stream and every batch
sequence share), ``generation`` (one generation on the engine's context: prefix reuse,
prefill, the rounds), ``reply``
and ``text`` (tokens -> events, end of generation, stop strings; ``max_tokens`` is the
sequence's budget),
``logprob`` (a verify row's log-softmax, when asked), ``suffix`` and ``suffix_store``
(the memory of earlier outputs and its opt-in store on disk: ``suffix_codec`` its format,
``store_files`` its files, folder and lock, checked as ssh checks its own).

Knows llama.cpp only through ``edgespec.llama`` and grammars only through
``edgespec.constraints``; knows nothing of batches, plans, HTTP or the terminal, and no
file but the suffix memory's own store.
"""
