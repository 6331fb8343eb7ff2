"""peagle-lab: learn, measure and deploy P-EAGLE parallel drafting for speculative decoding.

The rooms, floor by floor from the ground (docs/architecture.md; ``tests/project/test_structure.py`` holds that no
module imports a room above its own): the basics at the top of the package (settings, models, prompts, precision,
atomic writes, locks, the KV caches, argument checks, errors, ...); ``features`` (the target's taps and labels);
``drafter`` (the head, its config and checkpoint); ``decoding`` (draft, verify, accept, roll back); then side by
side ``distill`` (the training data), ``training`` (the P-EAGLE objective and the loop), ``bench`` (real-size
timing) and ``serving`` (vLLM); then ``experiments`` (recipe, held-out scoring, studies), ``workbook`` (what the
notebooks use) and ``tools`` (the GPU check); at the top ``cli`` (``peagle-lab``, every command family).

Importing the package has no side effect: no environment variable is set, no directory is created. The entry
points that want ``OMP_WAIT_POLICY=PASSIVE`` ask for it (``settings.prefer_passive_omp_wait()``).
"""

__version__ = "0.1.0"
