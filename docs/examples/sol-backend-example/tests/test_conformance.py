from sol.testing import BackendConformance


class TestExampleConformance(BackendConformance):
    backend_name = "example"
