"""``torchrun ... -m torchtpu.train --module torchtpu.train.configs --config NAME [overrides]``

TorchTitan's own entry point (``torchtitan.train.main``) on the ``tpu`` device.
"""

import torchtpu  # noqa: F401  (registers the tpu device and its c10d backend first)
from torchtitan.train import main

from torchtpu.train import compat

if __name__ == "__main__":
    compat.install()
    main()
