#include <algorithm>
#include <cstdio>
#include <vector>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/util/atomic_file.h"
#include "les/util/clock.h"
#include "les/util/error.h"
#include "les/util/thread_pool.h"
#include "les/vision/encoder.h"
#include "les/vision/image_decode.h"
#include "les/vision/image_prompt.h"
#include "les/vision/mmproj.h"
#include "les/vision/preprocess.h"

namespace les::cli {

// les image-embed: an image's visual tokens as the text model would take them, raw float32 rows
// in mtmd's order (overview first, then the slices row by row), for comparisons with llama.cpp.
int cmd_image_embed(int argc, char** argv) {
  Args a("image-embed",
         "encode an image with a MiniCPM-V mmproj: les image-embed --mmproj F --image IMG -o OUT.f32\n"
         "  OUT.f32: raw float32 rows [n_tokens][n_embd] (overview, then slices row-major, as llama.cpp's mtmd)",
         {{{"--mmproj"}, true, "the vision encoder (mmproj GGUF, projector type minicpmv4_6)", "FILE"},
          {{"--image"}, true, "the image (JPEG, PNG, ...)", "IMG"},
          {{"-o", "--output"}, true, "output file of float32 rows", "OUT"},
          {{"--image-compression"}, true, "visual-token compression 4 or 16 (default: the file's)", "N"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--repeat"}, true, "encode R times and print the median milliseconds per image part (default 1)", "R"},
          {{"--exact-attention"}, false, "attention in float throughout (default: as llama.cpp's CPU flash attention "
                                         "computes it, half-precision K/V, so the rows match llama.cpp's mtmd)"},
          {{"--isa"}, true, "kernel instruction set (scalar, avx2, avx512, ...)", "ISA"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);
  const int threads = static_cast<int>(a.i64("--threads", 2));
  const int repeat = static_cast<int>(a.i64("--repeat", 1));
  if (threads < 1 || threads > 1024) throw Error("--threads must be in 1..1024");
  if (repeat < 1) throw Error("--repeat must be >= 1");
  const auto mm = vision::Mmproj::load(a.required("--mmproj"));
  const vision::ImageU8 img = vision::decode_image_file(a.required("--image"));
  const std::string out = a.required("--output");
  vision::ImageOptions opt;
  opt.compression = static_cast<int>(a.i64("--image-compression", 0));
  const int merge = vision::image_merge(*mm, opt.compression);
  std::fprintf(stderr, "les: %s\n", mm->describe().c_str());

  ThreadPool pool(threads);
  vision::VisionEncoder enc(*mm, pool);
  enc.set_exact_attention(a.has("--exact-attention"));
  const vision::PreprocessedImage pre = vision::preprocess_minicpmv(img, mm->config().preprocess(merge));
  std::vector<const vision::ImageF32*> parts{&pre.overview};
  for (const auto& s : pre.slices) parts.push_back(&s);
  std::vector<float> rows;
  std::printf("image %dx%d: %zu slices (grid %dx%d) + overview, %dx compression, %d threads\n", img.width,
              img.height, pre.slices.size(), pre.grid_x, pre.grid_y, merge * merge, threads);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<double> ms;
    std::vector<float> r;
    for (int k = 0; k < repeat; ++k) {
      const double t0 = now_s();
      r = enc.encode(*parts[i], merge);
      ms.push_back((now_s() - t0) * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("  %s %zu: %dx%d pixels -> %lld tokens, %.1f ms\n", i == 0 ? "overview" : "slice", i == 0 ? 0 : i,
                parts[i]->width, parts[i]->height, static_cast<long long>(r.size() / static_cast<size_t>(enc.out_embd())),
                ms[ms.size() / 2]);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  write_file_atomic(out, rows.data(), rows.size() * sizeof(float));
  std::printf("wrote %s: %zu rows of %d floats\n", out.c_str(), rows.size() / static_cast<size_t>(enc.out_embd()),
              enc.out_embd());
  return 0;
}

}  // namespace les::cli
