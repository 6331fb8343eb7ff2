# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python (peagle-lab)
#     language: python
#     name: peagle-lab
# ---

# %% [markdown]
# # 02 · Mask tokens: what parallel slots 2..K see
#
# **Goal:** know exactly what P-EAGLE feeds its drafter so that one forward pass yields K drafts (a mask token
# and one shared learned hidden state, `mask_hidden`), and what each slot may attend to, at inference and in
# training.
#
# Plan: why slots 2..K need stand-ins; the one-pass inputs built by hand, checked against the package's
# drafter; the drafter itself written from scratch with the shipped heads' weights (P-EAGLE's one pass and
# EAGLE-3's K passes), checked against the package; the training attention mask, drawn and checked against its
# rule, with an exercise on K; a check that training computes what the one-pass draft computes (to float
# rounding); and an equal-budget study (the same optimizer steps and training tokens for every variant) of the
# stand-in itself
# (the learned `mask_hidden` against zeros, a copy of the context state, a frozen random vector, a frozen token
# embedding), measured by acceptance in the real speculative loop with two seeds per variant.

# %% tags=["nbval-ignore-output"]
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, precision, settings
from peagle_lab.drafter import PEagleConfig, PEagleDrafter
from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.slots import Slots
from peagle_lab.features.taps import target_forward
from peagle_lab.training import pick_mask_token_id

model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=precision.course_dtype(DEVICE))

# %% [markdown]
# ## Why slots 2..K need stand-ins
#
# Names, as in notebook 00: *slot t* is the drafter's position t; in a round, *slot j* (j = 1..K) is the slot
# that drafts token j, and training counts the same slots by *depth* d = j - 1 (0-based).
#
# An EAGLE drafter slot takes two inputs: a **token** and a **hidden state** from the target. With the EAGLE
# shift, slot `t` holds token `x[t+1]` and the target's fused taps `fc(h_t)` at position `t`. At the end of a
# round the target has committed `x_0 .. x_n` (`x_n` is its bonus token), so the last context slot holds
# `(x_n, fc(h_{n-1}))` and its output is draft 1, the guess for `x_{n+1}`.
#
# For draft 2 an autoregressive (EAGLE-3) drafter would feed draft 1 and its own hidden state back in: a
# second forward pass. To get draft 2..K *from the same pass*, their slots must be filled before any draft
# exists. Neither input is available:
#
# - the **token** of slot j would be draft j-1, not yet drafted;
# - the **hidden state** would be the target's `h` at a position the target has not run yet.
#
# P-EAGLE fills them with a **mask token** (one embedding row, learned) and **one shared hidden state**
# `mask_hidden` (a learned 3H vector, passed through `fc` like real taps). Positions still advance
# (`start + j`), so the rotary embedding tells the slots apart, and causal attention lets slot j read the whole
# context and the mask slots before it. Every mask slot gets the same stand-ins (the same `<mask>` row and the
# same `fc(mask_hidden)`), so the stand-ins only say "I am a mask slot"; which slot it is, j, comes only from its
# rotary position, and everything a deep slot knows about *which* token to guess comes through attention to the
# context.

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.distill.data import read_distilled, shipped_distilled_path

MASK_ID = pick_mask_token_id(tokenizer)
print(f"mask token: id {MASK_ID} = {tokenizer.convert_ids_to_tokens(MASK_ID)!r} (a special token of the tokenizer)")
if shipped_distilled_path(TARGET).exists():  # the training text of notebook 03, for the embedded target
    _, train_text = read_distilled(shipped_distilled_path(TARGET))
    print(f"it occurs {sum(list(r['input_ids']).count(MASK_ID) for r in train_text)} times in the "
          f"{len(train_text)} training sequences of {shipped_distilled_path(TARGET).name}")

