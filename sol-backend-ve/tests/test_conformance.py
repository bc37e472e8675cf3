from sol.testing import BackendConformance


class TestVeConformance(BackendConformance):
    backend_name = "ve"
