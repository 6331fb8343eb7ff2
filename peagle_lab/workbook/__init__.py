"""What the notebooks use beside the algorithm: the start cell (``notebook``), figures and token colouring
(``viz``), drawings (``diagrams``), the residual stream and logit lens (``lens``), the interactive explorer
(``explorer``), the human-written answers the studies compare with (``human_answers``; the studies themselves are
in :mod:`peagle_lab.experiments`), each notebook's memory peak (``memory_plan``), the workbook summary
(``report``) and the one way a notebook is run headless (``execute``).
"""