committed = tokenizer("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
n, K = len(committed) - 1, 4  # drafter context slots 0..n-1; draft K tokens
show = lambda i: repr(tokenizer.decode([i]))
print(f"\n{'slot':>4} {'pos':>4}  {'input token':<16} {'hidden':<17} {'attends to':<14} output")
for t in range(n):
    out = f"draft 1 (x_{n + 1})" if t == n - 1 else "(context)"
    print(f"{t:>4} {t:>4}  {show(committed[t + 1]):<16} {f'fc(h_{t})':<17} {f'slots 0..{t}':<14} {out}")
for j in range(2, K + 1):
    s = n - 2 + j
    print(f"{s:>4} {s:>4}  {'<mask>':<16} {'fc(mask_hidden)':<17} {f'slots 0..{s}':<14} draft {j} (x_{n + j})")

# %% [markdown]
# The same round as tensors: one forward pass of `n + K - 1` slots, and the K drafts are the argmax of its
# last K rows. (The head is untrained here: the drafts are not good, the mechanics are exact.)
# `HeadDrafter.propose` (in `peagle_lab.decoding.draft_sources`) is the code that does this in the loop.

# %% tags=["smollm2-fact", "nbval-check-output"]
torch.manual_seed(0)
cfg = PEagleConfig.from_target(model.config, mask_token_id=MASK_ID, num_speculative_tokens=K)
head = PEagleDrafter(cfg).init_from_target(model).to(DEVICE).eval()
ids = torch.tensor([committed], device=DEVICE)
with torch.no_grad():
    taps = target_forward(model, ids, cfg.aux_hidden_state_layer_ids, use_cache=False).taps[0, :n]
    inp = torch.cat([ids[0, 1:], torch.full((K - 1,), MASK_ID, device=DEVICE)])[None]
    hidden = torch.cat([head.fuse(taps), head.mask_slot_hidden()[0].expand(K - 1, -1)])[None]
    logits, _ = head(inp, hidden, torch.arange(n + K - 1, device=DEVICE)[None])
drafts, _ = HeadDrafter(head, "parallel").propose(Slots(ids[0, 1:].tolist(), taps), K, Sampling())
print(f"taps h_0..h_{n - 1}: {tuple(taps.shape)} (3 x {model.config.hidden_size})")
print(f"one forward pass: input_ids {tuple(inp.shape)}, hidden {tuple(hidden.shape)} -> logits {tuple(logits.shape)}")
print(f"attention: plain causal over the {n + K - 1} slots, a ({n + K - 1}, {n + K - 1}) lower-triangular mask; "
      f"the drafts are rows {n - 1}..{n + K - 2}")
mine = head.draft_to_target_ids()[logits[0, n - 1:].argmax(-1)]  # draft-vocabulary ids -> target ids (d2t)
print("K drafts = argmax of the last K rows, as HeadDrafter.propose drafts them:", mine.tolist() == drafts.tolist())

# %% [markdown]
# ## The drafter from scratch
#
# Everything above used the package's `PEagleDrafter`. Here is the whole network in plain PyTorch, about 60
# lines, loaded with the **shipped P-EAGLE head's weights** (`data/heads/smollm2-135m-peagle`, read with the
# package's checkpoint reader) and checked against the package's module on the same input. The shipped heads have
# one decoder layer (EAGLE-3's first layer); the pieces:
#
# - `fc`: the three tapped residual streams of the target, concatenated (3H), projected to H;
# - the decoder layer, whose attention reads **2H** = `[input_layernorm(token embedding), hidden_norm(hidden)]`:
#   the only place the token and the target's state meet; its residual stream is the hidden state;
# - the **mask row** of the embedding table (slots 2..K's token) and **`mask_hidden`** (slots 2..K's 3H state,
#   through the same `fc`): P-EAGLE's two learned stand-ins, shared by every mask slot;
# - the final norm, `lm_head` over the **draft vocabulary** (a few thousand frequent ids), and `d2t`, which maps a
#   draft id back to a target id (`target = draft + d2t[draft]`).

# %%
import torch.nn.functional as F

from peagle_lab.drafter.checkpoint import read_tensors
from peagle_lab.drafter.network import RotaryTables  # only for a target with a scaled RoPE (not SmolLM2)


class ScratchDrafter:
    """A one-layer EAGLE-3 / P-EAGLE drafter for one sequence, from the head's tensors (vLLM's eagle3 names)."""

    def __init__(self, cfg, W, target_embed):
        assert cfg.num_hidden_layers == 1, "written for the shipped heads' one decoder layer"
        self.cfg, self.W = cfg, {k: v.float() if v.is_floating_point() else v for k, v in W.items()}
        self.embed = target_embed.float().clone()  # the head shares the target's embeddings ...
        if "mask_embedding" in W:  # ... except the mask token's row, which it learned
            self.embed[cfg.mask_token_id] = self.W["mask_embedding"]
        self.target_id = torch.arange(cfg.draft_vocab_size, device=self.embed.device) + W["d2t"]  # draft -> target

    def norm(self, x, name):  # RMSNorm (Llama's)
        return self.W[name] * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)

    def rope(self, x, pos):  # rotate dimension pairs (i, i + d/2) by pos * theta^(-2i/d)
        d = x.shape[-1]
        inv = self.cfg.rope_theta ** (-torch.arange(0, d, 2, device=x.device).float() / d)
        ang = torch.cat([pos[:, None] * inv] * 2, -1)
        cos, sin = ang.cos(), ang.sin()
        if self.cfg.rope_parameters.get("rope_type", "default") != "default":  # a scaled RoPE (yarn, llama3):
            cos, sin = (t[0, 0] for t in RotaryTables(self.cfg)(pos[None].long(), torch.float32))  # its tables
        return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin

    def fuse(self, taps):  # (T, 3H) target taps -> (T, H)
        return taps.float() @ self.W["fc.weight"].T

    def forward(self, tokens, hidden, pos):
        """tokens (T,), fused hidden (T, H), positions (T,) -> draft-vocab logits (T, Vd), prenorm state (T, H)."""
        c, W, L = self.cfg, self.W, "midlayer."
        T, nh, nkv, hd = len(tokens), c.num_attention_heads, c.num_key_value_heads, c.head_dim
        # the 2H attention input: [normed token embedding, normed hidden]; the residual stream is the hidden
        x = torch.cat([self.norm(self.embed[tokens], L + "input_layernorm.weight"),
                       self.norm(hidden, L + "hidden_norm.weight")], -1)
        residual = self.norm(hidden, L + "hidden_norm.weight") if c.norm_before_residual else hidden
        q = (x @ W[L + "self_attn.q_proj.weight"].T).view(T, nh, hd).transpose(0, 1)
        k = (x @ W[L + "self_attn.k_proj.weight"].T).view(T, nkv, hd).transpose(0, 1)
        v = (x @ W[L + "self_attn.v_proj.weight"].T).view(T, nkv, hd).transpose(0, 1)
        q, k = self.rope(q, pos.float()), self.rope(k, pos.float())
        k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)  # grouped-query attention
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = (q @ k.transpose(1, 2) / hd ** 0.5).masked_fill(~causal, float("-inf")).softmax(-1)
        residual = (att @ v).transpose(0, 1).reshape(T, nh * hd) @ W[L + "self_attn.o_proj.weight"].T + residual
        y = self.norm(residual, L + "post_attention_layernorm.weight")
        mlp = F.silu(y @ W[L + "mlp.gate_proj.weight"].T) * (y @ W[L + "mlp.up_proj.weight"].T)
        prenorm = mlp @ W[L + "mlp.down_proj.weight"].T + residual
        return self.norm(prenorm, "norm.weight") @ W["lm_head.weight"].T, prenorm

    def draft_parallel(self, context, taps, K):
        """P-EAGLE: ONE pass drafts K tokens. Slot 1 = [emb(last token), h_context] (the last context slot);
        slots 2..K = [mask embedding, fc(mask_hidden)], at the next positions."""
        n = len(context)
        tokens = torch.cat([context, context.new_full((K - 1,), self.cfg.mask_token_id)])
        hidden = torch.cat([self.fuse(taps), self.fuse(self.W["mask_hidden"].view(1, -1)).expand(K - 1, -1)])
        logits, _ = self.forward(tokens, hidden, torch.arange(n + K - 1, device=tokens.device))
        return logits[n - 1:], self.target_id[logits[n - 1:].argmax(-1)]  # the last K rows are drafts 1..K

    def draft_sequential(self, context, taps, K):
        """EAGLE-3: K passes; each appends one slot holding the token just drafted and the drafter's OWN prenorm
        state of the slot before (no target state exists there), then drafts from the new last row."""
        tokens, hidden, drafts = context, self.fuse(taps), []
        for _ in range(K):
            logits, prenorm = self.forward(tokens, hidden, torch.arange(len(tokens), device=tokens.device))
            drafts.append(self.target_id[logits[-1].argmax()])
            tokens, hidden = torch.cat([tokens, drafts[-1].view(1)]), torch.cat([hidden, prenorm[-1:]])
        return torch.stack(drafts)

