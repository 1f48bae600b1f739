"""``torchrun ... -m torchtpu.train --module torchtpu.train.configs --config NAME [overrides]``

TorchTitan's own entry point (``torchtitan.train.main``) on the ``tpu`` device.
"""

import torchtpu  # noqa: F401  (registers the tpu device and its c10d backend first)
from torchtpu.train import compat

compat.install()

from torchtitan.train import main  # noqa: E402

if __name__ == "__main__":
    main()
