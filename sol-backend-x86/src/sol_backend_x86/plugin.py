"""Entry point ``sol.backends: x86``: the hook implementations SOL loads."""

from __future__ import annotations

import sol
from sol.records import ConfigKey

from .backend import X86Backend
from .deploy import X86DeployTarget
from .grouped import GROUPED_KEY
from .input_scale import FOLD_INPUT_SCALE_KEY
from .linear import LINEAR_1X1_KEY, LINEAR_MATMUL_KEY
from .mkl import MKL_KEY
from .onednn import DNN_KEY, LIBRARY_KEY
from .pooling import ONEDNN_POOLS_KEY
from .precision import BF16_STORAGE_KEY
from .rnn import ONEDNN_RNN_KEY
from .views import MATMUL_VIEWS_KEY
from .winograd import WINOGRAD_4X4_KEY, WINOGRAD_KEY, WINOGRAD_SCHEDULE_KEY


@sol.hookimpl
def sol_backends() -> list[X86Backend]:
    return [X86Backend()]


@sol.hookimpl
def sol_config_keys() -> list[ConfigKey]:
    return [LIBRARY_KEY, DNN_KEY, WINOGRAD_KEY, WINOGRAD_4X4_KEY, WINOGRAD_SCHEDULE_KEY, GROUPED_KEY, LINEAR_1X1_KEY,
            MKL_KEY, FOLD_INPUT_SCALE_KEY, ONEDNN_RNN_KEY, BF16_STORAGE_KEY, LINEAR_MATMUL_KEY, MATMUL_VIEWS_KEY,
            ONEDNN_POOLS_KEY]


@sol.hookimpl
def sol_deploy_targets() -> list[X86DeployTarget]:
    return [X86DeployTarget()]
