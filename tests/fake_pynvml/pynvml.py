"""`pynvml` for an agent process of an end-to-end test, put first on its path: the fake of
`tests.fake_nvml`, standing in for NVML because this machine has no GPU. Two H200s: GPU 0 not
in MIG mode, GPU 1 in MIG mode as one idle 7g.141gb MIG device; what setting MIG changes is
written to the file that `WANKA_FAKE_NVML_LOG` names."""

import sys

from tests.fake_nvml import FakeNvml

fake = FakeNvml(gpus=2)
fake.mig_mode = {1: (1, 1)}
fake.add_mig_device(1, 0, "MIG-7e1a0c52-9b3d-4f6e-8a21-5c0d7b1e9f00", 4, 0, [])
sys.modules[__name__] = fake
