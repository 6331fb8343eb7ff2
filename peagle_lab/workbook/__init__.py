"""What the notebooks use beside the algorithm: the start cell (``notebook``), figures and token colouring
(``viz``), drawings (``diagrams``), the residual stream and logit lens (``lens``), the interactive explorer
(``explorer``), the equal-budget studies (``studies``, with ``human_answers``) and the workbook summary
(``report``).
"""
