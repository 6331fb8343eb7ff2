"""Train P-EAGLE (parallel) and EAGLE-3 (sequential) drafter heads on a frozen target.

One concept per module: ``distill`` (self-distilled training data, ``peagle-lab distill``; its engines in
``distill_engines``), ``cod`` (COD, conditional drop-token sampling of the deeper depths), ``config`` (TrainConfig),
``sequences`` (distilled records with the target's features, the feature cache), ``packing`` (sequences packed into
rows), ``elements`` (the training elements of a row, COD), ``mask`` (the training attention mask), ``objective``
(the trainable head: reparametrisation and loss), ``state`` (checkpoints and resume), ``distributed`` (several
processes), ``trainer`` (the loop), ``evaluate`` (acceptance per K), ``heldout`` (per-depth accuracy on held-out
sequences), ``stream`` (training sequences streamed from feature shards), ``records`` (training.json, TRAINING.md),
``quick`` (a small head made on the spot for a target without one), ``lineage`` (continuing a head:
``--init-from``), ``cli`` (``peagle-lab train``), ``recipe`` (equal-budget recipe runs and the learning curve). The
names people use are importable from here.
"""

from ..drafter.vocab import pick_mask_token_id
from .config import MASK_EMBEDDING_VARIANTS, MASK_HIDDEN_VARIANTS, TrainConfig
from .distributed import check_world_size
from .elements import Depth, RowPlan, plan_row
from .evaluate import EvalSettings, evaluate_head
from .heldout import depth_accuracy
from .mask import full_training_mask, training_mask
from .objective import DraftTrainer, mask_hidden_seed, soft_cross_entropy, tap_rms
from .packing import PackedRows
from .records import final_accuracy, write_training_record
from .sequences import check_data_target, prepare_sequences
from .state import check_resume_config, resume_tolerance
from .trainer import Trainer, TrainerOptions, TrainResult, lr_factor, precision_probe, train_head
from .quick import QuickSizes, draft_vocab_size_for, ensure_head, ensure_heads, train_quick_head
