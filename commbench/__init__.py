"""commbench: collective-communication microbenchmarks for LLM parallelism.

Runs the traffic of DP, ZeRO/FSDP, TP, PP, CP and EP at real model sizes on the process
groups a framework builds, fits alpha-beta link models and plans parallel configs.
"""

__version__ = "0.1.0"
