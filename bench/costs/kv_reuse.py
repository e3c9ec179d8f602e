"""A pretrained LLM's decisions with and without key/value reuse, in one run (issue 74, part 1).

`python -m bench.costs.kv_reuse [--cell CELL] [--model tiny] [--episodes N] [--batch-size B]`: SmolLM2-135M-Instruct
(or, with ``--model tiny``, the default local cell's tiny GPT-2 at its last checkpoint on that cell's
environment; transformers backend, prompt variant p0) plays N greedy episodes (ε = 0: every step is a
decision) of the cell's environment through the episode runner, as a ground-truth stage plays
them (2 workers × 8 engines: up to 16 episodes decide in one call), once reading every prompt
whole as the backend did before key/value reuse (:class:`WholePromptLM`, the code of 9a7d461) and once
with today's backend (prefix store, attention over shared key/value heads, a cache sized once); then
it scores every played action under both (the log-prob stage's work). Per side: seconds per
decision and per scored step (CPU seconds of this process beside wall seconds: the two differ
when the machine is shared), prompt tokens asked and read per decision, and whether the actions,
responses and log-probs agree. → bench/results/kv_reuse.{md,json}
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench.common import CHECKPOINTS, RESULTS, cell_config, default_env, machine, tiny_family

SMOLLM2 = "offline:smollm2-135m-instruct"


def timed(call):
    """``call()``'s result, wall seconds and this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def whole_prompt_lm(path: str, batch_size: int):
    """The transformers backend as it was before key/value reuse (9a7d461), the bench's reference:
    every prompt read whole, in batches of similar lengths, by stock SDPA (each key/value head
    copied for the query heads sharing it) and a generation cache that grows by copying; scoring
    right-padded, with logits at every position past the batch's first action token."""
    import torch

    from adwm_core.policies.hf_backend import TransformersLM
    from adwm_core.policies.scoring import action_span, context_limit, fit_context

    class WholePromptLM(TransformersLM):
        def __init__(self) -> None:
            super().__init__(path, batch_size=batch_size, prefix_cache_bytes=0)
            self.model.set_attn_implementation("sdpa")

        def generate(self, prompts, max_new_tokens):
            out = [""] * len(prompts)
            order = np.argsort([len(p) for p in prompts])
            for lo in range(0, len(prompts), self.batch_size):
                rows = order[lo:lo + self.batch_size]
                batch = self.tokenizer([prompts[i] for i in rows], return_tensors="pt", padding=True,
                                       add_special_tokens=False).to(self.device)
                with torch.no_grad():
                    generated = self.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                                    use_cache=True, pad_token_id=self.tokenizer.pad_token_id)
                texts = self.tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
                for i, text in zip(rows, texts):
                    out[i] = text
                self.prefix_store.tokens_asked += int(batch["attention_mask"].sum())
                self.prefix_store.tokens_read += int(batch["attention_mask"].sum())
            return out

        def score(self, prompts, continuations):
            limit = context_limit(self.model.config, self.max_context)
            spans = [fit_context(*action_span(self.tokenizer, p, a), limit) for p, a in zip(prompts, continuations)]
            logprobs = np.empty(len(spans))
            for lo in range(0, len(spans), self.batch_size):
                chunk = spans[lo:lo + self.batch_size]
                width = max(len(ids) for ids, _ in chunk)
                ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, (tokens, _) in enumerate(chunk):
                    ids[row, :len(tokens)], mask[row, :len(tokens)] = torch.tensor(tokens), 1
                first = min(start for _, start in chunk) - 1
                with torch.no_grad():
                    logits = self.model(input_ids=ids, attention_mask=mask).logits[:, first:-1].float()
                token_logp = torch.log_softmax(logits, -1).gather(-1, ids[:, first + 1:, None])[..., 0].double()
                for row, (tokens, start) in enumerate(chunk):
                    logprobs[lo + row] = token_logp[row, start - 1 - first:len(tokens) - 1 - first].sum().item()
            return logprobs, np.array([len(ids) - start for ids, start in spans])

    return WholePromptLM()


