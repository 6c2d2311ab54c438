"""Offline tooling for PROTEUS: routing-log loaders, the PPO-Lagrangian trainer, evaluation and
benchmarks.  The proxy runtime (``litellm_proteus``) never imports this package."""
