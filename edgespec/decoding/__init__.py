"""One stream of decoding: drafters (prompt lookup, suffix memory, model), the policy, sampling, the round."""
