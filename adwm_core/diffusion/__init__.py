"""Diffusion process: noise schedules as pure functions, DDPM step, classifier-free and additive guidance."""
