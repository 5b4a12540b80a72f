"""The benchmarks' prompt sets, one module per check. Every set except ``tuning`` was
written for its check and never used to tune anything in edgespec."""
