"""Training loops for the world model and the ψ adapter."""