# %% [markdown]
# Load each shipped head both ways (float32 on both sides) and draft K tokens after the prompt above. P-EAGLE
# (`data/heads/smollm2-135m-peagle`): the one-pass draft, from scratch against `PEagleDrafter.one_pass_logits`;
# the logits of the K draft rows must agree to float32 rounding and the drafts must be the same target ids.
# EAGLE-3 (`data/heads/smollm2-135m-eagle3`, same shape, trained for sequential drafting): `draft_sequential`
# against the package's sequential drafting (`HeadDrafter(head, "sequential")`, which keeps a KV cache and runs
# one new slot per pass; the from-scratch version re-runs the whole sequence each pass: the same numbers, by
# causality). On a target the shipped heads do not fit, the head for that target (trained here, or an untrained
# one) stands in: the checks hold for any weights. The prompt is raw code, not a chat turn like the heads'
# training data, so the drafts need not be good ones: what is checked is that both sides compute the same.

# %% tags=["nbval-ignore-output"]
from peagle_lab.drafter.heads import head_for_target


def both_drafters(kind):
    """(package head in float32, ScratchDrafter from the same weights, where the weights came from)."""
    head, info = head_for_target(kind, model, tokenizer, TARGET)
    head = head.float().eval()
    W = read_tensors(info["path"]) if info["path"] else head.export_state_dict()
    W = {k: v.to(DEVICE) for k, v in W.items()}
    W.setdefault("d2t", head.d2t)
    W.setdefault("mask_hidden", head.mask_hidden.detach())  # an EAGLE-3 head stores none (never used)
    emb = W.get("embed_tokens.weight", model.get_input_embeddings().weight.detach())
    return head, ScratchDrafter(head.config, W, emb), info["source"]


