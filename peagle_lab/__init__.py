"""peagle-lab: learn, measure and deploy P-EAGLE parallel drafting for speculative decoding.

Importing the package has no side effect: no environment variable is set, no directory is created. The entry
points that want ``OMP_WAIT_POLICY=PASSIVE`` ask for it (``settings.prefer_passive_omp_wait()``).
"""

__version__ = "0.1.0"
