import torch

from helpers import char_tokenizer, tiny_llama
from quench.engine import GenerationRequest, SamplingParams
from quench.engine.hf_backend import HFBackend


def encode(tokenizer, text):
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_left_padded_batch_equals_one_prompt_at_a_time():
    tokenizer, model = char_tokenizer(), tiny_llama()
    prompts = ["def f(x):\n", "x = [1, 2, 3]\nfor i in x:\n    ", "a"]
    requests = [GenerationRequest(f"t/{i}", encode(tokenizer, p)) for i, p in enumerate(prompts)]
    sampling = SamplingParams(max_new_tokens=12)
    batched = {r.key: r.token_ids for r in HFBackend(model, tokenizer, batch_size=3).generate(requests, sampling)}
    alone = {r.key: r.token_ids for r in HFBackend(model, tokenizer, batch_size=1).generate(requests, sampling)}
    assert batched == alone
    assert all(len(ids) == 12 for ids in alone.values())  # a random model never says EOS here


def test_stop_sequence_cuts_text_and_sets_reason():
    tokenizer, model = char_tokenizer(), tiny_llama()
    request = GenerationRequest("t/0", encode(tokenizer, "abc"))
    free = next(HFBackend(model, tokenizer).generate([request], SamplingParams(max_new_tokens=10)))
    stop = free.text[3:5]  # a stop string that the greedy output is known to contain
    cut = next(HFBackend(model, tokenizer).generate(
        [GenerationRequest("t/0", request.prompt_ids, stop_sequences=(stop,))], SamplingParams(max_new_tokens=10)))
    assert free.finish_reason == "length"
    assert cut.finish_reason == "stop" and cut.text == free.text[: free.text.find(stop)]


def test_samples_are_numbered_from_the_offset_and_seeded():
    tokenizer, model = char_tokenizer(), tiny_llama()
    request = GenerationRequest("t/0", encode(tokenizer, "def"), n=3, sample_offset=2)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=7)
    first = list(HFBackend(model, tokenizer, batch_size=4).generate([request], sampling))
    again = list(HFBackend(model, tokenizer, batch_size=4).generate([request], sampling))
    assert [r.sample_index for r in first] == [2, 3, 4]
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert len({r.token_ids for r in first}) > 1  # sampling, not greedy
