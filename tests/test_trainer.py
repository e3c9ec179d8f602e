import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adwm_core.policies.local_models import smollm2_dir
from adwm_core.policies.prompts import History
from adwm_core.policies.trainer import Example, finetune

TASK = "Your task is to do exactly what Simon says."
EXAMPLES = [
    Example(History(TASK, (), f"Simon says, '{verb} {fruit}'.", (f"{verb} {fruit}", "take peach")), f"{verb} {fruit}")
    for verb in ("smell", "touch") for fruit in ("apple", "banana")
]


def test_lora_checkpoints_are_merged_plain_models_that_changed_only_adapted_weights(tmp_path):
    path = smollm2_dir()
    base = AutoModelForCausalLM.from_pretrained(path)
    reference = {k: v.clone() for k, v in base.state_dict().items()}
    out, told = tmp_path / "lora", []
    paths = finetune(
        base, AutoTokenizer.from_pretrained(path), "textworld-express", EXAMPLES, str(out), {"s1": 1, "s2": 2},
        batch_size=2, lr=1e-2, lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
        progress=lambda step, total: told.append((step, total)),
    )
    assert told == [(1, 2), (2, 2)]  # every optimiser step reported (the policies stage shows it)
    tuned = AutoModelForCausalLM.from_pretrained(paths["s2"]).state_dict()
    assert not any("lora" in k for k in tuned)  # adapters merged: an ordinary checkpoint
    q, k = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"
    assert not torch.equal(tuned[q], reference[q])
    assert torch.equal(tuned[k], reference[k])
    assert (out / "s1" / "config.json").exists()


def test_finetune_refuses_existing_checkpoints_before_training(tmp_path):
    (tmp_path / "late").mkdir()
    with pytest.raises(FileExistsError, match="late"):
        finetune(None, None, "textworld-express", EXAMPLES, str(tmp_path), {"early": 1, "late": 2})
