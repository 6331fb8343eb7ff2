"""Train P-EAGLE (parallel) and EAGLE-3 (sequential) drafter heads on a frozen target.

The data comes from :mod:`peagle_lab.distill`; experiments on the heads trained here are in
:mod:`peagle_lab.experiments`. One concept per module: ``cod`` (COD, conditional drop-token sampling of the deeper depths), ``config`` (TrainConfig),
``sequences`` (distilled records with the target's features, the feature cache), ``packing`` (sequences packed into
rows), ``elements`` (the training elements of a row, COD), ``mask`` (the training attention mask), ``objective``
(the trainable head: reparametrisation and loss), ``state`` (checkpoints and resume), ``distributed`` (several
processes), ``trainer`` (the loop), ``evaluate`` (acceptance per K, ``train --eval-ks``), ``stream`` (training sequences streamed from feature shards), ``records`` (training.json, TRAINING.md),
``quick`` (a small head made on the spot for a target without one), ``lineage`` (continuing a head:
``--init-from``), ``gpu_train`` (both heads trained on a GPU machine
without network), ``cli`` (``peagle-lab train``). The names people use are importable from here.
"""

from ..drafter.vocab import pick_mask_token_id
from .config import MASK_EMBEDDING_VARIANTS, MASK_HIDDEN_VARIANTS, TrainConfig
from .distributed import check_world_size
from .elements import Depth, RowPlan, plan_row
from .evaluate import EvalSettings, evaluate_head
from .mask import full_training_mask, training_mask
from .objective import DraftTrainer, mask_hidden_seed, soft_cross_entropy, tap_rms
from .packing import PackedRows
from .records import final_accuracy, write_training_record
from .sequences import check_data_target, prepare_sequences
from .state import check_resume_config, resume_tolerance
from .trainer import Trainer, TrainerOptions, TrainResult, lr_factor, precision_probe, train_head
from .quick import QuickSizes, draft_vocab_size_for, ensure_head, ensure_heads, train_quick_head
