"""kiwi.torch.parallel's step calls a HuggingFace decoder without its key/value cache: training needs none,
and HuggingFace's DynamicCache copies each layer's keys and values into tensors of its own that attention
then saves for the backward pass (on GPT-2 two tensors a layer that kiwi's graph does not count)."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import parallel_helpers as h  # noqa: E402
from kiwi.torch.parallel.training import _no_cache  # noqa: E402


def test_a_decoder_is_called_without_its_cache_and_other_modules_as_they_are():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(**h.GPT2))
    assert gpt2.config.use_cache   # the default the step overrides
    assert _no_cache(gpt2) == {"use_cache": False}
    assert _no_cache(torch.nn.Linear(2, 2)) == {}


def test_without_the_cache_a_gpt2_step_keeps_fewer_bytes_and_the_same_loss():
    from kiwi.torch.measure import measure_step
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(**h.GPT2))
    ids = torch.randint(0, h.VOCAB, (4, h.SEQ))
    losses = {}

    def step(**flags):
        out = gpt2(input_ids=ids, labels=ids, **flags)
        losses[bool(flags)] = float(out.loss.detach())
        loss = out.loss
        del out
        loss.backward()
        gpt2.zero_grad(set_to_none=True)

    step()
    with_cache = measure_step(step, list(gpt2.parameters()) + [ids]).peak_bytes
    without = measure_step(lambda: step(**_no_cache(gpt2)), list(gpt2.parameters()) + [ids]).peak_bytes
    assert losses[True] == losses[False]
    # keys and values of [4 samples, 4 heads, 16 tokens, 16] float32 per layer: 8 KiB each, 4 layers
    assert with_cache - without == 4 * 2 * 4 * 4 * h.SEQ * 16 * 4
