#include "les/vision/image_prompt.h"

#include "les/model/context.h"
#include "les/util/clock.h"
#include "les/util/error.h"
#include "les/vision/preprocess.h"

namespace les::vision {

ImageMarkers find_image_markers(const Tokenizer& tok) {
  ImageMarkers m;
  struct Want {
    const char* text;
    int32_t* id;
  };
  const Want want[] = {{"<image>", &m.image_start},
                       {"</image>", &m.image_end},
                       {"<slice>", &m.slice_start},
                       {"</slice>", &m.slice_end},
                       {"\n", &m.row_end}};
  const int32_t n = tok.n_tokens();
  for (int32_t id = 0; id < n; ++id) {
    const std::string piece = tok.token_to_piece(id, true);
    for (const Want& w : want) {
      if (*w.id < 0 && piece == w.text) *w.id = id;
    }
  }
  std::string missing;
  for (const Want& w : want) {
    if (*w.id < 0) missing += std::string(missing.empty() ? "" : ", ") + (w.text[0] == '\n' ? "\"\\n\"" : w.text);
  }
  if (!missing.empty()) {
    throw Error("the text model's vocabulary has no token for " + missing +
                ": it is not a MiniCPM-V text model (images need the <image>, </image>, <slice>, </slice> tokens)");
  }
  return m;
}

int image_merge(const Mmproj& mm, int compression) {
  const MmprojConfig& c = mm.config();
  if (compression == 0) return c.n_merge;
  if (compression != 4 && compression != 16) {
    throw Error(strfmt("image compression %d: must be 4 or 16", compression));
  }
  if (compression == 16 && !c.has_vit_merger()) {
    throw Error(mm.path() + ": 16x image compression needs the ViT merger, which this 4x file does not hold");
  }
  return compression == 4 ? 2 : 4;
}

int64_t image_positions(const Mmproj& mm, int w, int h, int compression) {
  const int merge = image_merge(mm, compression);
  const SliceLayout L = plan_slices(w, h, mm.config().preprocess(merge));
  const int64_t unit = static_cast<int64_t>(mm.config().patch_size) * merge;
  int64_t n = 2 + (L.overview_w / unit) * (L.overview_h / unit);
  for (const SliceLayout::Slice& s : L.slices) n += 2 + (s.w / unit) * (s.h / unit);
  if (L.grid_y > 1) n += L.grid_y - 1;
  return n;
}

namespace {

struct Encoded {
  PreprocessedImage pre;
  std::vector<std::vector<float>> rows;  // overview, then slices
  double preprocess_seconds = 0, encode_seconds = 0;
};

Encoded run(const Mmproj& mm, VisionEncoder& enc, const ImageU8& img, const ImageOptions& opt) {
  Encoded e;
  const int merge = image_merge(mm, opt.compression);
  const double t0 = now_s();
  e.pre = preprocess_minicpmv(img, mm.config().preprocess(merge));
  const double t1 = now_s();
  e.rows.push_back(enc.encode(e.pre.overview, merge));
  for (const ImageF32& s : e.pre.slices) e.rows.push_back(enc.encode(s, merge));
  e.preprocess_seconds = t1 - t0;
  e.encode_seconds = now_s() - t1;
  return e;
}

}  // namespace

ImageChunk encode_image(const Mmproj& mm, VisionEncoder& enc, const ImageU8& img, const ImageMarkers& mk,
                        const ImageOptions& opt) {
  Encoded e = run(mm, enc, img, opt);
  ImageChunk c;
  const int64_t width = enc.out_embd();
  auto add_rows = [&](const std::vector<float>& r) {
    const int64_t n = static_cast<int64_t>(r.size()) / width;
    c.tokens.insert(c.tokens.end(), static_cast<size_t>(n), Context::kEmbeddingRow);
    c.rows.insert(c.rows.end(), r.begin(), r.end());
    c.n_rows += n;
  };
  c.tokens.push_back(mk.image_start);
  add_rows(e.rows[0]);
  c.tokens.push_back(mk.image_end);
  c.grid_x = e.pre.grid_x;
  c.grid_y = e.pre.grid_y;
  c.n_slices = static_cast<int>(e.pre.slices.size());
  if (c.n_slices > 0) {
    if (c.grid_x * c.grid_y != c.n_slices) {
      throw Error(strfmt("image: %d slices do not fill a %dx%d grid", c.n_slices, c.grid_x, c.grid_y));
    }
    for (int y = 0; y < c.grid_y; ++y) {
      for (int x = 0; x < c.grid_x; ++x) {
        c.tokens.push_back(mk.slice_start);
        add_rows(e.rows[static_cast<size_t>(1 + y * c.grid_x + x)]);
        c.tokens.push_back(mk.slice_end);
      }
      if (y != c.grid_y - 1) c.tokens.push_back(mk.row_end);
    }
  }
  c.preprocess_seconds = e.preprocess_seconds;
  c.encode_seconds = e.encode_seconds;
  return c;
}

std::vector<float> embed_image(const Mmproj& mm, VisionEncoder& enc, const ImageU8& img, const ImageOptions& opt,
                               int64_t* n_rows) {
  Encoded e = run(mm, enc, img, opt);
  std::vector<float> out;
  for (const auto& r : e.rows) out.insert(out.end(), r.begin(), r.end());
  if (n_rows) *n_rows = static_cast<int64_t>(out.size()) / enc.out_embd();
  return out;
}

}  // namespace les::vision
