"""compare_hf.py: tandem's CUDA engine against an implementation nobody here wrote.

For a Llama-2-style and a Llama-3-style (GQA, llama3 RoPE scaling) config, this script
  1. has `tandem generate --save-checkpoint` write synthetic bf16 weights as a Hugging Face
     checkpoint (config.json + model.safetensors),
  2. runs `tandem generate --backend cuda` greedily for 32 steps with --dump-logits,
  3. loads the same checkpoint with transformers' LlamaForCausalLM on the GPU, in float32 (the
     bf16 weights upcast exactly: the most accurate reading of the same function) and in bf16,
     and runs its own greedy loop for 32 steps, plus one teacher-forced pass over tandem's
     sequence, which gives transformers' logits at every position tandem sampled from.
Checks: (a) the checkpoint loads with no missing or unexpected tensors and transformers' RoPE
frequencies equal tandem's formula; (b) tandem's logits match the teacher-forced float32 logits
to bf16 accuracy (relative L2 error per row under 2e-2); (c) tandem's 32 greedy tokens equal
transformers' float32 greedy tokens. Where they differ, the first difference must be a near-tie:
transformers' own top-2 logit gap there smaller than the largest logit error measured at the
agreeing positions (a bf16 engine cannot be asked to break ties finer than its own error), and
every teacher-forced position must still pick tandem's token or be such a near-tie.

Runs on the GPU machine only (PyTorch + transformers); exit status 0 when every check passes.
usage: python3 engine/compare_hf.py --tandem build/tandem [--workdir DIR] [--steps 32]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaForCausalLM


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def expected_inv_freq(cfg):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type") == "llama3":
        f, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
        out = []
        for x in inv:
            wl = 2 * math.pi / x
            if wl > old / lo:
                out.append(x / f)
            elif wl < old / hi:
                out.append(x)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * x / f + s * x)
        inv = np.array(out)
    return inv


@torch.no_grad()
def greedy(model, prompt, steps):
    ids = list(prompt)
    for _ in range(steps):
        logits = model(torch.tensor([ids], device="cuda")).logits[0, -1]
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):]


@torch.no_grad()
def teacher_forced(model, prompt, tokens):
    ids = torch.tensor([list(prompt) + list(tokens[:-1])], device="cuda")
    logits = model(ids).logits[0].float()
    return logits[len(prompt) - 1:].cpu().numpy()  # (steps, V): the logits each token came from


def compare(name, args):
    d = os.path.join(args.workdir, name)
    sh([args.tandem, "generate", "--model", f"synthetic:{name}", "--weight-seed", "3", "--save-checkpoint", d])
    cfg = json.load(open(os.path.join(d, "config.json")))
    V = cfg["vocab_size"]
    prompt = [int(x) for x in np.random.RandomState(0).randint(3, V, size=16)]
    dump = os.path.join(args.workdir, f"{name}.logits")
    out = sh([args.tandem, "generate", "--model", d, "--backend", "cuda", "--prompt-ids",
              ",".join(map(str, prompt)), "--max-tokens", str(args.steps), "--ignore-eos", "--dump-logits", dump])
    ours = [int(x) for x in out.strip().split(",")]
    our_logits = np.fromfile(dump, dtype=np.float32).reshape(args.steps, V)

    print(f"== {name}: hidden {cfg['hidden_size']}, layers {cfg['num_hidden_layers']}, heads "
          f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']}, vocab {V}, "
          f"rope_scaling {(cfg.get('rope_scaling') or {}).get('rope_type', 'none')}")
    ok = True
    model, info = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    model = model.cuda().eval()
    missing, unexpected = info.get("missing_keys", []), info.get("unexpected_keys", [])
    print(f"   checkpoint: missing {len(missing)}, unexpected {len(unexpected)} tensors")
    if missing or unexpected:
        print(f"   FAIL: missing {missing[:5]} unexpected {unexpected[:5]}")
        ok = False
    inv_hf = model.model.rotary_emb.inv_freq.double().cpu().numpy()
    inv_err = float(np.max(np.abs(inv_hf - expected_inv_freq(cfg)) / expected_inv_freq(cfg)))
    print(f"   RoPE inv_freq: transformers vs tandem's formula, max rel diff {inv_err:.2e}")
    if inv_err > 1e-5:
        print("   FAIL: transformers computes other RoPE frequencies")
        ok = False

    hf = greedy(model, prompt, args.steps)
    tf = teacher_forced(model, prompt, ours)
    row_err = np.linalg.norm(our_logits - tf, axis=1) / np.linalg.norm(tf, axis=1)
    abs_err = np.abs(our_logits - tf).max(axis=1)
    print(f"   logits vs transformers fp32 (teacher-forced on tandem's tokens): rel L2 per row "
          f"max {row_err.max():.2e} mean {row_err.mean():.2e}; max |diff| {abs_err.max():.3g} "
          f"(logit std {tf.std():.3g})")
    if row_err.max() > 2e-2 or not np.isfinite(our_logits).all():
        print("   FAIL: logits differ by more than bf16 accuracy")
        ok = False

    same = next((i for i in range(args.steps) if ours[i] != hf[i]), args.steps)
    tol = float(abs_err.max())
    print(f"   greedy tokens: tandem == transformers fp32 for {same} of {args.steps} steps")
    print(f"     tandem: {ours}")
    if same < args.steps:
        print(f"     hf    : {hf}")
        top2 = np.sort(tf[same])[-2:]
        gap = float(tf[same][hf[same]] - tf[same][ours[same]])
        print(f"   first difference at step {same}: transformers' logit gap between its token "
              f"{hf[same]} and tandem's {ours[same]} is {gap:.3g} (top-2 gap {top2[1]-top2[0]:.3g}); "
              f"tandem's largest logit error {tol:.3g}")
        if gap > tol:
            print("   FAIL: tokens differ where transformers is not near a tie")
            ok = False
    bad = [i for i in range(args.steps)
           if int(np.argmax(tf[i])) != ours[i] and tf[i].max() - tf[i][ours[i]] > tol]
    print(f"   teacher-forced positions where transformers prefers another token beyond the error: {len(bad)}")
    if bad:
        ok = False

    model16 = LlamaForCausalLM.from_pretrained(d, dtype=torch.bfloat16).cuda().eval()
    hf16 = greedy(model16, prompt, args.steps)
    same16 = next((i for i in range(args.steps) if ours[i] != hf16[i]), args.steps)
    same_hf = next((i for i in range(args.steps) if hf[i] != hf16[i]), args.steps)
    tf16 = teacher_forced(model16, prompt, ours)
    err16 = (np.linalg.norm(tf16 - tf, axis=1) / np.linalg.norm(tf, axis=1)).max()
    print(f"   (for scale) transformers bf16 vs its own fp32: logits rel L2 max {err16:.2e}, greedy "
          f"equal for {same_hf} steps; tandem == transformers bf16 for {same16} steps")
    print(f"   {name}: {'PASS' if ok else 'FAIL'}")
    del model, model16
    torch.cuda.empty_cache()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default="build/tandem")
    ap.add_argument("--workdir", default="/tmp/tandem-compare-hf")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--configs", default="small-llama2,small-llama3")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    import transformers
    print(f"compare_hf: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name(0)}")
    results = [compare(c, args) for c in args.configs.split(",")]
    print(f"compare_hf: {sum(results)} passed, {len(results) - sum(results)} failed")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
