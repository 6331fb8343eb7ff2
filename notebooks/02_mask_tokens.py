# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python (peagle-lab)
#     language: python
#     name: peagle-lab
# ---

# %% [markdown]
# # 02 · Mask tokens: what parallel slots 2..K see
#
# **Goal:** know what P-EAGLE feeds its drafter so that one forward pass yields K drafts, and what each slot may
# attend to, at inference and in training.
#
# Plan: why slots 2..K need stand-ins; the one-pass inputs, built by hand and then by you; the drafter from
# scratch; the training attention mask; a check that training computes what drafting computes; a study of which
# stand-in works best.
#
# Indexing as in the code (and 00's glossary): positions are 0-based, the context is `x_0 .. x_n` and the target's
# taps are `h_0 .. h_n`. A round's slots are j = 1..K; slot j drafts **draft j** at depth j - 1 (slot 1 = depth 0).
# Live cells run on this machine; the study at the end is read from committed results in `data/`.

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
# Each drafter position takes two inputs: a **token** and a **hidden state** from the target. Position `t`
# holds token `x_{t+1}` and the target's fused taps `fc(h_t)` (the EAGLE shift). After a round the target has
# run over `x_0 .. x_n` and chosen `x_{n+1}` from `h_n`, so the last context position, `n`, holds
# `(x_{n+1}, fc(h_n))`: it is round slot 1 and outputs draft 1, the guess for `x_{n+2}`.
#
# EAGLE-3 gets draft 2 from a second pass that feeds draft 1 back in. To draft 2..K in the *same* pass, slots
# 2..K must be filled before any draft exists, and neither input exists yet: the token would be the previous
# draft, the hidden state the target's state at a position it has not run.
#
# P-EAGLE fills them with two learned stand-ins, shared by every such slot: a **mask token** (one embedding row)
# and **`mask_hidden`** (one 3H vector, passed through `fc` like real taps). They say nothing about the text at
# hand. A mask slot can still predict because its attention reads every context position in the drafter's KV
# cache, and RoPE rotates its query by its own position, so slot j attends as a query j - 1 positions past
# slot 1 and learns to guess the token that far ahead. One round with K = 4:

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.distill.data import read_distilled, shipped_distilled_path

MASK_ID = pick_mask_token_id(tokenizer)
print(f"mask token: id {MASK_ID} = {tokenizer.convert_ids_to_tokens(MASK_ID)!r} (a special token of the tokenizer)")
if shipped_distilled_path(TARGET).exists():  # the training text of notebook 03, for the embedded target
    _, train_text = read_distilled(shipped_distilled_path(TARGET))
    print(f"it occurs {sum(list(r['input_ids']).count(MASK_ID) for r in train_text)} times in the "
          f"{len(train_text)} training sequences of {shipped_distilled_path(TARGET).name}")

