#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/synth/mmproj_spec.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "les/util/progress.h"

namespace les::cli {

namespace {

const char* kSummary =
    "write a random-weight model of any supported architecture, shape and type, then measure its routing\n"
    "  les synth --shape qwen3-30b-a3b --type q4_K -t 2 -o /tmp/synth-30b.gguf\n"
    "  les synth --measure-only FILE       (routing statistics of any model)\n"
    "  The file depends only on the options (not on -t). Routing knobs (docs/synth.md has measured tables):\n"
    "    --update         cross-layer predictability: smaller = layer l+1's router applied to layer l's\n"
    "                     router input predicts layer l+1's experts better (recall@k up, reuse down)\n"
    "    --first-update   layer 0's MoE update: larger = layer 1 harder to predict\n"
    "    --attn-share, --attn-window, --context-focus   temporal reuse: attention is a moving average\n"
    "                     over about attn-window tokens written into the 'context' half of the hidden\n"
    "                     state, which routers weigh by context-focus; more of any = consecutive tokens\n"
    "                     share more experts (reuse rises with depth)\n"
    "    --skew           expert popularity: router row norms ~ rank^-skew (top-10% share, max/mean up)\n"
    "    --router-scale   std of the router logits (sharper routing weights, same ranking)\n"
    "  Defaults match the trained tiny MoE on its shape (--shape small: recall@4 ~0.70, recall@8 ~0.90,\n"
    "  reuse ~0.16, top-10% share ~0.18); deeper models get more (qwen3-30b-a3b: recall@8 ~0.80, reuse ~0.4).\n"
    "  Measurement: random prompt, then greedy decoding; per layer and mean recall@k/@2k of the cross-layer\n"
    "  predictor, temporal reuse, top-10% share, max/mean load, unused experts, stream rms, NaN check.\n"
    "  A random F32 DSpark drafter (llama.cpp dflash + Markov/confidence heads) for a target model:\n"
    "  les synth --arch dflash --target TARGET.gguf -o /tmp/drafter.gguf [--layers 1 --ff-exp 512 --block 4\n"
    "            --rank 32 --causal 0 --anchor 0 --target-layers 1,4,7 --seed 1]\n"
    "  A random vision projector (mmproj) of llama.cpp's type minicpmv4_6 (MiniCPM-V 4.6/4.7: SigLIP ViT,\n"
    "  ViT merger, 2x2 merger MLP), for a text model whose n_embd is --text-embd; no text model is written:\n"
    "  les synth --mmproj-shape tiny|siglip-400m -o /tmp/mmproj.gguf [--mmproj-type f16|f32|q8_0 --n-merge 2|4\n"
    "            --insert-layer N --text-embd N --seed 1]\n"
    "  and a text model whose vocabulary holds MiniCPM-V's image markers <image> </image> <slice> </slice>:\n"
    "  les synth --shape tiny --image-tokens -o /tmp/text.gguf    (tiny: n_embd 128, the tiny mmproj's --text-embd)";

// `les synth --arch dflash`: a random drafter for --target.
int synth_dflash(const Args& a) {
  synth::DflashSpec s;
  s.n_layer = static_cast<int>(a.i64("--layers", s.n_layer));
  s.n_ff = static_cast<int>(a.i64("--ff-exp", s.n_ff));
  s.n_head = static_cast<int>(a.i64("--heads", s.n_head));
  s.n_head_kv = static_cast<int>(a.i64("--kv-heads", s.n_head_kv));
  s.head_dim = static_cast<int>(a.i64("--head-dim", s.head_dim));
  s.block_size = static_cast<int>(a.i64("--block", s.block_size));
  s.markov_rank = static_cast<int>(a.i64("--rank", s.markov_rank));
  s.causal = a.i64("--causal", s.causal) != 0;
  s.sample_from_anchor = a.i64("--anchor", s.sample_from_anchor) != 0;
  s.confidence = !a.has("--no-confidence");
  s.mask_token = static_cast<int32_t>(a.i64("--mask-token", s.mask_token));
  s.seed = static_cast<uint64_t>(a.i64("--seed", 1));
  s.name = a.str("--name", s.name);
  const std::string list = a.str("--target-layers");
  for (size_t at = 0; at < list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0') throw Error(strfmt("--target-layers: '%s' is not a layer index", item.c_str()));
    s.target_layers.push_back(static_cast<int>(v));
    at = comma + 1;
  }
  const std::string out = a.required("--output");
  if (!a.has("--force") && access(out.c_str(), F_OK) == 0) {
    throw Error(strfmt("%s exists (use --force to overwrite)", out.c_str()));
  }
  synth::write_synth_dflash(s, a.required("--target"), out);
  std::fprintf(stderr, "wrote %s: dflash drafter, %d layers, block %d, rank %d, causal %d, sample_from_anchor %d\n",
               out.c_str(), s.n_layer, s.block_size, s.markov_rank, s.causal, s.sample_from_anchor);
  return 0;
}

// `les synth --mmproj-shape`: a random minicpmv4_6 vision projector.
int synth_mmproj(const Args& a) {
  if (a.has("--image-tokens")) throw Error("--image-tokens applies to a text model (--shape), not to an mmproj");
  synth::MmprojSpec s = synth::mmproj_shape_spec(a.str("--mmproj-shape"));
  s.type = a.str("--mmproj-type", s.type);
  s.n_merge = static_cast<int>(a.i64("--n-merge", s.n_merge));
  s.insert_layer_id = static_cast<int>(a.i64("--insert-layer", s.insert_layer_id));
  s.text_embd = static_cast<int>(a.i64("--text-embd", s.text_embd));
  s.seed = static_cast<uint64_t>(a.i64("--seed", 1));
  s.name = a.str("--name", s.name);
  synth::validate(s);
  const std::string out = a.required("--output");
  if (!a.has("--force") && access(out.c_str(), F_OK) == 0) {
    throw Error(strfmt("%s exists (use --force to overwrite)", out.c_str()));
  }
  const uint64_t bytes = synth::mmproj_file_bytes(s);
  std::fprintf(stderr, "synth: mmproj minicpmv4_6, ViT %d layers, n_embd %d, ff %d, %d heads, patch %d, slice %d; ",
               s.n_layer, s.n_embd, s.n_ff, s.n_head, s.patch_size, s.image_size);
  if (s.n_merge == 4) {
    std::fprintf(stderr, "ViT merger after layer %d (ff %d), ", s.insert_layer_id, synth::mmproj_ff_vit_merger(s));
  }
  std::fprintf(stderr, "merger ff %d -> text n_embd %d (%dx fewer tokens), type %s: %s\n", synth::mmproj_ff_merger(s),
               s.text_embd, s.n_merge * s.n_merge, s.type.c_str(), human_bytes(bytes).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  synth::write_synth_mmproj(s, out);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s (%s) in %.1f s\n", out.c_str(), human_bytes(bytes).c_str(), secs);
  return 0;
}

}  // namespace

int cmd_synth(int argc, char** argv) {
  std::string shapes;
  for (const auto& n : synth::shape_names()) shapes += (shapes.empty() ? "" : ", ") + n;
  const synth::SynthSpec def;
  std::string mmproj_shapes;
  for (const auto& n : synth::mmproj_shape_names()) mmproj_shapes += (mmproj_shapes.empty() ? "" : ", ") + n;
  Args a("synth", kSummary,
         {{{"-o", "--output"}, true, "output file (GGUF)", "FILE"},
          {{"--shape"}, true, "named shape (default tiny): " + shapes, "NAME"},
          {{"--arch"}, true, "qwen3moe, qwen2moe, olmoe, llama (Mixtral), qwen3 (dense), qwen35moe (hybrid DeltaNet), qwen3next, gpt-oss (sliding window, sinks, YaRN), deepseek2 (MLA, dense lead layers, shared experts), dflash (a DSpark drafter for --target); default: the shape's", "ARCH"},
          {{"--target"}, true, "dflash: the target model the drafter is for", "FILE"},
          {{"--block"}, true, "dflash: block size (default 4)", "N"},
          {{"--rank"}, true, "dflash: Markov head rank (default 32)", "N"},
          {{"--causal"}, true, "dflash: causal attention inside the block, 0 or 1 (default 0)", "N"},
          {{"--anchor"}, true, "dflash: sample_from_anchor, 0 or 1 (default 0)", "N"},
          {{"--target-layers"}, true, "dflash: target layer inputs read, e.g. 1,4,7 (default 1, n/2, n-1)", "LIST"},
          {{"--mask-token"}, true, "dflash: MASK token id (default the last id)", "N"},
          {{"--no-confidence"}, false, "dflash: no confidence head"},
          {{"--mmproj-shape"}, true, "write a minicpmv4_6 vision projector (mmproj) of this shape instead of a text model: " +
                                         mmproj_shapes, "NAME"},
          {{"--mmproj-type"}, true, "mmproj: weight matrix type f16, f32 or q8_0 (default f16)", "TYPE"},
          {{"--n-merge"}, true, "mmproj: clip.vision.projector.scale_factor, 2 (4x fewer tokens) or 4 (16x, with the ViT merger; default)", "N"},
          {{"--insert-layer"}, true, "mmproj: ViT layer after which the ViT merger runs (default: the shape's)", "N"},
          {{"--text-embd"}, true, "mmproj: the text model's n_embd, the projector's output width (default: the shape's)", "N"},
          {{"--image-tokens"}, false, "text model: add the control tokens <image> </image> <slice> </slice> (MiniCPM-V's image markers) to the vocabulary"},
          {{"--type"}, true, "weight type or mix: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K..q6_K, iq4_nl, iq4_xs, iq1_s..iq3_s, tq1_0, tq2_0, mxfp4, nvfp4, q4_k_m, IQ2_XXS, ... (default q8_0)", "TYPE"},
          {{"--layers"}, true, "number of layers", "N"},
          {{"--embd"}, true, "embedding width", "N"},
          {{"--heads"}, true, "query heads", "N"},
          {{"--kv-heads"}, true, "key/value heads", "N"},
          {{"--head-dim"}, true, "head dimension (= rope dimension)", "N"},
          {{"--experts"}, true, "routed experts per layer", "N"},
          {{"--used"}, true, "experts used per token", "N"},
          {{"--ff-exp"}, true, "routed expert width (dense: FFN width)", "N"},
          {{"--ff-shared"}, true, "shared expert width (qwen2moe, qwen35moe)", "N"},
          {{"--rope-dims"}, true, "qwen35moe: rotated dims per attention head", "N"},
          {{"--attn-interval"}, true, "qwen35moe: every N-th layer is full attention, the others DeltaNet (default 4)", "N"},
          {{"--ssm-state"}, true, "qwen35moe: DeltaNet head size", "N"},
          {{"--ssm-k-heads"}, true, "qwen35moe: DeltaNet q/k heads", "N"},
          {{"--ssm-v-heads"}, true, "qwen35moe: DeltaNet v heads (a multiple of the q/k heads)", "N"},
          {{"--ssm-conv"}, true, "qwen35moe: causal conv width (default 4)", "N"},
          {{"--mtp"}, true, "qwen35moe: MTP (NextN) draft blocks after the trunk, 0 or 1 (default 0)", "N"},
          {{"--vocab"}, true, "vocabulary size (>= 259)", "N"},
          {{"--ctx"}, true, "training context length written to the file", "N"},
          {{"--rope-base"}, true, "rope frequency base", "X"},
          {{"--eps"}, true, "RMSNorm epsilon (default 1e-6)", "X"},
          {{"--seed"}, true, "seed (default 1): same options and seed = byte-identical file", "N"},
          {{"--name"}, true, "general.name (default synth-SHAPE)", "NAME"},
          {{"--update"}, true, strfmt("relative residual update per layer (default %.2f)", def.update), "X"},
          {{"--first-update"}, true, strfmt("the same for layer 0's MoE output (default %.1f)", def.first_update), "X"},
          {{"--attn-share"}, true, strfmt("share of the update from attention, 0..1 (default %.2f)", def.attn_share), "X"},
          {{"--attn-window"}, true, strfmt("attention locality in tokens, 0 = off (default %.0f)", def.attn_window), "X"},
          {{"--skew"}, true, strfmt("expert popularity exponent, 0 = uniform (default %.2f)", def.skew), "X"},
          {{"--context-focus"}, true, strfmt("share of router logit variance from the context half of the hidden state, 0..1 (default %.2f; "
                                                   "qwen3-30b-a3b 0.40, 35b-a3b 0.25: real routing's reuse at their depth)",
                                                   def.context_focus), "X"},
          {{"--router-scale"}, true, strfmt("router logit std (default %.1f)", def.router_scale), "X"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--force"}, false, "overwrite the output file"},
          {{"--no-measure"}, false, "do not measure the routing after writing"},
          {{"--measure-only"}, true, "measure the routing of an existing model and exit", "FILE"},
          {{"--prompt-tokens"}, true, "measurement: random prompt tokens (default 32)", "N"},
          {{"--gen-tokens"}, true, "measurement: greedy tokens after the prompt (default 96)", "N"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  if (!a.positional().empty()) throw Error(strfmt("unexpected argument '%s'", a.positional()[0].c_str()));

  synth::MeasureOptions mo;
  mo.n_prompt = static_cast<int>(a.i64("--prompt-tokens", mo.n_prompt));
  mo.n_gen = static_cast<int>(a.i64("--gen-tokens", mo.n_gen));
  mo.n_threads = static_cast<int>(a.i64("--threads", 2));
  mo.seed = static_cast<uint64_t>(a.i64("--seed", 1));
  if (a.has("--measure-only")) {
    const synth::RoutingReport r = synth::measure_routing(a.str("--measure-only"), mo);
    std::fputs(synth::format_report(r).c_str(), stdout);
    return r.finite ? 0 : 1;
  }

  if (a.str("--arch") == "dflash") return synth_dflash(a);
  if (a.has("--mmproj-shape")) return synth_mmproj(a);
  for (const char* f : {"--mmproj-type", "--n-merge", "--insert-layer", "--text-embd"}) {
    if (a.has(f)) throw Error(strfmt("%s applies to an mmproj (--mmproj-shape)", f));
  }
  std::optional<Arch> arch;
  if (a.has("--arch")) {
    arch = synth::parse_arch(a.str("--arch"));
    if (!arch) throw Error(strfmt("unknown architecture '%s' (qwen3moe, qwen2moe, olmoe, llama, qwen3, qwen35moe, qwen3next, glm4moe, gpt-oss, deepseek2)", a.str("--arch").c_str()));
  }
  synth::SynthSpec s = synth::shape_spec(a.str("--shape", "tiny"), arch);
  auto int_flag = [&](const char* name, int& field) { field = static_cast<int>(a.i64(name, field)); };
  int_flag("--layers", s.n_layer);
  int_flag("--embd", s.n_embd);
  int_flag("--heads", s.n_head);
  int_flag("--kv-heads", s.n_head_kv);
  int_flag("--head-dim", s.head_dim);
  int_flag("--experts", s.n_expert);
  int_flag("--used", s.n_expert_used);
  int_flag("--ff-exp", s.n_ff_exp);
  int_flag("--ff-shared", s.n_ff_shexp);
  int_flag("--rope-dims", s.n_rot);
  int_flag("--attn-interval", s.full_attn_interval);
  int_flag("--ssm-state", s.ssm_d_state);
  int_flag("--ssm-k-heads", s.ssm_n_k_heads);
  int_flag("--ssm-v-heads", s.ssm_n_v_heads);
  int_flag("--ssm-conv", s.ssm_d_conv);
  int_flag("--mtp", s.n_mtp);
  int_flag("--vocab", s.n_vocab);
  int_flag("--ctx", s.n_ctx);
  s.rope_freq_base = static_cast<float>(a.f64("--rope-base", s.rope_freq_base));
  s.rms_eps = static_cast<float>(a.f64("--eps", s.rms_eps));
  s.type = a.str("--type", s.type);
  s.seed = mo.seed;
  s.name = a.str("--name", s.name);
  s.n_threads = mo.n_threads;
  s.update = static_cast<float>(a.f64("--update", s.update));
  s.first_update = static_cast<float>(a.f64("--first-update", s.first_update));
  s.attn_share = static_cast<float>(a.f64("--attn-share", s.attn_share));
  s.attn_window = static_cast<float>(a.f64("--attn-window", s.attn_window));
  s.skew = static_cast<float>(a.f64("--skew", s.skew));
  s.router_scale = static_cast<float>(a.f64("--router-scale", s.router_scale));
  s.context_focus = static_cast<float>(a.f64("--context-focus", s.context_focus));
  s.image_tokens = a.has("--image-tokens");
  synth::validate(s);

  const std::string out = a.required("--output");
  if (!a.has("--force") && access(out.c_str(), F_OK) == 0) {
    throw Error(strfmt("%s exists (use --force to overwrite)", out.c_str()));
  }
  const uint64_t bytes = synth::synth_file_bytes(s);
  std::fprintf(stderr, "synth: %s, %d layers, n_embd %d, %d/%d heads of %d, ", arch_name(s.arch), s.n_layer, s.n_embd,
               s.n_head, s.n_head_kv, s.head_dim);
  if (s.arch == Arch::qwen3 || s.n_expert == 0) {
    std::fprintf(stderr, "dense FFN %d", s.n_ff_exp);
  } else {
    std::fprintf(stderr, "%d experts (%d used) of %d", s.n_expert, s.n_expert_used, s.n_ff_exp);
    if (s.n_ff_shexp > 0) std::fprintf(stderr, " + shared %d", s.n_ff_shexp);
  }
  std::fprintf(stderr, ", vocab %d%s, type %s: %s\n", s.n_vocab, s.image_tokens ? " (with image tokens)" : "",
               s.type.c_str(), human_bytes(bytes).c_str());

  const auto t0 = std::chrono::steady_clock::now();
  Progress bar("synth", bytes);
  synth::write_synth_model(s, out, [&](uint64_t done, uint64_t total) {
    bar.set_total(total);
    bar.update(done);
  });
  bar.finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s (%s) in %.1f s, %.0f MB/s\n", out.c_str(), human_bytes(bytes).c_str(), secs,
               static_cast<double>(bytes) / 1e6 / std::max(secs, 1e-9));

  if (a.has("--no-measure")) return 0;
  const synth::RoutingReport r = synth::measure_routing(out, mo);
  std::fputs(synth::format_report(r).c_str(), stdout);
  return r.finite ? 0 : 1;
}

}  // namespace les::cli
