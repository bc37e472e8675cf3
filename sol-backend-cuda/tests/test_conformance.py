from sol.testing import BackendConformance


class TestCudaConformance(BackendConformance):
    backend_name = "cuda"