context, taps_f = ids[0, 1:], taps.float()  # the prompt's drafter slots, as in the cells above
pkg, scratch, source = both_drafters("parallel")
pkg3, scratch3, source3 = both_drafters("sequential")
with torch.no_grad():
    par_logits, par_drafts = scratch.draft_parallel(context, taps_f, K)
    pkg_logits = pkg.one_pass_logits(context, taps_f, K)[n - 1:]
    seq_drafts = scratch3.draft_sequential(context, taps_f, K)
    seq_pkg, _ = HeadDrafter(pkg3, "sequential").propose(Slots(context.tolist(), taps_f), K, Sampling())
gap = (par_logits - pkg_logits).abs().max().item()
print(f"P-EAGLE head {source}: fc {scratch.W['fc.weight'].shape[1]} -> {scratch.W['fc.weight'].shape[0]}, "
      f"draft vocabulary {scratch.W['lm_head.weight'].shape[0]}, mask token {pkg.config.mask_token_id}")
print(f"  largest |logit difference| over the {K} draft rows, from scratch vs PEagleDrafter: {gap:.1e}")
print(f"  one pass drafts {tokenizer.decode(par_drafts)!r}")
print(f"EAGLE-3 head {source3}: {K} passes draft {tokenizer.decode(seq_drafts)!r}, "
      f"the package's {tokenizer.decode(seq_pkg)!r}")

# %% tags=["nbval-check-output"]
print("P-EAGLE from scratch equals PEagleDrafter (logits within 1e-4, same drafts):",
      torch.allclose(par_logits, pkg_logits, rtol=0, atol=1e-4)
      and par_drafts.tolist() == pkg.to_target_logits(pkg_logits).argmax(-1).tolist())
print("EAGLE-3 sequential drafting from scratch equals HeadDrafter's (same K drafts):",
      seq_drafts.tolist() == seq_pkg.tolist())

