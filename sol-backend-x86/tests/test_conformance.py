from sol.testing import BackendConformance


class TestX86Conformance(BackendConformance):
    backend_name = "x86"
