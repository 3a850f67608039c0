"""rlkeep: preserve, publish and reclaim a finished agentic RL run."""
