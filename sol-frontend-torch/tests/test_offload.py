"""Transparent offloading through the PyTorch frontend on sol.testing's loopback device (sol-backend-ve runs the
same checks, `sol_frontend_torch.offload_checks`, on the emulated VE)."""

from __future__ import annotations

import pytest
from sol.testing.loopback import loopback_device
from sol_frontend_torch.offload_checks import (
    check_foreign_device_is_refused,
    check_inference_and_copies,
    check_profile_reports_copies,
    check_training,
)


@pytest.fixture
def device():
    with loopback_device():
        yield "loop"


def test_inference_and_copies(device: str) -> None:
    check_inference_and_copies(device)


def test_training(device: str) -> None:
    check_training(device)


def test_foreign_device_is_refused(device: str) -> None:
    check_foreign_device_is_refused(device)


def test_profile_reports_copies(device: str) -> None:
    check_profile_reports_copies(device)
