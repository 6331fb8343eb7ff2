"""peagle-lab: learn, measure and deploy P-EAGLE parallel drafting for speculative decoding."""

import os as _os

# On a shared or small CPU, OpenMP threads that spin while waiting make torch 10-50x slower as soon as another
# process competes for the cores. Passive waiting costs nothing measurable when the machine is quiet. It only
# takes effect if set before torch is first imported, so import peagle_lab first (notebooks and CLI do).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
