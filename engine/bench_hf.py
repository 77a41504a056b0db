"""bench_hf.py: transformers' generate on tandem's offline benchmark, and the benchmark's table.

engine/bench_offline.sh runs tandem's side (`tandem run`, `tandem sim`) and calls this script for
the rest. The workload: B requests of exactly P prompt + N output tokens, all there at t = 0.
Here that is one `generate` call over a (B, P) batch of random token ids with
max_new_tokens = min_new_tokens = N and greedy decoding: EOS is masked until N tokens are out, so
every row gets exactly N, as tandem's requests run to the output length their trace gives them.
The model is transformers' LlamaForCausalLM built from the config.json that tandem's
`synthetic:NAME` uses (configs/models/NAME.json), with random bf16 weights made on the device: no
checkpoint, and no CPU copy of a 13B model. Timed: one generate call after a warm-up, between
device synchronisations.

Implementations (--impl):
  eager     transformers' default generate: DynamicCache, nothing compiled, attention by
            attn_implementation "sdpa" (what transformers picks for Llama when PyTorch has SDPA;
            --attn eager for its plain matmul + softmax). Warm-up: a generate of
            --warmup-tokens new tokens at the same batch.
  compiled  cache_implementation="static" and torch.compile with mode="reduce-overhead" (CUDA
            graphs). --compile forward (default) is the recipe of transformers' docs
            ("Optimizing inference", static kv-cache and torch.compile):
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True).
            --compile auto compiles nothing here and leaves it to generate, which in recent
            transformers compiles the decoding step itself when the cache is static (the
            prefill then runs uncompiled). Warm-up: a whole generate at the same shape, where
            the compilation happens (its time is reported as warmup_s).
An out-of-memory error is caught per point and reported as status "oom"; any other failure as
"error" with its message.

One line per (model, batch, impl) on stdout, `HFBENCH {json}`, and appended to --out:
  model, batch, impl, status (ok | oom | error | wrong_length), output_tok_s (B x N / total_s),
  total_s, warmup_s, peak_gib (torch.cuda.max_memory_allocated over warm-up and timed run),
  prompt, new_tokens, attn, cache, compile, device, torch, transformers.

usage:
  python3 engine/bench_hf.py run --config configs/models/llama-2-7b.json --impl eager \
      --batches 1,16,64,256 [--prompt 512 --output 128] [--device cuda] [--out FILE]
  python3 engine/bench_hf.py estimate --config FILE --batches ... --impls eager,compiled
      rough seconds of GPU time per point (no torch needed): what bench_offline.sh's plan prints
  python3 engine/bench_hf.py table DIR [DIR...] --models ... --batches ... [--output 128]
      the markdown table from bench_offline.sh's output directories (a run split in parts: all of
      them; no torch needed)
Only `run` imports torch and transformers.
"""
import argparse
import csv
import gc
import json
import os
import sys
import time

GIB = 2 ** 30


# ---- the transformers side ----------------------------------------------------------------------

