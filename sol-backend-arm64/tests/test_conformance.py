from sol.testing import BackendConformance


class TestArm64Conformance(BackendConformance):
    backend_name = "arm64"
