import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.scoring import score_actions


def test_smollm2_loads_by_path_and_its_greedy_continuation_scores_highest():
    path = smollm2_dir()
    assert smollm2_dir() == path  # converted once, then reused
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    assert 130e6 < model.num_parameters() < 140e6
    messages = [{"role": "user", "content": "You are in a kitchen with a closed fridge. Name one action."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=6, do_sample=False)
    greedy = tokenizer.decode(out[0, ids["input_ids"].shape[1] :])
    candidates = [greedy, "eat the fridge", "Go north quickly", "xyzzy plugh"]
    logprobs, n_tokens = score_actions(model, tokenizer, [prompt] * len(candidates), candidates)
    assert int(logprobs.argmax()) == 0, (greedy, logprobs)
    assert (n_tokens > 0).all() and (logprobs < 0).all()
