"""PROTEUS: SLA-aware LLM routing for the LiteLLM proxy.

The accuracy target tau (the fraction of answers that must be correct) is a runtime input; one
trained model serves every tau.  This module stays import-light: torch and transformers are only
imported by the modules that need them, so ``import litellm_proteus`` is cheap.
"""

__version__ = "0.1.0"
