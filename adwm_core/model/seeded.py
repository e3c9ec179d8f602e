"""Small networks whose initial weights depend on their seed alone.

``torch.manual_seed`` seeds the one generator every thread of the process shares, and building
any ``nn.Linear`` draws from it. A cell's flow runs stages side by side in threads (the ψ
adapter's training beside the baselines stage, which loads a world model and builds FQE's
Q-network), so a network seeded that way starts from weights that depend on what the other
threads drew meanwhile.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def seeded_linears(net: nn.Sequential, seed: int) -> nn.Sequential:
    """``net``'s Linear layers drawn as nn.Linear draws them (Kaiming-uniform weights, biases
    uniform in ±1/√fan_in), in order, from a generator of their own seeded with ``seed``: the
    values ``torch.manual_seed(seed)`` followed by building ``net`` gives with nothing drawing
    beside it."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in net:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
                bound = 1 / math.sqrt(layer.in_features)
                nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return net
