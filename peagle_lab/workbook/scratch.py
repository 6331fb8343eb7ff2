"""Notebook 02's from-scratch drafter, kept here word for word so that later chapters can import it (as
LLMs-from-scratch keeps earlier chapters' code in ``previous_chapters.py``); ``tests/notebooks/test_scratch_copy.py``
checks that the two are the same code."""

import torch
import torch.nn.functional as F

from peagle_lab.drafter.network import RotaryTables  # only for a target with a scaled RoPE (not SmolLM2)


class ScratchLayer:
    """The drafter's network, one sequence at a time, from the head's tensors (vLLM's eagle3 names): fc over the
    taps, one decoder layer over the 2H input, the final norm and lm_head over the draft vocabulary."""

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


class ScratchDrafter(ScratchLayer):
    """A one-layer EAGLE-3 / P-EAGLE drafter: the layer above, run once (parallel) or K times (sequential)."""

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
