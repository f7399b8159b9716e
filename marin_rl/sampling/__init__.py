"""Pieces of the levanter sampler (marin_rl/sampler.py): KV-cache decoder, jitted kernels, token choice, stops."""
