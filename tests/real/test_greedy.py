"""The executor's greedy argmax (numpy on a CPU) against torch's argmax."""
import pytest
import torch

from pagedbench.engines.real.executor import greedy


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("rows,vocab", [(1, 7), (3, 50272), (33, 129)])
def test_greedy_is_torch_argmax(dtype, rows, vocab):
    g = torch.Generator().manual_seed(rows * vocab)
    logits = torch.randn(rows, vocab, generator=g).to(dtype)
    # Ties (the first of equal maxima wins), a NaN (taken as the maximum), infinities.
    logits[0, 3 % vocab] = logits[0, 5 % vocab] = 1e4 if dtype is not torch.float16 else 6e4
    if rows > 1:
        logits[1, vocab // 2] = float("nan")
        logits[1, vocab - 1] = float("nan")
        logits[2] = float("-inf")
    assert greedy(logits) == logits.argmax(dim=-1).tolist()


def test_greedy_reads_a_view_of_the_logits():
    logits = torch.randn(2, 8, 16)
    with torch.inference_mode():
        view = logits[0][[1, 3, 4]]
        assert greedy(view) == view.argmax(dim=-1).tolist()
        assert greedy(logits[1]) == logits[1].argmax(dim=-1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_flattens_the_leading_dimensions_into_rows(dtype):
    """The forward pass's [1, rows, vocab] logits, as the decode step hands them over unindexed."""
    logits = torch.randn(1, 5, 33, generator=torch.Generator().manual_seed(1)).to(dtype)
    assert greedy(logits) == logits[0].argmax(dim=-1).tolist()
    assert greedy(logits.expand(2, 5, 33)) == logits[0].argmax(dim=-1).tolist() * 2