# %% [markdown]
# ## What a slot may see, in training
#
# Training must show every slot exactly what it will see at inference, for many rounds at once. A training
# **element** `(a, d)` is "anchor `a`, depth `d`": a round whose last context slot is `a` (it holds
# `x[a+1]`, `fc(h_a)`), and its slot at depth `d`, which drafts token `d + 1` of the round (depth 0 = slot 1). It
# sits at position `a + d` and learns the target's greedy token at `a + d + 1`.
#
# At inference, the depth-`d` slot of the round after anchor `a` attends to the context slots `0..a` (the
# drafter's KV cache) and to the mask slots at depths `1..d` of its own round. So in training, `(a, d)` may
# attend to
#
# - the **depth-0 elements with anchor ≤ a** of the same sequence (the context), and
# - the elements of **its own rollout**: `(a, d')` with `d' ≤ d`.
#
# `peagle_lab.training` computes the elements depth by depth through one drafter KV cache: depth 0 for every
# position of the row, then depth 1 for the anchors, and so on, with this mask passed explicitly
# (`training_mask`). Several sequences share a row: elements never see another sequence, positions restart.
# COD (*conditional drop-token* sampling; P-EAGLE takes it from PARD, an earlier method in which a small draft
# model drafts several tokens in one pass, mask tokens standing in for the ones not yet known) keeps all anchors
# at depth 0 and fewer at each deeper depth (nested: a rollout kept at depth d exists at
# every depth before it), which makes training K depths much cheaper than K times one depth.
#
# The cell plans toy rows with `plan_row(sequences, num_depths, ratio, min_ratio)`: each sequence carries its
# `prompt_len` (only the last prompt position and the response positions are anchors, so depth 0 has more
# elements than the deeper depths); COD keeps a share `ratio` of the anchors at depth 1, `ratio`² at depth 2 and
# so on, never below a share `min_ratio` (an anchor too near the end of its sequence has no label that deep
# and drops out; notebook 03 sizes a real row).

# %% tags=["nbval-check-output"]
import matplotlib.pyplot as plt

from peagle_lab.training import full_training_mask, plan_row

def toy(T, prompt_len, start=0):
    return dict(input_ids=torch.arange(start, start + T), labels=torch.arange(T), taps=torch.zeros(T, 3),
                prompt_len=prompt_len)

plan1 = plan_row([toy(7, 2)], num_depths=3, ratio=1.0, min_ratio=1.0)  # one sequence, every anchor
mask1, el1 = full_training_mask(plan1)
plan2 = plan_row([toy(9, 3), toy(7, 2)], num_depths=4, ratio=0.7, min_ratio=0.3,
                 generator=torch.Generator().manual_seed(0))  # two packed sequences, COD
mask2, el2 = full_training_mask(plan2)

print("one sequence (T=7, prompt of 2 tokens): elements per depth", [len(d.g) for d in plan1.depths])
q = el1.index((0, 2, 2))
print("(a=2, d=2) attends to", [(a, d) for (s, a, d), m in zip(el1, mask1[q]) if m])

def rule(s, a, d, ks, ka, kd):
    return ks == s and ((kd == 0 and ka <= a) or (kd > 0 and ka == a and kd <= d))
for name, m, el in (("one sequence", mask1, el1), ("two packed sequences + COD", mask2, el2)):
    ok = all(bool(m[i, j]) == rule(*el[i], *el[j]) for i in range(len(el)) for j in range(len(el)))
    cross = any(bool(m[i, j]) for i in range(len(el)) for j in range(len(el)) if el[i][0] != el[j][0])
    print(f"{name}: mask equals the rule: {ok}; any element sees another sequence: {cross}")
print("two packed sequences, COD 0.7 / min 0.3: elements per depth", [len(d.g) for d in plan2.depths])

fig, axes = plt.subplots(1, 2, figsize=(13, 6))
for ax, m, el, title in ((axes[0], mask1, el1, "one sequence, all anchors"),
                         (axes[1], mask2, el2, "two packed sequences, COD")):
    ax.imshow(m.numpy(), cmap="Greens", interpolation="nearest")
    lab = [f"{'s%d ' % s if title.startswith('two') else ''}{a},{d}" for s, a, d in el]
    ax.set_xticks(range(len(el)), lab, rotation=90, fontsize=7)
    ax.set_yticks(range(len(el)), lab, fontsize=7)
    ax.set_xlabel("key element (a, d)")
    ax.set_ylabel("query element (a, d)")
    ax.set_title(f"training mask: {title}")
    ends = [i + 0.5 for i in range(len(el) - 1) if el[i][2] != el[i + 1][2]]
    for e in ends:
        ax.axhline(e, color="k", lw=0.5)
        ax.axvline(e, color="k", lw=0.5)
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the left picture by rows. The first block (depth 0) is plain causal attention. In the depth-1 block, row
# `(a, 1)` sees the depth-0 columns up to `a` and exactly one depth-1 column, its own; row `(a, 2)` sees
# its own `(a, 1)` and `(a, 2)` as well: a small staircase per rollout. That row is the causal view of slot
# `d + 1` in the one-pass draft after anchor `a`, which is why a trained head can draft at inference exactly
# as it was trained. The section "Trained as it drafts" below checks it on the shipped head.
#
# ### Exercise: more parallel slots
#
# The cell below sizes both layouts for `K_TRY` drafts, at K = 2 and then K = 8: the one-pass draft at inference
# (the prompt above) and the training mask of one toy sequence of 12 tokens (a prompt of 2) with every anchor
# kept. Predict first: how many slots the inference pass has, and how the number of training elements and the
# size of the training mask grow with K. Then edit the values and try others.
#
# <details><summary>Answer</summary>
#
# Inference: one pass over `n + K - 1` slots (n context slots, K - 1 mask slots): the K = 8 line has 6 slots more
# than the K = 2 line, one per extra draft, and it is still one drafter pass (its causal mask grows to
# `(n + K - 1)²`). Training: each extra depth adds one block of elements, smaller than the block before (an
# anchor near the end of the sequence has no label `d + 1` tokens ahead): the printed counts go 11, 9, 8, 7, ...
# (depth 0 has all 11 positions with a next token, depth 1 only the 9 anchors with a label two tokens ahead). So
# the elements grow about linearly with K (20 at K = 2, 53 at K = 8) and the mask, elements x elements, about
# quadratically (400 cells, then 2,809), though the allowed pairs grow far less (129, then 409: each new element
# sees its context and its own short rollout). That growth is why COD keeps fewer anchors at each deeper depth.
#
# </details>

