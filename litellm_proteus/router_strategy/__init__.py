"""LiteLLM proxy glue: ``routing_strategy: proteus``.

Add to the proxy config::

    litellm_settings:
      callbacks: ["litellm_proteus.router_strategy.proteus_hook"]
    router_settings:
      routing_strategy: proteus
      routing_strategy_args: {...}      # see litellm_proteus/config.py

Importing this package patches LiteLLM once per process (``patch.apply``), which makes the name
valid and installs the strategy on every Router built afterwards.  For the Router SDK, import it
before building ``litellm.Router(routing_strategy="proteus", routing_strategy_args=...)``.
"""

from ..openmp import configure_openmp

# Before torch loads: OpenMP workers spin briefly, then sleep (see litellm_proteus/openmp.py).
configure_openmp("short-spin")

from .patch import ProteusStartupError, active_strategy, apply, install  # noqa: E402

apply()

from .hook import ProteusHook, proteus_hook  # noqa: E402  (needs the patched Router)
from .strategy import ProteusRoutingStrategy  # noqa: E402

__all__ = [
    "ProteusHook",
    "ProteusRoutingStrategy",
    "ProteusStartupError",
    "active_strategy",
    "apply",
    "install",
    "proteus_hook",
]
