"""Experiments on trained heads, each a question answered with its noise: ``recipe`` (equal-budget training runs
scored on held-out prompts, and the learning curve: ``peagle-lab recipe``, ``curve``), ``heldout`` (per-depth
accuracy on held-out sequences: ``peagle-lab depth-accuracy``), ``studies`` (the workbook's studies, two seeds
per setting: ``peagle-lab study``) and ``compare`` (heads compared on held-out prompts none trained on:
``peagle-lab compare-heads``)."""
