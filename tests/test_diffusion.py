import math

import numpy as np
import pytest
import torch

from adwm_core.diffusion.process import GaussianDiffusion, classifier_free
from adwm_core.diffusion.respaced import sample_respaced
from adwm_core.diffusion.schedule import betas_from_alpha_bar, cosine_alpha_bar, posterior_variance, respaced_levels

MEANS = torch.tensor([[-2.0, 0.0], [2.0, 1.0]])
COVS = torch.stack([torch.tensor([[0.3, 0.1], [0.1, 0.2]]), torch.tensor([[0.2, -0.05], [-0.05, 0.4]])])
WEIGHTS = torch.tensor([0.3, 0.7])


def _mixture(n: int, generator: torch.Generator) -> torch.Tensor:
    component = torch.multinomial(WEIGHTS, n, replacement=True, generator=generator)
    chol = torch.linalg.cholesky(COVS)[component]
    return MEANS[component] + (chol @ torch.randn(n, 2, 1, generator=generator))[..., 0]


class EpsNet(torch.nn.Module):
    def __init__(self, n_steps: int, width: int = 128) -> None:
        super().__init__()
        self.step_embedding = torch.nn.Embedding(n_steps, width)
        self.inp = torch.nn.Linear(2, width)
        self.body = torch.nn.Sequential(torch.nn.SiLU(), torch.nn.Linear(width, width), torch.nn.SiLU(),
                                        torch.nn.Linear(width, width), torch.nn.SiLU(), torch.nn.Linear(width, 2))

    def forward(self, z, k):
        return self.body(self.inp(z) + self.step_embedding(k))


def test_cosine_schedule_decreases_to_near_zero_and_variances_are_consistent():
    alpha_bar = cosine_alpha_bar(50)
    assert len(alpha_bar) == 50 and np.all(np.diff(alpha_bar) < 0)
    assert 0.99 < alpha_bar[0] < 1 and alpha_bar[-1] < 1e-3
    betas = betas_from_alpha_bar(alpha_bar)
    np.testing.assert_allclose(np.cumprod(1 - betas), alpha_bar, rtol=1e-12)
    assert posterior_variance(alpha_bar)[0] == 0 and np.all(posterior_variance(alpha_bar)[1:] < betas[1:])


def test_step_guidance_and_cfg_match_hand_computation():
    diffusion = GaussianDiffusion(np.array([0.9, 0.5, 0.1]))
    z, eps = torch.tensor([[1.0, -2.0]], dtype=torch.float64), torch.tensor([[0.5, 0.25]], dtype=torch.float64)
    beta = 1 - 0.1 / 0.5
    expected = (z - beta / math.sqrt(1 - 0.1) * eps) / math.sqrt(1 - beta)
    torch.testing.assert_close(diffusion.step(z, 2, eps), expected)
    sigma = math.sqrt(beta * (1 - 0.5) / (1 - 0.1))
    torch.testing.assert_close(diffusion.step(z, 2, eps, torch.ones_like(z)), expected + sigma)
    torch.testing.assert_close(diffusion.step(z, 0, eps, torch.ones_like(z)), (z - 0.1 / math.sqrt(0.1) * eps) / math.sqrt(0.9))
    k = torch.tensor([1])
    z0 = torch.tensor([[0.3, -0.7]], dtype=torch.float64)
    z_k = diffusion.q_sample(z0, k, eps)
    torch.testing.assert_close(z_k, math.sqrt(0.5) * z0 + math.sqrt(0.5) * eps)
    torch.testing.assert_close(diffusion.predict_z0(z_k, k, eps), z0)  # Eq. (app_denoised) inverts the noising
    cond, uncond = torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0])
    torch.testing.assert_close(classifier_free(cond, uncond, 1.0), torch.tensor([1.5, 5.0]))
    torch.testing.assert_close(classifier_free(cond, uncond, 0.0), cond)
    # additive guidance: the sampler steps with ε̂ − g_k
    g = torch.tensor([[0.1, -0.2]], dtype=torch.float64)
    torch.manual_seed(0)
    guided = diffusion.sample(lambda z, k: torch.zeros_like(z), (1, 2), guidance=lambda z, k, eps: g, dtype=torch.float64)
    torch.manual_seed(0)
    zk = torch.randn((1, 2), dtype=torch.float64)
    for step in (2, 1, 0):
        noise = torch.randn((1, 2), dtype=torch.float64) if step > 0 else None
        zk = diffusion.step(zk, step, -g, noise)
    torch.testing.assert_close(guided, zk)


