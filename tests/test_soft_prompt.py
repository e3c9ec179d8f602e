"""π_e reading observations as input embeddings: the soft-token reading and the likelihood guidance."""

import numpy as np
import pytest
import torch

from adwm_core.collection import logged_histories
from adwm_core.data import TRAJECTORIES, read_table
from adwm_core.diffusion.guidance import eta_schedule, gradient_guidance
from adwm_core.diffusion.process import GaussianDiffusion
from adwm_core.model.psi import PsiAdapter
from adwm_core.model.world_model import on_latent_manifold
from adwm_core.policies.base import LanguageModel, LLMPolicy
from adwm_core.policies.loading import load_language_model
from adwm_core.policies.soft_prompt import SoftPromptPolicy


@pytest.fixture(scope="module")
def policy(tiny_policies):
    from conftest import TINY_ENV

    return LLMPolicy(load_language_model(tiny_policies["late"]), TINY_ENV[0])


@pytest.fixture(scope="module")
def logged(tiny_behaviour):
    """(action, history) of logged steps of the tiny cell."""
    return [(row["action"], history) for row, history in logged_histories(read_table(tiny_behaviour, TRAJECTORIES))]


def own_embeddings(reader: SoftPromptPolicy, history) -> list[torch.Tensor]:
    """Each observation of ``history`` as the token embeddings of its text (what the prompt shows)."""
    texts = [o for o, _ in history.steps] + [history.observation]
    return [reader._embed(reader._tokens(" " + text.strip())) for text in texts]


def fits_as_text(policy: LLMPolicy, history) -> bool:
    prompt = policy.template.render(history)
    return all(f"Observation: {o.strip()}" in prompt for o, _ in history.steps)


def test_given_the_observations_own_embeddings_it_acts_and_scores_as_the_text_policy(policy, logged):
    reader = SoftPromptPolicy(policy, PsiAdapter(policy.lm.model.config.n_embd))
    chosen = [(a, h) for a, h in logged if fits_as_text(policy, h)]
    chosen = [chosen[i] for i in np.linspace(0, len(chosen) - 1, 12).astype(int)]
    actions, histories = [a for a, _ in chosen], [h for _, h in chosen]
    assert len({len(h.steps) for h in histories}) > 2  # rows of different lengths share a padded batch
    observations = [own_embeddings(reader, h) for h in histories]
    with torch.no_grad():
        soft_actions = [d.response for d in reader.act_embedded(histories, observations)]
        soft_logprob = reader.logprob_embedded(histories, observations, actions).double().numpy()
    assert soft_actions == [d.response for d in policy.act(histories)]
    np.testing.assert_allclose(soft_logprob, policy.logprob(histories, actions)[0], atol=1e-3)


def test_the_log_likelihood_is_differentiable_in_the_latents_and_fits_the_context(policy, logged):
    torch.manual_seed(0)
    reader = SoftPromptPolicy(policy, PsiAdapter(policy.lm.model.config.n_embd, d_z=16))
    action, history = max(logged, key=lambda pair: len(pair[1].steps))
    latents = torch.randn(len(history.steps) + 1, 16, requires_grad=True)
    logprob = reader.logprob([history], [latents], [action])
    logprob.sum().backward()
    grad = latents.grad.norm(dim=-1)
    assert torch.isfinite(logprob).all() and grad[-1] > 0  # the current observation moves log π_e
    head, last = reader._segments(history, list(reader.soft_tokens(latents.detach())))
    length = sum(len(s) for s in head) + len(reader._tokens(last))
    assert length <= policy.template.max_prompt_tokens
    kept = len(head) // 2
    assert kept < len(latents)  # the longest logged history does not fit: the oldest turns go
    assert torch.all(grad[: len(latents) - kept] == 0)  # and have no say


def test_likelihood_guidance_raises_the_policy_likelihood_on_a_toy_prior(policy, logged):
    """A toy prior N(0, I) over 16-dim latents read through a random ψ: guiding with
    ∇ log π_e(a | ψ(ẑ)) raises the likelihood of a, more so with larger η; η = 0 changes nothing."""
    torch.manual_seed(0)
    reader = SoftPromptPolicy(policy, PsiAdapter(policy.lm.model.config.n_embd, d_z=16))
    action, history = next((a, h) for a, h in logged if not h.steps)
    diffusion = GaussianDiffusion(n_steps=20)
    noise = torch.randn((21, 24, 16), generator=torch.Generator().manual_seed(1))

    def likelihood(z: torch.Tensor, rows=slice(None)) -> torch.Tensor:
        return reader.logprob([history] * len(z), list(z[:, None]), [action] * len(z))

    def sample(eta_max: float) -> torch.Tensor:
        guidance = gradient_guidance(diffusion, likelihood, 1.0, eta_schedule(20, eta_max), chunk=8)
        return diffusion.sample(lambda z, k: torch.zeros_like(z), (24, 16), guidance=guidance, noise=noise,
                                project=on_latent_manifold)

    plain = diffusion.sample(lambda z, k: torch.zeros_like(z), (24, 16), noise=noise, project=on_latent_manifold)
    with torch.no_grad():
        mean = [likelihood(sample(eta)).mean().item() for eta in (0.0, 0.5, 2.0)]
    assert torch.equal(sample(0.0), plain)
    assert mean[0] < mean[1] < mean[2], mean


def test_it_needs_the_weights_and_an_adapter_for_this_llm(policy):
    class Remote(LanguageModel):
        tokenizer, max_context = policy.lm.tokenizer, 256

        def generate(self, prompts, max_new_tokens):
            raise AssertionError("not reached")

        def score(self, prompts, continuations):
            raise AssertionError("not reached")

    with pytest.raises(TypeError, match="retrieval reading"):
        SoftPromptPolicy(LLMPolicy(Remote(), "textworld-express"), PsiAdapter(64))
    with pytest.raises(ValueError, match="train ψ for this π_e"):
        SoftPromptPolicy(policy, PsiAdapter(policy.lm.model.config.n_embd + 1))
