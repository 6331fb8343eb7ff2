"""``python -m peagle_lab.cli ...`` (torchrun / accelerate launch): the ``peagle-lab`` command."""

import sys

from . import main

sys.exit(main())
