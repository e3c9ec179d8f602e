"""World-model modules: observation and history encoders, score network, heads, ψ adapter."""
