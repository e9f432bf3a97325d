"""The demo's model presets: the Llama-3.1-70B preset has that model's decoder-layer shapes
(grouped-query attention included), and grouped-query attention computes what repeating the
key/value heads computes."""

import dataclasses

import torch
import torch.nn.functional as F

from tide.demo.model import LLAMA_3_1_70B, Config, Decoder, _rotary


def test_llama_preset_has_the_layer_shapes_of_llama_3_1_70b():
    with torch.device("meta"):
        model = Decoder(dataclasses.replace(LLAMA_3_1_70B, layers=2))
    shapes = {name: tuple(p.shape) for name, p in model.blocks[1].named_parameters()}
    # q 8192 + k 1024 + v 1024 rows (8 key/value heads of 128), SwiGLU gate and up 28672 each.
    assert shapes == {"attn_norm.weight": (8192,), "qkv.weight": (10240, 8192),
                      "out.weight": (8192, 8192), "mlp_norm.weight": (8192,),
                      "gate_up.weight": (57344, 8192), "down.weight": (8192, 28672)}
    assert tuple(model.embed.weight.shape) == (128256, 8192)


def test_grouped_query_attention_equals_repeated_key_value_heads():
    seed = torch.seed()
    print(f"seed {seed}")
    cfg = Config(vocab=64, dim=48, layers=1, heads=6, hidden=40, seq=9, kv_heads=2)
    block = Decoder(cfg).blocks[0]
    x = torch.randn(3, cfg.seq, cfg.dim)
    got = block(x)
    # The same block by hand, key/value heads repeated to all query heads.
    b, s, d = x.shape
    q, k, v = block.qkv(block.attn_norm(x)).split(block.split, dim=-1)
    q = q.view(b, s, 6, -1).transpose(1, 2)
    k, v = (t.view(b, s, 2, -1).transpose(1, 2).repeat_interleave(3, dim=1) for t in (k, v))
    y = F.scaled_dot_product_attention(_rotary(q), _rotary(k), v, is_causal=True)
    h = x + block.out(y.transpose(1, 2).reshape(b, s, d))
    gate, up = block.gate_up(block.mlp_norm(h)).chunk(2, dim=-1)
    want = h + block.down(F.silu(gate) * up)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
