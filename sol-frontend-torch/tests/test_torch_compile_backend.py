"""``torch.compile(model, backend="sol")`` through the torch_dynamo_backends entry point."""

import torch


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def test_sol_is_a_registered_dynamo_backend():
    assert "sol" in torch._dynamo.list_backends()


def test_torch_compile_with_sol_matches_eager(sol_cache_dir):
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(2, 3, 16, 16)
    compiled = torch.compile(model, backend="sol")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
