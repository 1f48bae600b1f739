"""torch.jit.trace of models with convolutions on tpu: the trace records the convolution
(it recorded nothing, so the traced module returned the example input's conv output for
every input), and tracing a convolution the first time works (its meta kernel ran traced:
a TypeError)."""

from __future__ import annotations

import pytest
import torch


class _Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 3, padding=1)
        self.up = torch.nn.ConvTranspose1d(2, 3, 3, stride=2)
        self.conv3d = torch.nn.Conv3d(2, 1, (1, 2, 2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.conv(x).relu() + x, self.up(x[:, :, 0]),
                self.conv3d(x.unsqueeze(2)))


@pytest.mark.parametrize("grad", [False, True])
def test_traced_convolutions_compute_on_every_input(grad: bool) -> None:
    torch.manual_seed(0)
    cpu = _Residual()
    model = _Residual()
    model.load_state_dict(cpu.state_dict())
    model = model.to("tpu")
    x, later = torch.randn(2, 1, 2, 6, 6)
    with torch.set_grad_enabled(grad):
        traced = torch.jit.trace(model, x.to("tpu"))
        for got, want in zip(traced(later.to("tpu")), cpu(later)):
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    if grad:  # the trace differentiates through the convolution
        traced(later.to("tpu"))[0].sum().backward()
        cpu(later)[0].sum().backward()
        torch.testing.assert_close(model.conv.weight.grad.cpu(), cpu.conv.weight.grad,
                                   rtol=1e-4, atol=1e-4)