# %% tags=["smollm2-fact", "nbval-check-output"]
for K_TRY in (2, 8):  # the exercise's two values; edit to try others
    rows = n + K_TRY - 1
    print(f"inference, K={K_TRY}: one pass over {rows} slots ({n} context + {K_TRY - 1} mask), "
          f"causal mask {(rows, rows)}, drafts from the last {K_TRY} rows")
    plan_try = plan_row([toy(12, 2)], num_depths=K_TRY, ratio=1.0, min_ratio=1.0)
    mask_try, el_try = full_training_mask(plan_try)
    print(f"training, K={K_TRY}, T=12, every anchor: elements per depth {[len(d.g) for d in plan_try.depths]}, "
          f"mask {tuple(mask_try.shape)} with {int(mask_try.sum())} allowed pairs")

# %% [markdown]
# ## The experiment: which stand-in?
#
# Five variants, trained the same way (same data, settings, steps and seeds; parallel mode, one drafter layer):
#
# | variant | token embedding of slots 2..K | hidden state of slots 2..K |
# |---|---|---|
# | **learned** (P-EAGLE) | learned mask row | `fc(mask_hidden)`, `mask_hidden` learned |
# | zeros | learned mask row | zeros (frozen) |
# | copy of h_context | learned mask row | `fc(h_a)`: the anchor's own fused hidden, copied |
# | random | learned mask row | `fc(r)`, `r` a frozen random vector |
# | frozen mask embedding | an existing token's embedding, frozen | `fc(mask_hidden)`, learned |
#
# Everything else (the drafter layer, `fc`, norm, LM head) is trained in every variant. The measure is the
# acceptance length in the real speculative loop at K=7 on held-out prompts (never trained on), greedy, every
# output checked against plain greedy decoding, and the per-position acceptance `P(slot j accepted | slots
# before j accepted)`. Each variant is trained twice, with two seeds: the spread between the seeds of one
# variant is the run-to-run noise, the yardstick for any difference between variants.
#
# The study's table has one row per variant: **held-out AL (mean)**, the acceptance length averaged over the two
# seeds; **seed spread**, the larger minus the smaller of the two seeds' acceptance lengths; **tokens seen**, the
# training tokens per run (the budget); **P(accept) slots 1 / 2 / 3**, the per-position acceptance of slots 1-3
# (depths 0-2), averaged over the seeds; the line under it gives K, the held-out prompts and new tokens, the
# steps, and the largest seed spread of the table.
#
# The full study trains ten heads (its training time is printed with it below), so it runs from the command line
# and its results are committed per host (`peagle-lab study mask --out data/recipe/<host>/mask`, resumable).
# First a small live run through the same code (two variants, a few steps: it shows the machinery, not the answer).
# It first lets the target write the answers to a few training prompts: *self-distillation*, the target answering
# the training prompts itself, greedily, so that the head learns to predict text the target writes (notebook 03
# builds it and measures what it buys). It then extracts their taps in bf16 (01's default, the `Extracting`
# lines); the committed study's caption prints the taps dtype it trained from (float32), and `03_train_head`
# compares training from bf16 and fp32 taps. Each head is scored on *held-out* prompts: prompts of the same
# kinds, set aside before training and never trained on, so the acceptance length measures the head on text it
# has not seen:

