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


def test_a_cell_names_smollm2_the_same_on_every_machine_and_an_unknown_offline_model_is_refused():
    """``offline:smollm2-135m-instruct`` loads the converted copy, is checked before any stage and keys
    its stages by name (a path would differ from machine to machine); another name is refused at load."""
    import pytest

    from adwm_core.cell import CellConfig, CellConfigError
    from adwm_core.pipeline import _model_identity
    from adwm_core.policies.loading import load_language_model
    from adwm_core.runnable import check_runnable

    def cell(model):
        return CellConfig.from_mapping({
            "name": "offline-check", "env": {"name": "textworld-express", "task": "simonsays"},
            "behaviour": {"episodes": 4, "pool": [{"label": "pool", "model": smollm2_dir()}]},
            "evaluation": {"policies": [{"label": "smollm2", "model": model}]}})

    spec = cell("offline:smollm2-135m-instruct").evaluation.policies[0]
    check_runnable(cell("offline:smollm2-135m-instruct"), environment=False)
    assert _model_identity(spec, lambda: "") == {"offline": "offline:smollm2-135m-instruct"}
    model = load_language_model(spec.model)
    assert model.tokenizer.name_or_path == smollm2_dir()
    with pytest.raises(CellConfigError, match=r"evaluation.policies\[0\].model 'offline:gpt-9': no offline model "
                                              r"'gpt-9'; the offline models are offline:smollm2-135m-instruct"):
        cell("offline:gpt-9")
