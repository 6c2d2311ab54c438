"""``proteus bench``: decision latency, micro-batcher throughput, proxy overhead and memory."""