# %% tags=["nbval-ignore-output"]
from peagle_lab.experiments import recipe
from peagle_lab.experiments import studies
from peagle_lab.distill.data import distilled_records
from peagle_lab.drafter.heads import target_slug
from peagle_lab.prompts import load_scale_records
from peagle_lab.settings import results_dir
from peagle_lab.training import draft_vocab_size_for, prepare_sequences

records = distilled_records(model, tokenizer, settings.pick(32, 8), TARGET)
seqs = prepare_sequences(model, records, features_dir=results_dir() / "features" / target_slug(TARGET),
                         progress=False)
live_dir = results_dir() / "nb02"
for f in ("runs.jsonl", "RECIPE.md"):  # a fresh live run each time
    (live_dir / f).unlink(missing_ok=True)
scoring = recipe.Scoring(load_scale_records("val")[: settings.pick(2, 1)], k=7, max_new_tokens=settings.pick(32, 12))
plan = recipe.RecipePlan(variants={n: studies.MASK_VARIANTS[n] for n in ("learned (P-EAGLE)", "zeros")},
                         base=dict(studies.BASE, steps=settings.pick(12, 3), warmup_steps=2,
                                   draft_vocab_size=draft_vocab_size_for(model, studies.BASE["draft_vocab_size"])))
live = recipe.run_recipe(model, tokenizer, seqs, scoring, live_dir, plan, progress=False)
for r in live:
    print(f"{r['name']:20s} {r['steps']} steps, {r['tokens_seen']:,} tokens, {r['seconds']:.0f} s: "
          f"held-out acceptance length {r['acceptance_length']:.3f}, divergences from plain greedy "
          f"{r['divergences']}")

# %% [markdown]
# ### Trained as it drafts
#
# Row `(a, d)` of the training mask is the causal view of slot `d + 1` of the one-pass draft after anchor `a`,
# so the training computation must give every element the logits the real draft gives that slot. On a real
# sequence, with the P-EAGLE head for this target (the shipped one for the embedded target): the training elements of three anchors at every depth, against one
# drafter pass per anchor (context slots `0..a`, then `K - 1` mask slots).

# %% tags=["nbval-ignore-output"]
from peagle_lab.drafter.heads import head_for_target
from peagle_lab.memory import release
from peagle_lab.training import TrainConfig, Trainer, TrainerOptions

K_CHECK = 4
seq = seqs[0]
par_head, par_info = head_for_target("parallel", model, tokenizer, TARGET)
trained = par_info["origin"] != "fresh"
if par_info["note"]:  # the shipped head does not fit this target
    print(par_info["note"] if trained else
          par_info["note"].split("; using")[0] + ": the check starts from a fresh head (it holds for any weights)")
cfg = TrainConfig(mode="parallel", num_depths=K_CHECK, layers=1, steps=1, save_every=0, autocast="float32",
                  draft_vocab_size=par_head.config.draft_vocab_size if trained else draft_vocab_size_for(model, 4096),
                  init_from=par_info["path"] if trained else None, target=TARGET)
del par_head  # its config is read; the trainer loads the head from its directory (one copy on the device)
check = Trainer(cfg, model, [seq], tokenizer, TrainerOptions(progress=False, verbose=False))
module = check.module.eval()
plan = plan_row([seq], K_CHECK, ratio=1.0, min_ratio=1.0)  # every anchor at every depth
with torch.no_grad():
    train_logits, _ = module.run_depths(plan)
    head = module.sync_head()
    x, taps = seq["input_ids"], seq["taps"].float()  # features cached as bf16 shards: the values the training reads
    worst = 0.0
    for a in plan.depths[K_CHECK - 1].anchor_pos[:3].tolist():
        n = a + 1
        # context slots 0..a, then K - 1 mask slots; one_pass_logits puts them on the head's device (CPU or CUDA)
        draft_logits = head.one_pass_logits(x[1:n + 1], taps[:n], K_CHECK)
        for d in range(K_CHECK):
            i = int((plan.depths[d].anchor_pos == a).nonzero())
            worst = max(worst, float((train_logits[d][i] - draft_logits[n - 1 + d].to(train_logits[d].device)).abs().max()))
