"""peagle-lab: learn, measure and deploy P-EAGLE parallel drafting for speculative decoding."""

__version__ = "0.1.0"