def side(env, path: str, n_episodes: int, batch_size: int, before: bool) -> dict:
    """Play and score with the backend before key/value reuse or today's; returns timings, token
    counts and what was played."""
    from adwm_core.collection import episode_specs
    from adwm_core.envs.runner import EpisodeRunner
    from adwm_core.policies.base import LLMPolicy, PolicyAgent
    from adwm_core.policies.hf_backend import TransformersLM
    from adwm_core.policies.prompts import episode_histories

    lm = whole_prompt_lm(path, batch_size) if before else TransformersLM(path, batch_size=batch_size)
    policy = LLMPolicy(lm, env.name, "p0")
    specs = episode_specs(env.instances(), range(n_episodes), seed=42)
    with EpisodeRunner(env.name, env.options, n_workers=2, envs_per_worker=8, max_steps=env.max_steps) as runner:
        runner.start()
        episodes, wall, cpu = timed(lambda: runner.run(specs, PolicyAgent(policy, 0.0)))
    decisions = sum(len(e.turns) for e in episodes)
    asked, read = lm.prefix_store.tokens_asked, lm.prefix_store.tokens_read
    histories, actions = [], []
    for episode in episodes:
        turns = [(t.observation, t.action, t.admissible) for t in episode.turns]
        histories += episode_histories(episode.task_description, turns)
        actions += [t.action for t in episode.turns]
    lm.prefix_store = type(lm.prefix_store)(lm.prefix_store.max_bytes)  # scoring starts from an empty store
    (logprobs, _), score_wall, score_cpu = timed(lambda: policy.logprob(histories, actions))
    return {"store_bytes": lm.prefix_store.max_bytes, "decisions": decisions, "seconds": wall, "cpu_seconds": cpu,
            "seconds_per_decision": wall / decisions, "cpu_seconds_per_decision": cpu / decisions,
            "tokens_asked_per_decision": asked / decisions, "tokens_read_per_decision": read / decisions,
            "scored_steps": len(actions), "score_seconds_per_step": score_wall / len(actions),
            "score_cpu_seconds_per_step": score_cpu / len(actions),
            "actions": actions, "responses": [t.response for e in episodes for t in e.turns],
            "logprobs": logprobs.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", default="test-b2-twx-sorting-cross",
                        help="the cell whose environment is played (its config only: no stage of it runs)")
    parser.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16, help="the backend's batch (the runner asks up to 16)")
    args = parser.parse_args()
    if args.model == "tiny":
        env, path, where = default_env(), tiny_family()[max(CHECKPOINTS, key=CHECKPOINTS.get)], "the default local cell"
    else:
        from adwm_core.policies.local_models import offline_model_dir

        env, path, where = cell_config(args.cell).env, offline_model_dir(SMOLLM2), f"cell `{args.cell}`"
    before = side(env, path, args.episodes, args.batch_size, before=True)
    after = side(env, path, args.episodes, args.batch_size, before=False)
    found = {
        "model": args.model, "where": where, "env": env.name, "task": env.task, "episodes": args.episodes, "batch_size": args.batch_size,
        "before": {k: v for k, v in before.items() if k not in ("actions", "responses", "logprobs")},
        "after": {k: v for k, v in after.items() if k not in ("actions", "responses", "logprobs")},
        "same_actions": before["actions"] == after["actions"], "same_responses": before["responses"] == after["responses"],
        "max_abs_logprob_difference": float(np.max(np.abs(np.subtract(before["logprobs"], after["logprobs"])))),
        "machine": machine(),
    }
    found["speedup_per_decision"] = before["seconds_per_decision"] / after["seconds_per_decision"]
    found["cpu_speedup_per_decision"] = before["cpu_seconds_per_decision"] / after["cpu_seconds_per_decision"]
    found["speedup_per_scored_step"] = before["score_seconds_per_step"] / after["score_seconds_per_step"]
    path = RESULTS / "kv_reuse.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else {}
    runs[f"{args.model} on {where}"] = found
    path.write_text(json.dumps({"runs": runs}, indent=2))
    write(runs)


def write(runs: dict) -> None:
    """bench/results/kv_reuse.md: a table of every measured run (the latest per model and place)."""
    lines = ["# A policy's decisions with and without key/value reuse", "",
             __doc__.split("\n\n", 1)[1].rsplit("→", 1)[0].strip(), "",
             "| model, environment (episodes at ε = 0, batch) | measured | backend | decisions | s per decision "
             "(CPU s) | prompt tokens asked / read per decision | s per scored step (CPU s) | same actions, responses "
             "| largest \\|Δ log π\\| |", "|---|---|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        for side_name, r in (("before (9a7d461)", run["before"]), ("today's", run["after"])):
            lines.append(
                f"| {name}: {run['env']}/{run['task']} ({run['episodes']}, {run['batch_size']}) | "
                f"{run['machine']['date']}, {run['machine']['cpus']} CPUs | {side_name} | {r['decisions']} | "
                f"{r['seconds_per_decision']:.3f} ({r['cpu_seconds_per_decision']:.3f}) | "
                f"{r['tokens_asked_per_decision']:.0f} / {r['tokens_read_per_decision']:.0f} | "
                f"{r['score_seconds_per_step']:.3f} ({r['score_cpu_seconds_per_step']:.3f}) | "
                f"{run['same_actions']}, {run['same_responses']} | {run['max_abs_logprob_difference']:.1e} |")
        lines.append(f"| | | **ratio** | | **{run['speedup_per_decision']:.1f}×** ({run['cpu_speedup_per_decision']:.1f}× "
                     f"CPU) | | **{run['speedup_per_scored_step']:.1f}×** | | |")
    lines += ["", f"Machine of the latest run: `{json.dumps(list(runs.values())[-1]['machine'])}`"]
    (RESULTS / "kv_reuse.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
