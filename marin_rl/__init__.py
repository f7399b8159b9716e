"""marin-rl: config-driven RL post-training of language models on verifiable rewards."""

__version__ = "0.1.0"
