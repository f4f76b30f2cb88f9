"""The multi-layer EAGLE worker module imports: its return annotation names a class
imported for type checking only."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker


class TestSpeculativeModulesImport(CustomTestCase):

    def test_multi_layer_eagle_worker_imports(self):
        """Its ``-> ModelRunner`` annotation names a class imported for type checking
        only; evaluated at import, it raised ``NameError``."""
        self.assertEqual(
            MultiLayerEagleWorker.mtp_model_runner.__annotations__["return"],
            "ModelRunner",
        )


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
