"""Wildcard batch: values derived from parameters but sized by the batch are computed per call."""

import sol.pytorch as sol
import torch


class ClassToken(torch.nn.Module):
    """ViT's pattern: a learned token expanded to the batch and concatenated in front of the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.token = torch.nn.Parameter(torch.randn(1, 1, 16))

    def forward(self, x):
        token = self.token.expand(x.shape[0], -1, -1)
        return torch.cat([token, x], dim=1) * 2


def test_parameter_expanded_to_the_batch():
    torch.manual_seed(0)
    model = ClassToken().eval()
    sol_model = sol.optimize(model, sol.input([0, 5, 16]), batch_size=1)
    for batch in (1, 4, 2):  # larger than the prepared batch, then smaller again
        x = torch.randn(batch, 5, 16)
        with torch.no_grad():
            torch.testing.assert_close(sol_model(x), model(x), rtol=1e-5, atol=1e-6)