print(f"largest logit difference, training element vs one-pass draft: {worst:.1e}")
del check, module, head, train_logits  # the trainer and its head go before the next cells
release()

# %% tags=["nbval-check-output"]
print("training elements equal the one-pass draft (within 1e-4):", worst < 1e-4)

# %% [markdown]
# ## The committed study

# %% tags=["nbval-ignore-output"]
import math

from IPython.display import Markdown, display

from peagle_lab.workbook.notebook import committed_label

mask_host, mask_runs = studies.committed("mask")
print(committed_label("The mask stand-in study", mask_host))
display(Markdown(studies.summary_markdown(mask_runs)))
rows = studies.summarize(mask_runs)
if rows:
    print(f"{len(mask_runs)} runs, {sum(r['seconds'] for r in mask_runs) / 60:.0f} min of training in all; "
          f"training data (taps dtype): {sorted({r.get('data', '?') for r in mask_runs})}")
    print("\n".join(studies.verdict_lines(mask_runs)))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for row in rows:
        group = [r for r in mask_runs if r["name"].rsplit(" (seed", 1)[0] == row["setting"]]
        ax.plot([row["setting"]] * len(group), [r["acceptance_length"] for r in group], "o", color="C0")
        ax.plot([row["setting"]], [row["acceptance_length"]], "_", color="k", markersize=24)
    ax.set(ylabel="held-out acceptance length (K=7)",
           title=f"mask stand-ins, SmolLM2-135M: each seed a dot, the mean a bar ({mask_host})")
    ax.tick_params(axis="x", rotation=20)
    ax.grid(alpha=0.3)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# **Reading it.** A frozen random vector scores level with the learned `mask_hidden` (held-out acceptance
# length 1.209 against 1.211, a gap of 0.002, below both seed spreads): at this budget learning the stand-in
# bought nothing measurable. The "separated" lines list the pairs whose gap is strictly greater than both arms'
# seed spreads at the printed precision: both beat zeros and the copy of h_context, by 0.02-0.03 tokens per
# round. Learned against the frozen mask embedding (a gap of 0.020, equal to that arm's spread of 0.020) is not
# separated. Two seeds per arm give only a rough estimate of the noise.
#
# The stand-in enters drafting at slot 2, but it is trained together with the shared weights, so the slot-1
# column moves between variants too. The slot-2 and slot-3 rates rest on far fewer rounds than slot 1 (the round
# counts printed: slot 2 is reached only after an accepted slot 1), so the copy of h_context's higher slot-2/3
# rates are weaker evidence than its lower slot-1 rate, which is what its acceptance length follows. What limits
# acceptance here is slot 1. What would separate the stand-ins further: heads trained an order of magnitude
# longer, so that deep slots are accepted often; far more held-out rounds at slots 2-3; more seeds.

# %% tags=["nbval-ignore-output"]
from peagle_lab.workbook import report

for row in rows:
    report.record(f"mask_study_acceptance_length_{row['setting'].split(' (')[0].replace(' ', '_')}",
                  row["acceptance_length"])
report.record("mask_live_divergences", sum(r["divergences"] for r in live));

# %% [markdown]
# ## What we saw
#
# - Slots 2..K of a P-EAGLE draft get a mask token and `fc(mask_hidden)`: with those stand-ins, one drafter pass
#   over `n + K - 1` slots gives all K drafts (the hand-built pass above equals the package's drafter).
# - Training packs every anchor's rollout into one masked computation: each element sees its context (depth-0
#   elements up to its anchor) and its own rollout, nothing else (the mask above equals its rule), and it
#   gives the one-pass draft's logits to float rounding (the largest difference printed).
# - The drafter is small enough to write out: `fc` over the taps, one decoder layer with a 2H attention input,
#   the mask row and `mask_hidden`, the norm, `lm_head` over the draft vocabulary and `d2t`; the from-scratch
#   version with the shipped weights gives the package's logits (P-EAGLE's one pass) and drafts (EAGLE-3's K
#   passes).
# - The committed study: a frozen random stand-in scores level with the learned `mask_hidden` (1.209 against
#   1.211); both beat zeros and the copy of h_context by 0.02-0.03 tokens per round, more than both seed spreads.
#   What limits a small head is slot 1, which is what training has to raise.
#
# Next: `03_train_head`, training a P-EAGLE head: the data, the draft vocabulary, COD and the per-depth loss.