def test_the_process_owns_the_parametrisation_its_loss_and_the_conversion_to_eps():
    alpha_bar = np.array([0.9, 0.5, 0.1])
    eps_process, z0_process = GaussianDiffusion(alpha_bar), GaussianDiffusion(alpha_bar, prediction="z0")
    z0 = torch.tensor([[0.3, -0.7], [1.0, 0.0]], dtype=torch.float64)
    noise = torch.tensor([[0.5, 0.25], [-1.0, 2.0]], dtype=torch.float64)
    k = torch.tensor([1, 2])
    z_k = eps_process.q_sample(z0, k, noise)
    # a perfect network has zero loss and gives back the true noise under either parametrisation
    torch.testing.assert_close(eps_process.to_eps(z_k, k, noise), noise)
    torch.testing.assert_close(z0_process.to_eps(z_k, k, z0), noise)
    assert eps_process.denoising_loss(noise, z0, noise, k).abs().max() == 0
    assert z0_process.denoising_loss(z0, z0, noise, k).abs().max() == 0
    # ε-prediction weighs level k by 1 − ᾱ_k; z_0-prediction weighs every level alike
    off = torch.ones_like(z0)
    torch.testing.assert_close(eps_process.denoising_loss(noise + off, z0, noise, k),
                               torch.tensor([1 - 0.5, 1 - 0.1], dtype=torch.float64))
    torch.testing.assert_close(z0_process.denoising_loss(z0 + off, z0, noise, k), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="prediction='v'"):
        GaussianDiffusion(alpha_bar, prediction="v")


def test_a_trained_model_samples_a_2d_mixture_back():
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    diffusion = GaussianDiffusion(n_steps=50)
    net = EpsNet(50)
    optimizer = torch.optim.Adam(net.parameters(), lr=2e-3)
    for _ in range(3000):
        z0 = _mixture(256, generator)
        k = diffusion.sample_steps(256, generator)
        noise = torch.randn(z0.shape, generator=generator)
        loss = ((net(diffusion.q_sample(z0, k, noise), k) - noise) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        samples = diffusion.sample(net, (8000, 2), generator=generator)
    component = torch.cdist(samples, MEANS).argmin(dim=1)
    for c in range(2):
        part = samples[component == c]
        # tolerances: ~3x the Monte Carlo error of 8000 samples plus model error of a 3000-step fit
        assert len(part) / len(samples) == pytest.approx(WEIGHTS[c].item(), abs=0.04)
        torch.testing.assert_close(part.mean(0), MEANS[c], atol=0.12, rtol=0)
        torch.testing.assert_close(torch.cov(part.T), COVS[c], atol=0.1, rtol=0)


def test_respaced_sampling_is_ancestral_at_eta_1_and_ddim_at_eta_0():
    """Over all K levels with η = 1, sample_respaced draws what the K-level ancestral sampler draws
    from the same noise rows (with and without a projection of ẑ_0); with η = 0 it is DDIM: the
    process's deterministic sampler, blind to every noise row but z_K."""
    torch.manual_seed(0)
    diffusion, net = GaussianDiffusion(n_steps=50), EpsNet(50)
    noise = torch.randn(51, 16, 2)
    project = torch.nn.functional.normalize
    assert respaced_levels(50, 10)[0] == 49 and respaced_levels(50, 10)[-1] == 0
    assert len(set(respaced_levels(50, 10))) == 10 and respaced_levels(50, 80) == list(range(49, -1, -1))
    with torch.no_grad():
        for projection in (None, project):
            torch.testing.assert_close(sample_respaced(diffusion, net, noise, 50, 1.0, projection),
                                       diffusion.sample(net, (16, 2), noise=noise, project=projection),
                                       rtol=1e-4, atol=1e-4)  # float32 here, float64 coefficients there
        deterministic = sample_respaced(diffusion, net, noise, 10, 0.0)
        torch.testing.assert_close(deterministic, diffusion.denoise_deterministic(net, noise[0], 10),
                                   rtol=1e-4, atol=1e-4)
        other_rows = torch.cat([noise[:1], torch.randn(50, 16, 2)])
        assert torch.equal(sample_respaced(diffusion, net, other_rows, 10, 0.0), deterministic)
        assert not torch.allclose(sample_respaced(diffusion, net, other_rows, 10, 1.0),
                                  sample_respaced(diffusion, net, noise, 10, 1.0))
