"""LLM policies: protocol, transformers and vLLM backends, prompts, action parsing, action-span log-probs, ε-mixing."""
