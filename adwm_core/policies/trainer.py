"""Local policies trained from an environment's gold trajectories (no downloads).

The local analogue of the paper's SFT → DPO/ETO/LEAP iterates: supervised
fine-tuning on the engine's expert trajectories of *training* variations,
with checkpoints saved along the way, so that early checkpoints are weak
policies and later ones strong (graded quality). Two starting points:

- a tiny GPT-2 built from scratch with a byte-level BPE tokenizer trained
  here on the same prompts (``new_tiny_lm``) — fast enough for tests;
- any Hugging Face causal LM, e.g. SmolLM2-135M-Instruct, fully or through
  LoRA adapters (peft), merged before saving.

Examples are rendered with the policy's own :class:`PromptTemplate` (both
phrasing variants) and the loss covers only the action continuation
``" " + a + "\\n"`` and the end-of-sequence token, located by the same
longest-common-prefix rule as scoring. Every checkpoint is an ordinary
Hugging Face model folder that loads by path.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from ..envs.agents import EpsilonGoldAgent
from ..envs.episodes import Episode, EpisodeSpec
from ..envs.runner import EpisodeRunner
from ..specs import EnvSpec, Progress
from .local_models import save_model_dir
from .prompts import (
    MAX_NEW_TOKENS,
    VARIANTS,
    History,
    PromptTemplate,
    action_continuation,
    episode_histories,
    instruction,
)
from .scoring import action_span, context_limit, fit_context

EOS = "<|endoftext|>"


@dataclass(frozen=True)
class Example:
    history: History
    action: str


def histories_of(episode: Episode) -> list[Example]:
    """Every step of ``episode`` as (history before the step, action taken)."""
    turns = [(turn.observation, turn.action, turn.admissible) for turn in episode.turns]
    return [Example(h, turn.action) for h, turn in zip(episode_histories(episode.task_description, turns), episode.turns)]


def gold_examples(
    env_name: str,
    env_kwargs: Mapping,
    instances: Sequence[tuple[str, int]],
    *,
    max_steps: int = 30,
    n_workers: int | None = None,
) -> list[Example]:
    """Steps of the engine's expert on the (task, variation) ``instances`` (successful episodes only)."""
    with EpisodeRunner(env_name, env_kwargs, n_workers=n_workers, envs_per_worker=4, max_steps=max_steps) as runner:
        episodes = runner.run([EpisodeSpec(i, t, v) for i, (t, v) in enumerate(instances)], EpsilonGoldAgent(0.0))
    return [ex for ep in episodes if ep.success for ex in histories_of(ep)]


def train_tokenizer(texts: Sequence[str], vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts`` (any text stays encodable: 256 byte symbols)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS, pad_token=EOS, bos_token=EOS)


def _corpus(env_name: str, examples: Sequence[Example]) -> list[str]:
    texts = [instruction(env_name, v) for v in VARIANTS] + ["Task: Observation: Action: Valid actions: ;"]
    seen: set[str] = set()
    for ex in examples:
        listed = ex.history.admissible or ()
        for text in (ex.history.task_description, ex.history.observation, *map(action_continuation, (ex.action, *listed))):
            if text not in seen:
                seen.add(text)
                texts.append(text)
    return texts


def new_tiny_lm(
    env_name: str, examples: Sequence[Example], *, context: int = 1024, width: int = 128, layers: int = 4, seed: int = 0
):
    """A randomly initialised GPT-2 and a byte-level BPE trained on the text of ``examples``."""
    tokenizer = train_tokenizer(_corpus(env_name, examples))
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=context,
        n_embd=width,
        n_layer=layers,
        n_head=4,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return GPT2LMHeadModel(config), tokenizer


def _encode(template: PromptTemplate, example: Example, room: int) -> tuple[list[int], int]:
    """Token ids of prompt + action continuation + EOS within ``room`` tokens, and where the loss starts."""
    tokenizer = template.tokenizer
    ids, start = action_span(tokenizer, template.render(example.history), action_continuation(example.action))
    return fit_context(ids + [tokenizer.eos_token_id], start, room)


def finetune(
    model,
    tokenizer,
    env_name: str,
    examples: Sequence[Example],
    out_dir: str,
    checkpoints: Mapping[str, int],
    *,
    batch_size: int = 8,
    lr: float = 1e-3,
    lora: Mapping | None = None,
    max_context: int = 2048,
    max_new_tokens: int = MAX_NEW_TOKENS,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, str]:
    """Supervised fine-tuning on ``examples``; saves ``{name: step}`` checkpoints under ``out_dir``;
    ``progress(step, total)`` is told of every optimiser step.

    ``lora`` (peft ``LoraConfig`` keyword arguments) trains low-rank adapters
    instead of all weights; they are merged into a copy for every checkpoint.
    Returns ``{name: path}``. Existing checkpoint folders are an error: nothing is overwritten.
    """
    if not examples:
        raise ValueError("no training examples: did the expert succeed on any training variation?")
    if not checkpoints or min(checkpoints.values()) < 1:
        raise ValueError(f"checkpoints must map names to training steps ≥ 1, e.g. {{'late': 600}}; got {dict(checkpoints)}")
    paths = {name: os.path.join(out_dir, name) for name in checkpoints}
    taken = [p for p in paths.values() if os.path.exists(p)]
    if taken:
        raise FileExistsError(f"checkpoint folder(s) already exist: {', '.join(taken)}; remove them or choose another out_dir")
    os.makedirs(out_dir, exist_ok=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    room = context_limit(model.config, max_context)
    templates = [PromptTemplate(env_name, v, tokenizer, room - max_new_tokens) for v in VARIANTS]
    encoded = [_encode(template, ex, room) for ex in examples for template in templates]
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora))
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    total = max(checkpoints.values())
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20))
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model.train()
    for step in range(1, total + 1):
        batch = rng.sample(encoded, min(batch_size, len(encoded)))
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (tokens, start) in enumerate(batch):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            labels[row, start : len(tokens)] = torch.tensor(tokens[start:])
            mask[row, : len(tokens)] = 1
        loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        for name, at in checkpoints.items():
            if at == step:
                model.eval()
                save_model_dir(copy.deepcopy(model).merge_and_unload() if lora is not None else model, tokenizer, paths[name])
                model.train()
        if progress is not None:
            progress(step, total)
    model.eval()
    return paths


def train_tiny_policies(
    env_name: str,
    env_kwargs: Mapping,
    task: str,
    out_dir: str,
    checkpoints: Mapping[str, int],
    *,
    n_variations: int = 40,
    max_steps: int = 30,
    context: int = 256,
    width: int = 64,
    layers: int = 2,
    lr: float = 5e-3,
    batch_size: int = 16,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, str]:
    """The local policy family of a cell: a tiny GPT-2 trained from scratch on the expert's
    trajectories of the first ``n_variations`` training instances of ``task`` (one, several
    comma-separated or ``*``, as in :class:`~adwm_core.specs.EnvSpec`); ``{name: path}`` of its
    checkpoints (``progress``: as ``finetune``)."""
    instances = EnvSpec(env_name, task, env_kwargs, "train").instances()[:n_variations]
    examples = gold_examples(env_name, env_kwargs, instances, max_steps=max_steps)
    model, tokenizer = new_tiny_lm(env_name, examples, context=context, width=width, layers=layers, seed=seed)
    return finetune(
        model, tokenizer, env_name, examples, out_dir, checkpoints, batch_size=batch_size, lr=lr, max_context=context,
        seed=seed, progress=progress)