def build_model(cfg_path, device, attn, seed):
    """LlamaForCausalLM from a config.json, parameters created in bf16 on `device` directly."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    with open(cfg_path) as f:
        d = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    config = LlamaConfig(**d, attn_implementation=attn)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # what from_pretrained(dtype=bf16) does while it builds
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    # Explicit values, whatever this transformers version's init does (or skips): matrices
    # N(0, initializer_range), norms 1. Timing does not depend on them; outputs are forced to N.
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, config.initializer_range, generator=gen)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    return model.eval(), config


def sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def generate(model, ids, new_tokens, pad, gen_kw, device):
    """One generate call, timed between synchronisations: (output ids, seconds)."""
    import torch
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad, **gen_kw)
    sync(device)
    return out, time.perf_counter() - t0


def first_line(e):
    s = str(e).strip().splitlines()
    return s[0][:300] if s else type(e).__name__


def run_point(model, config, args, batch, orig_forward):
    import torch
    rec = {"model": args.name, "batch": batch, "impl": args.impl, "prompt": args.prompt,
           "new_tokens": args.output, "attn": args.attn,
           "cache": "static" if args.impl == "compiled" else "dynamic",
           "compile": args.compile if args.impl == "compiled" else None}
    cuda = args.device.startswith("cuda")
    out = None
    try:
        gen_kw = {}
        warm_tokens = min(args.warmup_tokens, args.output)
        if args.impl == "compiled":
            # A fresh compilation per point: no graph or cache of another batch size carried over.
            torch._dynamo.reset()
            for attr in ("_compiled_call", "_cache"):
                if hasattr(model, attr):
                    delattr(model, attr)
            if args.compile == "forward":
                model.forward = torch.compile(orig_forward, mode="reduce-overhead", fullgraph=True)
            gen_kw["cache_implementation"] = "static"
            warm_tokens = args.output  # the static cache's length is part of the compiled shapes
        g = torch.Generator(device=args.device).manual_seed(args.seed + batch)
        # ids from 3 up: no BOS/EOS/PAD among the prompt tokens
        ids = torch.randint(3, config.vocab_size, (batch, args.prompt), generator=g, device=args.device)
        pad = config.eos_token_id if isinstance(config.eos_token_id, int) else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        _, rec["warmup_s"] = generate(model, ids, warm_tokens, pad, gen_kw, args.device)
        out, total = generate(model, ids, args.output, pad, gen_kw, args.device)
        rec["total_s"] = total
        rec["output_tok_s"] = batch * args.output / total
        if tuple(out.shape) != (batch, args.prompt + args.output):
            rec["status"] = "wrong_length"
            rec["error"] = f"output shape {tuple(out.shape)}, expected {(batch, args.prompt + args.output)}"
        else:
            rec["status"] = "ok"
    except Exception as e:  # per point: an OOM (or a compile failure) must not end the run
        oom = isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()
        rec["status"] = "oom" if oom else "error"
        rec["error"] = f"{type(e).__name__}: {first_line(e)}"
    if cuda:
        rec["peak_gib"] = torch.cuda.max_memory_allocated() / GIB
    del out
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rec


def cmd_run(args):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("bench_hf: --device cuda, but torch sees no CUDA device")
    if args.name is None:
        args.name = os.path.splitext(os.path.basename(args.config))[0]
    dev_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    t0 = time.perf_counter()
    model, config = build_model(args.config, args.device, args.attn, args.seed)
    print(f"bench_hf: {args.name} ({sum(p.numel() for p in model.parameters()) / 1e9:.2f} B params, bf16) "
          f"built on {dev_name} in {time.perf_counter() - t0:.1f} s; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, impl {args.impl}", flush=True)
    orig_forward = model.forward
    for batch in args.batches:
        rec = run_point(model, config, args, batch, orig_forward)
        rec.update(device=dev_name, torch=torch.__version__, transformers=transformers.__version__)
        line = json.dumps(rec, sort_keys=True)
        print("HFBENCH " + line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")


# ---- rough GPU time, for the plan ---------------------------------------------------------------

# Rates behind the estimates: rough on purpose, from what was measured on the H200 (transformers
# eager at batch 1 on Llama-2-7B: 11.4 s for 128 tokens, ~89 ms a step of host overhead for 32
# layers; eager at batch 128: 910 tok/s, where DynamicCache's torch.cat re-copies the cache
# every step) and the usual torch.compile cost of a Llama graph (~1 min).
HOST_S_PER_LAYER = 0.089 / 32   # eager: host time per layer per forward
BYTES_S = 3.0e12                # what a step's memory traffic gets
FLOPS_S = 600e12                # what a step's GEMMs get
COMPILE_S = 60                  # one torch.compile'd graph (dynamo + inductor + CUDA graph)
PROCESS_S = 15                  # import torch + transformers, build the model
DEVICE_BYTES = 143771 * 2 ** 20 * 0.97   # H200, less the CUDA context


def shape(cfg):
    h, L, V, I = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // nh
    nkv = cfg.get("num_key_value_heads") or nh
    q, kv = nh * hd, nkv * hd
    lm = 0 if cfg.get("tie_word_embeddings") else V * h
    params = V * h + lm + h + L * (h * (q + 2 * kv) + q * h + 3 * h * I + 2 * h)
    return {"L": L, "params": params, "wbytes": 2 * params, "kv_token": 2 * L * kv * 2}


def estimate(cfg, impl, batch, prompt, output, warmup_tokens, compile_mode):
    """(seconds, likely_oom) of one point, process start excluded."""
    s = shape(cfg)
    flops_tok = 2 * s["params"]
    prefill = flops_tok * batch * prompt / FLOPS_S + s["L"] * HOST_S_PER_LAYER
    kv = batch * (prompt + output) * s["kv_token"]
    # memory: weights, the whole cache, the prefill's widest activations (residual, normed, q/k/v,
    # gate/up/act in bf16)
    need = s["wbytes"] + kv + batch * prompt * (4 * cfg["hidden_size"] + 3 * cfg["intermediate_size"]) * 2
    if impl == "eager":
        def steps(n):  # n decode steps; the cache grows and is copied (torch.cat) every step
            ctx = prompt + n / 2
            return n * (s["L"] * HOST_S_PER_LAYER + (s["wbytes"] + 3 * batch * ctx * s["kv_token"]) / BYTES_S
                        + flops_tok * batch / FLOPS_S)
        t = 2 * prefill + steps(min(warmup_tokens, output)) + steps(output)
        need += kv / s["L"]  # torch.cat holds one layer's cache twice
    else:
        step = (s["wbytes"] + kv) / BYTES_S + flops_tok * batch / FLOPS_S
        t = COMPILE_S * (2 if compile_mode == "forward" else 1) + 2 * (prefill + output * step)
    return t, need > DEVICE_BYTES


def cmd_estimate(args):
    with open(args.config) as f:
        cfg = json.load(f)
    for impl in args.impls:
        for b in args.batches:
            t, oom = estimate(cfg, impl, b, args.prompt, args.output, args.warmup_tokens, args.compile)
            print(f"{impl} {b} {t:.0f} {'oom' if oom else 'fits'}")
    print(f"process {PROCESS_S}")


# ---- the table ----------------------------------------------------------------------------------

def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_run_dir(d):
    """`tandem run --repeat R` writes d/1 .. d/R; a single run writes d itself."""
    reps = sorted(int(x) for x in os.listdir(d) if x.isdigit()) if os.path.isdir(d) else []
    return os.path.join(d, str(reps[-1])) if reps else d


def tandem_point(base, batch, output):
    """What the tandem side measured and predicted for one (model, batch), from its directory."""
    run = last_run_dir(os.path.join(base, "run"))
    s = load_json(os.path.join(run, "summary.json"))
    try:
        with open(os.path.join(base, "status")) as f:
            status = f.read().strip()
    except OSError:
        status = ""
    if s is None:
        return {"problem": status or "no run"}
    p = {"tok_s": s["output_throughput"], "s": s["duration"], "preemptions": s.get("num_preemptions", 0)}
    want = batch * output
    if s["completed"] != batch or s["total_output_tokens"] != want:
        p["problem"] = f"{s['completed']}/{batch} done, {s['total_output_tokens']}/{want} tokens"
    try:
        with open(os.path.join(run, "steps.csv")) as f:
            p["max_running"] = max(int(r["num_running"]) for r in csv.DictReader(f))
    except (OSError, ValueError, KeyError):
        pass
    auto = load_json(os.path.join(base, "sim-auto", "summary.json"))
    roof = load_json(os.path.join(base, "sim-roofline", "summary.json"))
    if auto:
        p["sim_s"] = auto["duration"]
        p["sim_model"] = auto["config"]["executor"]["cost_model"]
    if roof:
        p["roof_s"] = roof["duration"]
    return p


def hf_records(dirs, model):
    """{(impl, batch): record} from each DIR/hf/MODEL.jsonl in turn; a later record of a point wins."""
    recs = {}
    for d in dirs:
        try:
            with open(os.path.join(d, "hf", model + ".jsonl")) as f:
                lines = [json.loads(x) for x in f if x.strip()]
        except OSError:
            continue
        for r in lines:
            # bench_offline.sh writes a record naming every batch of a process that timed out or
            # failed; it stands only for the points that left no record of their own
            for b in r.get("batches", [r.get("batch")]):
                if "batches" not in r or (r["impl"], b) not in recs:
                    recs[(r["impl"], b)] = r
    return recs


def fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return "–" if a is None or not b else f"{a / b:.2f}"


def hf_cell(r):
    if r is None:
        return "–", None
    if r.get("status") == "ok":
        return fmt(r["output_tok_s"]), r["output_tok_s"]
    return r.get("status", "?"), None


def cmd_table(args):
    out = []
    out.append(f"Offline: B requests of {args.prompt} prompt + {args.output} output tokens at t = 0, "
               "output tok/s = B x output / total s.")
    out.append("")
    out.append("| model | batch | tandem tok/s | tandem s | sim s | roofline s | tandem / roofline "
               "| HF eager tok/s | tandem / eager | HF compiled tok/s | tandem / compiled | notes |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    details = []
    for m in args.models:
        hf = hf_records(args.dirs, m)
        for b in args.batches:
            # the first directory that ran tandem on this point (the lead may split a run in parts)
            bases = [os.path.join(d, "tandem", m, str(b)) for d in args.dirs]
            t = next((tandem_point(x, b, args.output) for x in bases
                      if os.path.isdir(os.path.join(x, "run"))), {"problem": "not run"})
            notes = []
            if t.get("problem"):
                notes.append("tandem: " + t["problem"])
            if t.get("preemptions"):
                notes.append(f"{t['preemptions']} preemptions")
            if t.get("max_running") is not None and t["max_running"] < b:
                notes.append(f"at most {t['max_running']} running (KV)")
            sim = t.get("sim_s")
            sim_cell = fmt(sim, 2) + (" (roofline)" if t.get("sim_model") == "roofline" else " (profile)"
                                      if t.get("sim_model") else "")
            tok = None if t.get("problem") else t.get("tok_s")
            eager, eager_v = hf_cell(hf.get(("eager", b)))
            comp, comp_v = hf_cell(hf.get(("compiled", b)))
            for impl in ("eager", "compiled"):
                r = hf.get((impl, b))
                if r is not None:
                    details.append((m, b, impl, r))
            out.append(f"| {m} | {b} | {fmt(tok)} | {fmt(t.get('s'), 2)} | {sim_cell} | {fmt(t.get('roof_s'), 2)} "
                       f"| {ratio(t.get('s'), t.get('roof_s'))} | {eager} | {ratio(tok, eager_v)} | {comp} "
                       f"| {ratio(tok, comp_v)} | {'; '.join(notes)} |")
    out.append("")
    out.append("sim s: `tandem sim`'s prediction of the same run with its default cost model (the "
               "shipped profile of the model where there is one, else the roofline); roofline s: "
               "`--cost-model roofline`; tandem / X: tandem's tok/s over X's, or its time over the "
               "roofline's.")
    if details:
        out.append("")
        out.append("| model | batch | HF impl | status | tok/s | total s | warm-up s | peak GiB | how |")
        out.append("|---|---:|---|---|---:|---:|---:|---:|---|")
        for m, b, impl, r in details:
            how = [f"{r['cache']} cache, attn {r['attn']}"] if r.get("cache") else []
            if r.get("compile"):
                how.append(f"compile {r['compile']}")
            if r.get("error"):
                how.append(r["error"][:160].replace("|", "/"))
            how = "; ".join(how)
            out.append(f"| {m} | {b} | {impl} | {r.get('status')} | {fmt(r.get('output_tok_s'))} "
                       f"| {fmt(r.get('total_s'), 2)} | {fmt(r.get('warmup_s'), 1)} | {fmt(r.get('peak_gib'), 1)} "
                       f"| {how} |")
        v = next((r for *_, r in details if r.get("torch")), None)
        if v:
            out.append("")
            out.append(f"transformers {v['transformers']}, torch {v['torch']}, {v.get('device', '')}")
    print("\n".join(out))


def batches(s):
    return [int(x) for x in s.replace(",", " ").split()]


def words(s):
    return s.replace(",", " ").split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="time transformers' generate")
    r.add_argument("--config", required=True, help="config.json (configs/models/NAME.json)")
    r.add_argument("--name", help="the model's name in the output (default: the file's)")
    r.add_argument("--impl", choices=["eager", "compiled"], required=True)
    r.add_argument("--batches", type=batches, default=[1, 16, 64, 256])
    r.add_argument("--prompt", type=int, default=512)
    r.add_argument("--output", type=int, default=128)
    r.add_argument("--device", default="cuda")
    r.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa (transformers' default) or eager")
    r.add_argument("--compile", choices=["forward", "auto"], default="forward")
    r.add_argument("--warmup-tokens", type=int, default=8, help="eager: new tokens of the warm-up generate")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", help="append the JSON lines here too")
    r.set_defaults(fn=cmd_run)

    e = sub.add_parser("estimate", help="rough GPU seconds per point")
    e.add_argument("--config", required=True)
    e.add_argument("--impls", type=words, default=["eager", "compiled"])
    e.add_argument("--batches", type=batches, default=[1, 16, 64, 256])
    e.add_argument("--prompt", type=int, default=512)
    e.add_argument("--output", type=int, default=128)
    e.add_argument("--warmup-tokens", type=int, default=8)
    e.add_argument("--compile", choices=["forward", "auto"], default="forward")
    e.set_defaults(fn=cmd_estimate)

    t = sub.add_parser("table", help="the markdown table of a bench_offline.sh output directory")
    t.add_argument("dirs", nargs="+", help="output directories of bench_offline.sh (parts of one run)")
    t.add_argument("--models", type=words, required=True)
    t.add_argument("--batches", type=batches, default=[1, 16, 64, 256])
    t.add_argument("--prompt", type=int, default=512)
    t.add_argument("--output", type=int, default=128)
    t.set_defaults(fn=cmd_table)

    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