committed = tokenizer("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
n, K = len(committed) - 2, 4  # taps h_0..h_n; x_{n+1} is the token chosen from h_n; draft K tokens
show = lambda i: repr(tokenizer.decode([i]))
print(f"\n{'pos':>4} {'round slot':>10}  {'input token':<16} {'hidden':<17} {'attends to':<14} output")
for t in range(n + 1):  # the context positions 0..n
    slot, out = ("1", f"draft 1 (x_{n + 2})") if t == n else ("-", "(context)")
    print(f"{t:>4} {slot:>10}  {f'x_{t + 1} = ' + show(committed[t + 1]):<16} {f'fc(h_{t})':<17} "
          f"{f'pos 0..{t}':<14} {out}")
for j in range(2, K + 1):
    t = n + j - 1
    print(f"{t:>4} {j:>10}  {'<mask>':<16} {'fc(mask_hidden)':<17} {f'pos 0..{t}':<14} draft {j} (x_{n + j + 1})")

# %% [markdown]
# The same round as tensors: one forward pass over `n + K` positions (`0 .. n + K - 1`), and the K drafts are
# the argmax of its last K rows, which is what `HeadDrafter.propose` drafts in the loop. The head is untrained
# here: the mechanics are exact, the drafts are not good.

# %% tags=["smollm2-fact", "nbval-check-output"]
torch.manual_seed(0)
cfg = PEagleConfig.from_target(model.config, mask_token_id=MASK_ID, num_speculative_tokens=K)
head = PEagleDrafter(cfg).init_from_target(model).to(DEVICE).eval()
ids = torch.tensor([committed], device=DEVICE)
with torch.no_grad():
    taps = target_forward(model, ids, cfg.aux_hidden_state_layer_ids, use_cache=False).taps[0, :n + 1].float()
    inp = torch.cat([ids[0, 1:], torch.full((K - 1,), MASK_ID, device=DEVICE)])[None]
    hidden = torch.cat([head.fuse(taps), head.mask_slot_hidden()[0].expand(K - 1, -1)])[None]
    logits, _ = head(inp, hidden, torch.arange(n + K, device=DEVICE)[None])
drafts, _ = HeadDrafter(head, "parallel").propose(Slots(ids[0, 1:].tolist(), taps), K, Sampling())
print(f"taps h_0..h_{n}: {tuple(taps.shape)} (3 x {model.config.hidden_size})")
print(f"one forward pass: input_ids {tuple(inp.shape)}, hidden {tuple(hidden.shape)} -> logits {tuple(logits.shape)}")
print(f"attention: plain causal over the {n + K} positions, a ({n + K}, {n + K}) lower-triangular mask; "
      f"the drafts are rows {n}..{n + K - 1}")
mine = head.draft_to_target_ids()[logits[0, n:].argmax(-1)]  # draft-vocabulary ids -> target ids (d2t)
print("K drafts = argmax of the last K rows, as HeadDrafter.propose drafts them:", mine.tolist() == drafts.tolist())

# %% [markdown]
# ### Exercise: build one round's inputs
#
# After the first round the drafter caches its earlier positions, so a round feeds it the positions committed since,
# the last of them slot 1, then slots 2..K (mask). Take a round that accepted no draft: one new position, so K slots
# in all. Write `my_round_inputs`: from the last committed token, its taps (3H values) and position `p`, K, the mask
# token id, `mask_hidden` and the head's `fc`, return the K slots' token ids, fused hidden states (K, H) and
# positions. The cell checks them against what `HeadDrafter.propose` feeds the head (caught by a forward hook) for
# every `p` of the prompt above and K = 1, 4, 7.
#
# Try it before you read the answer: the cell after this one writes it out and runs the same check.

# %%
def my_round_inputs(last_token, last_taps, p, K, mask_id, mask_hidden, fc):
    """The K slots of a round whose slot 1 sits at position p: token ids (K,), fused hidden states (K, H),
    positions (K,). last_taps: the target's taps at that position (3H,); fc: the head's 3H -> H."""
    raise NotImplementedError("write me: about three lines")


def package_round_inputs(p, k):
    """What HeadDrafter.propose feeds the head in a round whose slot 1 sits at p (positions 0..p-1 cached)."""
    seen = []
    hook = head.register_forward_pre_hook(lambda module, args: seen.append([a[0].cpu() for a in args]))
    drafter = HeadDrafter(head, "parallel")
    drafter.propose(Slots(slot_tokens[:p], taps[:p]), k, Sampling())  # the earlier rounds: now in the cache
    drafter.propose(Slots(slot_tokens[p:p + 1], taps[p:p + 1], start=p), k, Sampling())  # this round
    hook.remove()
    return seen[-1]  # token ids, fused hidden states, positions


slot_tokens = ids[0, 1:].tolist()


def check_round_inputs(my_round_inputs):
    """The exercise's check, run on any `my_round_inputs`."""
    wrong, checked = [], 0
    with torch.no_grad():
        for p in range(1, n + 1):
            for k in (1, 4, 7):
                want = package_round_inputs(p, k)
                got = [torch.as_tensor(t).cpu() for t in
                       my_round_inputs(slot_tokens[p], taps[p], p, k, MASK_ID, head.mask_hidden, head.fc)]
                bad = [what for what, g, w in zip(("token ids", "hidden states", "positions"), got, want)
                       if g.shape != w.shape or not torch.allclose(g.to(w.dtype), w, rtol=0, atol=1e-5)]
                checked += 1
                if bad:
                    wrong.append(f"p={p}, K={k}: the {' and '.join(bad)} differ")
    print(f"your inputs equal the package's in {checked - len(wrong)} of {checked} rounds"
          + (f"; the first difference: {wrong[0]}" if wrong else ""))


try:
    check_round_inputs(my_round_inputs)
except NotImplementedError as exc:
    print(f"my_round_inputs is not written yet ({exc}); the answer is the next cell")

# %%
# The answer. Only slot 1 carries this round's information. Every mask slot gets the same token and the same
# `fc(mask_hidden)`; only their positions, `p + 1 .. p + K - 1`, tell them apart.
def my_round_inputs(last_token, last_taps, p, K, mask_id, mask_hidden, fc):
    tokens = torch.tensor([last_token] + [mask_id] * (K - 1))
    hidden = torch.cat([fc(last_taps.view(1, -1)), fc(mask_hidden.view(1, -1)).expand(K - 1, -1)])
    return tokens, hidden, torch.arange(p, p + K)


check_round_inputs(my_round_inputs)

# %% [markdown]
# ## The drafter from scratch
#
# The whole network in plain PyTorch, one class of about 65 lines, to be loaded with the shipped heads' weights.
# The figure shows one position's path through it:
#
# - `fc`: projects the target's three concatenated taps (3H) to H;
# - one decoder layer whose attention reads **2H** = `[norm(token embedding), norm(hidden)]`, the only place
#   where token and target state meet;
# - the **mask row** of the embedding table and **`mask_hidden`**: the two stand-ins, in place of the token's
#   embedding and the taps in slots 2..K;
# - the final norm, `lm_head` over the **draft vocabulary** (a few thousand frequent ids), and `d2t`, which maps
#   a draft id back to a target id (`target = draft + d2t[draft]`).
#
# `draft_parallel` is P-EAGLE's one pass; `draft_sequential` is EAGLE-3's K passes, each feeding back the token
# just drafted and the drafter's own state.

# %% tags=["nbval-ignore-output"]
from peagle_lab.workbook.diagrams import draw_drafter_path

draw_drafter_path(model.config.hidden_size, cfg.aux_hidden_state_layer_ids)

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
        # norm_before_residual (a config flag vLLM's eagle3 heads carry): the residual adds the normed hidden, else raw
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
        """P-EAGLE: ONE pass drafts K tokens. Slot 1 = [emb(x_{n+1}), fc(h_n)], the last context position n;
        slots 2..K = [mask embedding, fc(mask_hidden)], at the next positions."""
        n = len(context) - 1
        tokens = torch.cat([context, context.new_full((K - 1,), self.cfg.mask_token_id)])
        hidden = torch.cat([self.fuse(taps), self.fuse(self.W["mask_hidden"].view(1, -1)).expand(K - 1, -1)])
        logits, _ = self.forward(tokens, hidden, torch.arange(n + K, device=tokens.device))
        return logits[n:], self.target_id[logits[n:].argmax(-1)]  # the last K rows are drafts 1..K

    def draft_sequential(self, context, taps, K):
        """EAGLE-3: K passes; each appends one position holding the token just drafted and the drafter's OWN
        prenorm state of the position before (no target state exists there), then drafts from the new last row."""
        tokens, hidden, drafts = context, self.fuse(taps), []
        for _ in range(K):
            logits, prenorm = self.forward(tokens, hidden, torch.arange(len(tokens), device=tokens.device))
            drafts.append(self.target_id[logits[-1].argmax()])
            tokens, hidden = torch.cat([tokens, drafts[-1].view(1)]), torch.cat([hidden, prenorm[-1:]])
        return torch.stack(drafts)

# %% [markdown]
# Load each shipped head both ways, in float32, and draft K tokens after the prompt above: P-EAGLE's one pass
# against `PEagleDrafter.one_pass_logits`, EAGLE-3's K passes against the package's sequential drafting. The check is
# that both sides compute the same, which holds for any weights, so the drafts need not be good (the prompt is raw
# code, not a chat turn like the heads' training data).

# %% tags=["nbval-ignore-output"]
from peagle_lab.drafter.heads import head_for_target


def both_drafters(kind):
    """(package head in float32, ScratchDrafter from the same weights, the head's info: source, path, origin)."""
    head, info = head_for_target(kind, model, tokenizer, TARGET)
    head = head.float().eval()
    W = read_tensors(info["path"]) if info["path"] else head.export_state_dict()
    W = {k: v.to(DEVICE) for k, v in W.items()}
    W.setdefault("d2t", head.d2t)
    W.setdefault("mask_hidden", head.mask_hidden.detach())  # an EAGLE-3 head stores none (never used)
    emb = W.get("embed_tokens.weight", model.get_input_embeddings().weight.detach())
    return head, ScratchDrafter(head.config, W, emb), info


context = ids[0, 1:]  # the prompt's drafter inputs x_1..x_{n+1}, with the taps h_0..h_n above
pkg, scratch, pkg_info = both_drafters("parallel")
pkg3, scratch3, pkg3_info = both_drafters("sequential")
with torch.no_grad():
    par_logits, par_drafts = scratch.draft_parallel(context, taps, K)
    pkg_logits = pkg.one_pass_logits(context, taps, K)[n:]
    seq_drafts = scratch3.draft_sequential(context, taps, K)
    seq_pkg, _ = HeadDrafter(pkg3, "sequential").propose(Slots(context.tolist(), taps), K, Sampling())
gap = (par_logits - pkg_logits).abs().max().item()
print(f"P-EAGLE head {pkg_info['source']}: fc {scratch.W['fc.weight'].shape[1]} -> {scratch.W['fc.weight'].shape[0]}, "
      f"draft vocabulary {scratch.W['lm_head.weight'].shape[0]}, mask token {pkg.config.mask_token_id}")
print(f"  largest |logit difference| over the {K} draft rows, from scratch vs PEagleDrafter: {gap:.1e}")
print(f"  one pass drafts {tokenizer.decode(par_drafts)!r}")
print(f"EAGLE-3 head {pkg3_info['source']}: {K} passes draft {tokenizer.decode(seq_drafts)!r}, "
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
# Training must show every slot what it will see when drafting, for many rounds at once. A training **element**
# `(a, d)` is slot `d + 1` (depth `d`) of the round whose slot 1 sits at the anchor position `a`. It sits at
# position `a + d` and learns `y_{a+d+1}`, the target's greedy choice for `x_{a+d+2}` (its label). When drafting, that
# slot attends to the context positions `0..a` and to the mask slots before it. So in training, `(a, d)` may attend to
#
# - the **depth-0 elements with anchor ≤ a** of the same sequence (its context), and
# - **its own rollout**: `(a, d')` with `d' ≤ d`.
#
# Depth 0 holds every position with a next token; only the anchors (the last prompt position and the response)
# go deeper, and an anchor near the end has no label that deep. **COD** (conditional drop-token sampling, from
# PARD) keeps a shrinking, nested share of anchors at each deeper depth (`ratio^d`, never below `min_ratio`), so K
# depths cost far less than K times one. The cell builds the mask for one toy sequence and for two packed ones with
# COD, and checks both against the rule.

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
# **Reading it.** The mask equals its rule in both layouts, and no element sees another sequence. In the left panel,
# `(2, 2)` attends to the depth-0 columns up to its anchor, `(0, 0)` to `(2, 0)`, to its own rollout `(2, 1)`, and to
# itself: exactly
# what slot 3 sees in the one-pass draft after anchor 2. So a head drafts as it was trained.
#
# ### Exercise: more parallel slots
#
# The cell below sizes both layouts at K = 2 and K = 8: the one-pass draft for the prompt above, and the training
# mask of a toy sequence of 12 tokens (a prompt of 2) with every anchor kept. Predict first: how many positions
# does the inference pass have, and how do the training elements and the mask grow with K? Then try other values.
#
# <details><summary>Answer</summary>
#
# Inference stays one pass over `n + K` positions: 9 at K = 2, 15 at K = 8. Depth 0 holds every position with a next
# token (11); each deeper depth holds only the anchors (the last prompt position and the response) that still have a
# label that far ahead, one fewer per depth (9, 8, 7, ...). So the elements grow about linearly (20, then 53), the mask
# quadratically (20 x 20, then 53 x 53), and the allowed pairs far less (129, then 409). That growth is why COD thins
# the deeper depths.
#
# </details>

# %% tags=["smollm2-fact", "nbval-check-output"]
for K_TRY in (2, 8):  # the exercise's two values; edit to try others
    n_slots = n + K_TRY
    print(f"inference, K={K_TRY}: one pass over {n_slots} positions ({n + 1} context + {K_TRY - 1} mask), "
          f"causal mask {(n_slots, n_slots)}, drafts from the last {K_TRY} rows")
    plan_try = plan_row([toy(12, 2)], num_depths=K_TRY, ratio=1.0, min_ratio=1.0)
    mask_try, el_try = full_training_mask(plan_try)
    print(f"training, K={K_TRY}, T=12, every anchor: elements per depth {[len(d.g) for d in plan_try.depths]}, "
          f"mask {tuple(mask_try.shape)} with {int(mask_try.sum())} allowed pairs")

# %% [markdown]
# ## The experiment: which stand-in?
#
# Does the learned `mask_hidden` matter, or would any fixed stand-in do? Five variants, trained identically (same
# data, steps and seeds), differ only in what slots 2..K receive:
#
# | variant | token embedding of slots 2..K | hidden state of slots 2..K |
# |---|---|---|
# | **learned** (P-EAGLE) | learned mask row | `fc(mask_hidden)`, `mask_hidden` learned |
# | zeros | learned mask row | zeros (frozen) |
# | copy of h_context | learned mask row | `fc(h_a)`: the anchor's own fused hidden, copied |
# | random | learned mask row | `fc(r)`, `r` a frozen random vector |
# | frozen mask embedding | an existing token's embedding, frozen | `fc(mask_hidden)`, learned |
#
# Each head drafts in the real speculative loop at K=7 on held-out prompts (the held-out split of the *scale mix*,
# the course's training prompts, which 03 introduces). Columns: **held-out AL (mean)**, tokens
# per round averaged over two seeds; **seed spread**, the gap between those seeds; **tokens seen** per run;
# **P(accept) slots 1 / 2 / 3**, the rate at which slot j is accepted when the slots before it were.
#
# The full study trains ten heads (`peagle-lab study mask`), so it is committed. The cell first runs a tiny live
# version of the same code (two variants, a few steps, one seed): it shows the machinery, not the answer.

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
# If the mask is right, every training element gives the logits that the one-pass draft gives its slot, up to float
# rounding. The cell checks this on a real sequence with the P-EAGLE head for this target: three anchors at every depth,
# each against one drafter pass (context positions `0..a`, then `K - 1` mask slots).

# %% tags=["nbval-ignore-output"]
from peagle_lab.memory import release
from peagle_lab.training import TrainConfig, Trainer, TrainerOptions

K_CHECK = 4
seq = seqs[0]
trained = pkg_info["origin"] != "fresh"  # the P-EAGLE head loaded above (an untrained one also passes the check)
cfg_check = TrainConfig(mode="parallel", num_depths=K_CHECK, layers=1, steps=1, save_every=0, autocast="float32",
                        draft_vocab_size=pkg.config.draft_vocab_size if trained else draft_vocab_size_for(model, 4096),
                        init_from=pkg_info["path"] if trained else None, target=TARGET)
check = Trainer(cfg_check, model, [seq], tokenizer, TrainerOptions(progress=False, verbose=False))
module = check.module.eval()
plan = plan_row([seq], K_CHECK, ratio=1.0, min_ratio=1.0)  # every anchor at every depth
with torch.no_grad():
    train_logits, _ = module.run_depths(plan)
    synced = module.sync_head()
    x_seq, taps_seq = seq["input_ids"], seq["taps"].float()  # the cached features the training reads
    worst = 0.0
    for a in plan.depths[K_CHECK - 1].anchor_pos[:3].tolist():
        draft_logits = synced.one_pass_logits(x_seq[1:a + 2], taps_seq[:a + 1], K_CHECK)  # positions 0..a, then masks
        for d in range(K_CHECK):  # element (a, d) against the draft row of slot d + 1, row a + d
            i = int((plan.depths[d].anchor_pos == a).nonzero())
            gap = (train_logits[d][i] - draft_logits[a + d].to(train_logits[d].device)).abs().max()
            worst = max(worst, float(gap))
print(f"largest logit difference, training element vs one-pass draft: {worst:.1e}")
del check, module, synced, train_logits; release()  # free the trainer before the next cells

# %% tags=["nbval-check-output"]
print("training elements equal the one-pass draft (within 1e-4):", worst < 1e-4)

# %% [markdown]
# ## The committed study
#
# The table, then the rule in code: a gap between two stand-ins' mean ALs counts only beyond both their seed spreads,
# and is firm only beyond the largest seed spread of any committed study (0.052, from the self-distillation study of
# notebook 03). Last, how many rounds
# reach each slot: slot j + 1 is reached only where slot j was accepted.

# %% tags=["nbval-ignore-output"]
from IPython.display import Markdown, display

from peagle_lab.workbook.notebook import committed_label

mask_host, mask_runs = studies.committed("mask")
print(committed_label("The mask stand-in study", mask_host))
display(Markdown(studies.summary_markdown(mask_runs)))
rows = studies.summarize(mask_runs)  # one row per stand-in: mean AL over its seeds, their spread, slot rates
print(f"{len(mask_runs)} runs, {sum(r['seconds'] for r in mask_runs) / 60:.0f} min of training in all; target dtype "
      f"{sorted({(r.get('machine') or {}).get('target_dtype', 'not recorded') for r in mask_runs})}; "
      f"training data (taps dtype) {sorted({r.get('data', 'not recorded') for r in mask_runs})}")
fig, ax = plt.subplots(figsize=(7.5, 3.8))
for row in rows:
    seeds = [r["acceptance_length"] for r in mask_runs if r["name"].rsplit(" (seed", 1)[0] == row["setting"]]
    ax.plot([row["setting"]] * len(seeds), seeds, "o", color="C0")
    ax.plot([row["setting"]], [row["acceptance_length"]], "_", color="k", markersize=24)
ax.set(ylabel="held-out acceptance length (K=7)",
       title=f"mask stand-ins, SmolLM2-135M: each seed a dot, the mean a bar ({mask_host})")
ax.tick_params(axis="x", rotation=20)
ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()

# %% tags=["nbval-ignore-output"]
def separated(a, b):
    """The gap in mean AL of stand-in a over b, and whether it exceeds both seed spreads (at three decimals)."""
    gap = a["acceptance_length"] - b["acceptance_length"]
    return gap, round(abs(gap), 3) > round(max(a["seed_spread"], b["seed_spread"]), 3)


study_noise = studies.largest_seed_spread()  # the largest seed spread of any committed study (this, and 03's two)
firm = lambda gap: round(abs(gap), 3) > round(study_noise, 3)
by_al = sorted(rows, key=lambda r: -r["acceptance_length"])
for i, hi in enumerate(by_al):
    for lo in by_al[i + 1:]:
        gap, apart = separated(hi, lo)
        verdict = (("beyond them and" if firm(gap) else "beyond them, within") + f" the studies' {study_noise:.3f}"
                   if apart else "within them")
        print(f"{hi['setting']:>21} over {lo['setting']:<21} by {gap:.3f}, seed spreads {hi['seed_spread']:.3f} and "
              f"{lo['seed_spread']:.3f}: {verdict}")

by = {r["setting"]: r for r in rows}
learned, rand = by["learned (P-EAGLE)"], by["random"]
gap, apart = separated(learned, rand)
beaten = [r["setting"] for r in rows if (sep := separated(learned, r))[1] and sep[0] > 0]
verb = ("beats" if gap > 0 else "loses to") if apart else "buys nothing measurable over"
print(f"\nVerdict: learning mask_hidden {verb} a frozen "
      f"random stand-in (AL {learned['acceptance_length']:.3f} against {rand['acceptance_length']:.3f}, a gap of "
      f"{gap:+.3f}); the learned stand-in leads beyond both seed spreads against: {', '.join(beaten) or 'none'}; "
      f"beyond the studies' {study_noise:.3f} against: "
      f"{', '.join(b for b in beaten if firm(learned['acceptance_length'] - by[b]['acceptance_length'])) or 'none'}\n")

r0 = mask_runs[0]
for r in rows:
    reach = [r0["val_prompts"] * r0["max_new_tokens"] / r["acceptance_length"]]  # rounds per run, at most
    for p in r["slots_1_3"][:2]:
        reach.append(reach[-1] * p)  # the next slot is reached only where this one was accepted
    print(f"{r['setting']:<21} slots 1 / 2 / 3 accepted at {' / '.join(f'{p:.2f}' for p in r['slots_1_3'])}, "
          f"reached in at most about {' / '.join(f'{x:.0f}' for x in reach)} rounds per run")

# %% [markdown]
# **Reading it.** Learning `mask_hidden` buys nothing measurable: a frozen random vector scores the same (AL 1.209
# against 1.211). Learned and random lead zeros and the copy of h_context by 0.020 to 0.029, beyond those arms' seed
# spreads but within the studies' 0.052: suggestive, not settled. At this small budget slot 1 (accepted at 0.20 for
# the learned stand-in) sets the AL, and slot 1 never attends to a mask slot; slots 2 and 3 are reached in only
# about 168 and 9 of 845 rounds per run (counts from the unrounded rates). So the study says little about how well the stand-ins serve slots 2..K.

# %% tags=["nbval-ignore-output"]
from peagle_lab.workbook import report

for row in rows:
    report.record(f"mask_study_acceptance_length_{row['setting'].split(' (')[0].replace(' ', '_')}",
                  row["acceptance_length"])
report.record("mask_live_divergences", sum(r["divergences"] for r in live));

# %% [markdown]
# ## What we saw
#
# - Slots 2..K get a mask token and `fc(mask_hidden)`, so one drafter pass over the context and K - 1 mask slots
#   gives all K drafts.
# - The drafter fits in one class of about 65 lines and, loaded with the shipped weights, gives the package's logits
#   (P-EAGLE's one pass) and drafts (EAGLE-3's K passes).
# - Training packs every anchor's rollout into one masked computation; on the elements checked (three anchors at every
#   depth of one sequence) it gives the one-pass draft's logits up to float rounding.
# - A frozen random stand-in scores level with the learned `mask_hidden` (AL 1.209 against 1.211); at that study's
#   small budget slot 1 sets the AL, and slots 2..K, where the stand-ins sit, are seldom reached.
#
# Next: `03_train_head`, training a P-EAGLE head: the data, the draft vocabulary, COD and the per-depth loss.
