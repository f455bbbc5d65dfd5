// Image decoding and MiniCPM-V preprocessing (src/les/vision/image_decode.h, preprocess.h) against
// llama.cpp's mtmd: the decoded pixels of the fixtures in tests/data/vision, the slice layouts of a
// sweep of sizes, and the u8 and normalized float images of every case, each the hash of what
// llama.cpp's own libmtmd.so produced (tests/data/vision/README.md). Also every decoding error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "les/util/error.h"
#include "les/util/hash.h"
#include "les/vision/image_decode.h"
#include "les/vision/preprocess.h"
#include "test_util.h"

using namespace les;
using namespace les::vision;

namespace {

std::string vision_dir() { return les::test::source_dir() + "/tests/data/vision"; }
std::string ref_path() { return vision_dir() + "/minicpmv_preprocess_ref.json"; }

const nlohmann::json& ref() {
  static const nlohmann::json j = [] {
    std::ifstream f(ref_path());
    return f ? nlohmann::json::parse(f) : nlohmann::json();
  }();
  return j;
}

std::string tmp_path(const std::string& name) {
  static const std::string dir = les::test::temp_dir();
  return dir + "/" + name;
}

void write_file(const std::string& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The generated images (the reference harness has the same formula): a diagonal gradient,
// hard-edged blocks and hashed noise in 96 x 80 cells.
uint8_t synth_pixel(uint32_t x, uint32_t y, uint32_t c, uint32_t w, uint32_t h) {
  const uint32_t smooth = (x * 255 / w + y * 255 / h + c * 85) & 255;
  const uint32_t block = (((x / 48 + y / 40) & 1) ? 255u : 0u) ^ (c * 40);
  uint32_t n = x * 2654435761u ^ (y + 0x9e37u * c) * 2246822519u;
  n ^= n >> 15;
  switch ((x / 96 + 2 * (y / 80)) % 3) {
    case 0: return static_cast<uint8_t>(smooth);
    case 1: return static_cast<uint8_t>(block);
    default: return static_cast<uint8_t>(n & 255);
  }
}

ImageU8 synth_image(int w, int h) {
  ImageU8 img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) img.rgb[(static_cast<size_t>(y) * w + x) * 3 + c] = synth_pixel(x, y, c, w, h);
  return img;
}

// "synth:WxH" is generated; anything else is a fixture file.
ImageU8 load_image(const std::string& name) {
  int w = 0, h = 0;
  if (std::sscanf(name.c_str(), "synth:%dx%d", &w, &h) == 2) return synth_image(w, h);
  return decode_image_file(vision_dir() + "/" + name);
}

std::string u8_hash(const ImageU8& img) { return hex64(hash64(img.rgb.data(), img.rgb.size())); }
std::string f32_hash(const ImageF32& img) { return hex64(hash64(img.data.data(), img.data.size() * sizeof(float))); }

PreprocessParams params_of(const nlohmann::json& c) {
  PreprocessParams p;
  p.image_size = c.at("image_size").get<int>();
  p.patch_size = c.at("patch_size").get<int>();
  p.n_merge = c.at("n_merge").get<int>();
  for (int i = 0; i < 3; ++i) {
    p.mean[i] = c.at("mean")[i].get<float>();
    p.std[i] = c.at("std")[i].get<float>();
  }
  return p;
}

// The message of the les::Error that f throws ("" and a test failure if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const les::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no les::Error thrown";
  return "";
}

// A PNG file of the given header size with one empty stored-deflate IDAT (CRCs computed, though
// stb does not check them).
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return c ^ 0xffffffffu;
}

std::vector<uint8_t> png_with_header(uint32_t w, uint32_t h) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto be32 = [](std::vector<uint8_t>& v, uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
  };
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    be32(out, static_cast<uint32_t>(data.size()));
    std::vector<uint8_t> td(type, type + 4);
    td.insert(td.end(), data.begin(), data.end());
    out.insert(out.end(), td.begin(), td.end());
    be32(out, crc32(td.data(), td.size()));
  };
  std::vector<uint8_t> ihdr;
  be32(ihdr, w);
  be32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB
  chunk("IHDR", ihdr);
  chunk("IDAT", {0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01});
  chunk("IEND", {});
  return out;
}

}  // namespace

// ---- decoding ----

TEST(VisionImageDecode, FixturesDecodeAsMtmdDecodesThem) {
  LES_REQUIRE_FILE(ref_path());
  const auto& decoded = ref().at("decoded");
  ASSERT_GE(decoded.size(), 7u);
  for (const auto& d : decoded) {
    const std::string name = d.at("file").get<std::string>();
    SCOPED_TRACE(name);
    const std::string path = vision_dir() + "/" + name;
    LES_REQUIRE_FILE(path);
    const ImageU8 img = decode_image_file(path);
    ASSERT_EQ(img.width, d.at("w").get<int>());
    ASSERT_EQ(img.height, d.at("h").get<int>());
    ASSERT_EQ(img.rgb.size(), static_cast<size_t>(img.width) * img.height * 3);
    EXPECT_EQ(u8_hash(img), d.at("rgb").get<std::string>());
    const size_t mid = (static_cast<size_t>(img.height / 2) * img.width + img.width / 2) * 3;
    const size_t last = img.rgb.size() - 3;
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(img.rgb[c], d.at("first")[c].get<int>());
      EXPECT_EQ(img.rgb[mid + c], d.at("center")[c].get<int>());
      EXPECT_EQ(img.rgb[last + c], d.at("last")[c].get<int>());
    }
    // The same bytes from memory.
    const std::vector<uint8_t> bytes = les::test::read_bytes(path);
    const ImageU8 again = decode_image_bytes(bytes.data(), bytes.size(), name);
    EXPECT_EQ(again.width, img.width);
    EXPECT_EQ(again.height, img.height);
    EXPECT_EQ(again.rgb, img.rgb);
  }
}

TEST(VisionImageDecode, KnownPixels) {
  // Values the fixture generator wrote (lossless PNG): grey expanded, alpha dropped.
  const ImageU8 g = decode_image_file(vision_dir() + "/gradient_400x300.png");
  ASSERT_EQ(g.width, 400);
  ASSERT_EQ(g.height, 300);
  auto px = [](const ImageU8& im, int x, int y, int c) {
    return im.rgb[(static_cast<size_t>(y) * im.width + x) * 3 + c];
  };
  EXPECT_EQ(px(g, 0, 0, 0), 0);
  EXPECT_EQ(px(g, 399, 0, 0), 255);
  EXPECT_EQ(px(g, 0, 299, 1), 255);
  EXPECT_EQ(px(g, 10, 10, 2), 96);
  EXPECT_EQ(px(g, 250, 120, 0), 250);  // the disc
  EXPECT_EQ(px(g, 100, 210, 2), 240);  // the bar
  const ImageU8 grey = decode_image_file(vision_dir() + "/gray_40x30.png");
  ASSERT_EQ(grey.width, 40);
  ASSERT_EQ(grey.height, 30);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(px(grey, 7, 5, c), (7 * 6 + 5 * 3) & 255);
  const ImageU8 rgba = decode_image_file(vision_dir() + "/rgba_50x20.png");
  ASSERT_EQ(rgba.width, 50);
  ASSERT_EQ(rgba.height, 20);
  EXPECT_EQ(px(rgba, 9, 3, 0), 45);
  EXPECT_EQ(px(rgba, 9, 3, 1), 36);
  EXPECT_EQ(px(rgba, 9, 3, 2), 200);
  // JPEG: lossy, but near what was written (a smooth region away from edges).
  const ImageU8 j = decode_image_file(vision_dir() + "/tall_150x400.jpg");
  ASSERT_EQ(j.width, 150);
  ASSERT_EQ(j.height, 400);
  EXPECT_NEAR(px(j, 20, 100, 0), 20 * 255 / 150, 6);
  EXPECT_NEAR(px(j, 20, 100, 1), 100 * 255 / 400, 6);
}

TEST(VisionImageDecode, MissingFileIsAnError) {
  const std::string msg = error_of([] { decode_image_file("/nonexistent/dir/cat.png"); });
  EXPECT_NE(msg.find("/nonexistent/dir/cat.png"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  const std::string dir = error_of([] { decode_image_file(vision_dir()); });
  EXPECT_NE(dir.find("not a regular file"), std::string::npos) << dir;
}

// Inputs fuzz_image found that make Debian's stb 2.27 write past a Huffman table (more than 256
// codes) or read one no DHT segment defined: refused before stb reads them (image_decode.cpp).
TEST(VisionImageDecode, CraftedJpegHuffmanTablesAreRefused) {
  const std::string codes = error_of([] { decode_image_file(vision_dir() + "/crafted_dht_codes.jpg"); });
  EXPECT_NE(codes.find("crafted_dht_codes.jpg"), std::string::npos) << codes;
  EXPECT_NE(codes.find("more than 256"), std::string::npos) << codes;
  const std::string table = error_of([] { decode_image_file(vision_dir() + "/crafted_undefined_table.jpg"); });
  EXPECT_NE(table.find("crafted_undefined_table.jpg"), std::string::npos) << table;
  EXPECT_NE(table.find("corrupt JPEG"), std::string::npos) << table;
}

TEST(VisionImageDecode, EmptyFileIsAnError) {
  const std::string p = tmp_path("empty.png");
  write_file(p, {});
  const std::string msg = error_of([&] { decode_image_file(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  const std::string mem = error_of([] { decode_image_bytes(nullptr, 0, "request image 1"); });
  EXPECT_NE(mem.find("request image 1"), std::string::npos) << mem;
  EXPECT_NE(mem.find("empty"), std::string::npos) << mem;
}

TEST(VisionImageDecode, TruncatedPngIsAnError) {
  const std::vector<uint8_t> png = les::test::read_bytes(vision_dir() + "/gradient_400x300.png");
  ASSERT_GT(png.size(), 1000u);
  // Cut in the pixel data (the header parses), and cut in the header.
  for (size_t n : {png.size() / 2, png.size() - 20, size_t{20}}) {
    SCOPED_TRACE(n);
    const std::string p = tmp_path("cut.png");
    write_file(p, std::vector<uint8_t>(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(n)));
    const std::string msg = error_of([&] { decode_image_file(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("corrupt") != std::string::npos || msg.find("truncated") != std::string::npos) << msg;
  }
}

TEST(VisionImageDecode, TruncatedJpegIsAnError) {
  const std::vector<uint8_t> jpg = les::test::read_bytes(vision_dir() + "/tall_150x400.jpg");
  ASSERT_GT(jpg.size(), 1000u);
  // Cut inside the scan data (stb then misses the next marker), before it (after the frame
  // header) and inside the header.
  size_t sos = 0;
  for (size_t i = 0; i + 1 < jpg.size(); ++i) {
    if (jpg[i] == 0xff && jpg[i + 1] == 0xda) {
      sos = i;
      break;
    }
  }
  ASSERT_GT(sos, 0u);
  for (size_t n : {jpg.size() - 10, jpg.size() * 6 / 10, sos, size_t{30}, size_t{2}}) {
    SCOPED_TRACE(n);
    const std::string msg = error_of([&] { decode_image_bytes(jpg.data(), n, "cut.jpg"); });
    EXPECT_NE(msg.find("cut.jpg"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("corrupt") != std::string::npos || msg.find("truncated") != std::string::npos) << msg;
  }
}

TEST(VisionImageDecode, RandomBytesAreAnError) {
  std::vector<uint8_t> junk(4096);
  uint32_t s = 7;
  for (auto& b : junk) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(s >> 24);
  }
  const std::string msg = error_of([&] { decode_image_bytes(junk.data(), junk.size(), "junk.bin"); });
  EXPECT_NE(msg.find("junk.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an image"), std::string::npos) << msg;
  const std::string text = "hello, this is not an image\n";
  const std::string t = error_of([&] {
    decode_image_bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "notes.txt");
  });
  EXPECT_NE(t.find("notes.txt"), std::string::npos) << t;
}

TEST(VisionImageDecode, ZeroSizePngIsAnError) {
  for (auto [w, h] : {std::pair{0u, 10u}, std::pair{10u, 0u}, std::pair{0u, 0u}}) {
    const std::vector<uint8_t> png = png_with_header(w, h);
    const std::string msg = error_of([&] { decode_image_bytes(png.data(), png.size(), "zero.png"); });
    EXPECT_NE(msg.find("zero.png"), std::string::npos) << msg;
    EXPECT_NE(msg.find("zero width or height"), std::string::npos) << msg;
  }
  // The same writer with a real size is a valid header (its pixel data is missing): a decode
  // error, not a size error, so the zero-size check above is what failed there.
  const std::vector<uint8_t> png = png_with_header(2, 2);
  const std::string msg = error_of([&] { decode_image_bytes(png.data(), png.size(), "two.png"); });
  EXPECT_EQ(msg.find("zero width"), std::string::npos) << msg;
}

TEST(VisionImageDecode, PixelLimitIsCheckedFromTheHeader) {
  const std::string p = vision_dir() + "/gradient_400x300.png";
  const std::string msg = error_of([&] { decode_image_file(p, 400 * 300 - 1); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("120000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("119999"), std::string::npos) << msg;
  EXPECT_EQ(decode_image_file(p, 400 * 300).width, 400);  // the limit itself is allowed
  // Headers claiming 16384 x 16384 (256 Mpx) and 60000 x 60000 (3.6 Gpx, beyond what stb's PNG
  // reader accepts at all) are refused by the limit before any pixel is decoded.
  for (auto [w, h, n] : {std::tuple{16384u, 16384u, "268435456"}, std::tuple{60000u, 60000u, "3600000000"}}) {
    const std::vector<uint8_t> huge = png_with_header(w, h);
    const std::string big = error_of([&] { decode_image_bytes(huge.data(), huge.size(), "huge.png"); });
    EXPECT_NE(big.find(n), std::string::npos) << big;
    EXPECT_NE(big.find(std::to_string(kDefaultMaxImagePixels)), std::string::npos) << big;
  }
}

// ---- preprocessing ----

TEST(VisionPreprocess, LayoutsMatchLlamaCpp) {
  LES_REQUIRE_FILE(ref_path());
  const auto& rows = ref().at("layouts");
  ASSERT_GT(rows.size(), 600u);
  int sliced = 0;
  for (const auto& r : rows) {
    PreprocessParams p;
    p.image_size = r[0].get<int>();
    p.patch_size = r[1].get<int>();
    p.n_merge = r[2].get<int>();
    const int w = r[3].get<int>(), h = r[4].get<int>();
    SCOPED_TRACE(testing::Message() << p.image_size << "/" << p.patch_size << "/" << p.n_merge << " " << w << "x" << h);
    const SliceLayout l = plan_slices(w, h, p);
    EXPECT_EQ(l.overview_w, r[5].get<int>());
    EXPECT_EQ(l.overview_h, r[6].get<int>());
    EXPECT_EQ(l.refined_w, r[7].get<int>());
    EXPECT_EQ(l.refined_h, r[8].get<int>());
    EXPECT_EQ(l.grid_x, r[9].get<int>());
    EXPECT_EQ(l.grid_y, r[10].get<int>());
    // mtmd's slices tile the refined image in a regular grid, row-major (the harness checked that).
    ASSERT_EQ(l.slices.size(), static_cast<size_t>(l.grid_x) * l.grid_y);
    if (!l.slices.empty()) {
      ++sliced;
      const int sw = l.refined_w / l.grid_x, sh = l.refined_h / l.grid_y;
      for (int j = 0; j < l.grid_y; ++j)
        for (int i = 0; i < l.grid_x; ++i) {
          const SliceLayout::Slice& s = l.slices[static_cast<size_t>(j) * l.grid_x + i];
          EXPECT_EQ(s.x, i * sw);
          EXPECT_EQ(s.y, j * sh);
          EXPECT_EQ(s.w, sw);
          EXPECT_EQ(s.h, sh);
        }
    }
  }
  EXPECT_GT(sliced, 200);
}

TEST(VisionPreprocess, PixelsMatchLlamaCpp) {
  LES_REQUIRE_FILE(ref_path());
  // The generated images are the harness's.
  std::map<std::string, ImageU8> images;
  for (const auto& g : ref().at("generated")) {
    const std::string name = g.at("image").get<std::string>();
    images[name] = load_image(name);
    EXPECT_EQ(u8_hash(images[name]), g.at("rgb").get<std::string>()) << name;
  }
  const auto& cases = ref().at("cases");
  ASSERT_GE(cases.size(), 60u);
  bool saw_big = false;
  for (const auto& c : cases) {
    const std::string name = c.at("image").get<std::string>();
    const PreprocessParams p = params_of(c);
    SCOPED_TRACE(testing::Message() << name << " " << p.image_size << "/" << p.patch_size << "/" << p.n_merge);
    if (!images.count(name)) images[name] = load_image(name);
    const ImageU8& img = images[name];
    saw_big |= img.width == 1344 && img.height == 1008;

    const SliceLayout l = plan_slices(img.width, img.height, p);
    EXPECT_EQ(l.overview_w, c.at("overview")[0].get<int>());
    EXPECT_EQ(l.overview_h, c.at("overview")[1].get<int>());
    EXPECT_EQ(l.refined_w, c.at("refined")[0].get<int>());
    EXPECT_EQ(l.refined_h, c.at("refined")[1].get<int>());
    EXPECT_EQ(l.grid_x, c.at("grid")[0].get<int>());
    EXPECT_EQ(l.grid_y, c.at("grid")[1].get<int>());
    const auto& slices = c.at("slices");
    ASSERT_EQ(l.slices.size(), slices.size());
    for (size_t i = 0; i < slices.size(); ++i) {
      EXPECT_EQ(l.slices[i].x, slices[i][0].get<int>());
      EXPECT_EQ(l.slices[i].y, slices[i][1].get<int>());
      EXPECT_EQ(l.slices[i].w, slices[i][2].get<int>());
      EXPECT_EQ(l.slices[i].h, slices[i][3].get<int>());
    }

    // The u8 images: the overview and the crops of the padded refined image.
    const auto& outs = c.at("outputs");
    ASSERT_EQ(outs.size(), 1 + l.slices.size());
    std::vector<ImageU8> u8;
    u8.push_back(resize_bicubic(img, l.overview_w, l.overview_h));
    if (!l.slices.empty()) {
      const ImageU8 refined = resize_with_pad(img, l.refined_w, l.refined_h);
      for (const auto& s : l.slices) u8.push_back(crop(refined, s.x, s.y, s.w, s.h));
    }
    for (size_t i = 0; i < u8.size(); ++i) {
      EXPECT_EQ(u8[i].width, outs[i].at("w").get<int>()) << "output " << i;
      EXPECT_EQ(u8[i].height, outs[i].at("h").get<int>()) << "output " << i;
      EXPECT_EQ(u8_hash(u8[i]), outs[i].at("u8").get<std::string>()) << "output " << i;
    }

    // The whole pipeline, normalized.
    const PreprocessedImage pre = preprocess_minicpmv(img, p);
    EXPECT_EQ(pre.grid_x, c.at("out_grid")[0].get<int>());
    EXPECT_EQ(pre.grid_y, c.at("out_grid")[1].get<int>());
    ASSERT_EQ(pre.slices.size(), l.slices.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const ImageF32& f = i == 0 ? pre.overview : pre.slices[i - 1];
      EXPECT_EQ(f.width, outs[i].at("w").get<int>()) << "output " << i;
      EXPECT_EQ(f.height, outs[i].at("h").get<int>()) << "output " << i;
      EXPECT_EQ(f32_hash(f), outs[i].at("f32").get<std::string>()) << "output " << i;
    }
  }
  EXPECT_TRUE(saw_big) << "the 1344 x 1008 generated case is missing from the reference";
}

TEST(VisionPreprocess, ResizeToTheSameSizeIsACopy) {
  const ImageU8 img = synth_image(37, 23);
  const ImageU8 same = resize_bicubic(img, 37, 23);
  EXPECT_EQ(same.width, 37);
  EXPECT_EQ(same.height, 23);
  EXPECT_EQ(same.rgb, img.rgb);
  EXPECT_EQ(resize_with_pad(img, 37, 23, {9, 9, 9}).rgb, img.rgb);
  // One side changed: only that pass runs; a flat image stays flat (weights sum to 1 after rounding).
  ImageU8 flat;
  flat.width = 30;
  flat.height = 20;
  flat.rgb.assign(30 * 20 * 3, 77);
  for (auto [w, h] : {std::pair{30, 41}, std::pair{13, 20}, std::pair{61, 7}}) {
    const ImageU8 r = resize_bicubic(flat, w, h);
    ASSERT_EQ(r.width, w);
    ASSERT_EQ(r.height, h);
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 77);
  }
}

TEST(VisionPreprocess, PadCeilCentresTheImageOnBlack) {
  ImageU8 flat;
  flat.width = 40;
  flat.height = 20;
  flat.rgb.assign(40 * 20 * 3, 200);
  // scale min(80/40, 80/20) = 2: 80 x 40 centred at y = 20, black above and below.
  const ImageU8 r = resize_with_pad(flat, 80, 80);
  ASSERT_EQ(r.width, 80);
  ASSERT_EQ(r.height, 80);
  for (int y = 0; y < 80; ++y) {
    const uint8_t want = (y >= 20 && y < 60) ? 200 : 0;
    for (int x = 0; x < 80; ++x) ASSERT_EQ(r.rgb[(static_cast<size_t>(y) * 80 + x) * 3 + 1], want) << x << "," << y;
  }
  const ImageU8 coloured = resize_with_pad(flat, 40, 41, {1, 2, 3});  // 40 x 20 at y = 10
  EXPECT_EQ(coloured.rgb[0], 1);
  EXPECT_EQ(coloured.rgb[1], 2);
  EXPECT_EQ(coloured.rgb[2], 3);
  EXPECT_EQ(coloured.rgb[(static_cast<size_t>(10) * 40) * 3], 200);
  EXPECT_EQ(coloured.rgb[(static_cast<size_t>(30) * 40) * 3], 1);
}

TEST(VisionPreprocess, CropCopiesTheRectangle) {
  const ImageU8 img = synth_image(50, 40);
  const ImageU8 c = crop(img, 7, 5, 20, 11);
  ASSERT_EQ(c.width, 20);
  ASSERT_EQ(c.height, 11);
  for (int y = 0; y < 11; ++y)
    for (int x = 0; x < 20; ++x)
      for (int k = 0; k < 3; ++k)
        ASSERT_EQ(c.rgb[(static_cast<size_t>(y) * 20 + x) * 3 + k],
                  img.rgb[(static_cast<size_t>(y + 5) * 50 + x + 7) * 3 + k]);
  EXPECT_EQ(crop(img, 0, 0, 50, 40).rgb, img.rgb);
  EXPECT_THROW(crop(img, 31, 0, 20, 10), les::Error);
  EXPECT_THROW(crop(img, 0, 30, 10, 11), les::Error);
  EXPECT_THROW(crop(img, -1, 0, 10, 10), les::Error);
  EXPECT_THROW(crop(img, 0, 0, 0, 10), les::Error);
}

TEST(VisionPreprocess, NormalizeFormula) {
  ImageU8 img;
  img.width = 3;
  img.height = 2;
  img.rgb = {0, 1, 2, 127, 128, 129, 255, 254, 253, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  PreprocessParams p;
  p.mean[0] = 0.48145466f;
  p.mean[1] = 0.4578275f;
  p.mean[2] = 0.40821073f;
  p.std[0] = 0.26862954f;
  p.std[1] = 0.26130258f;
  p.std[2] = 0.27577711f;
  const ImageF32 f = normalize(img, p);
  ASSERT_EQ(f.width, 3);
  ASSERT_EQ(f.height, 2);
  ASSERT_EQ(f.data.size(), 18u);
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 6; ++i) {
      const float x = static_cast<float>(img.rgb[i * 3 + c]) / 255.0f;
      const float want = (x - p.mean[c]) / p.std[c];
      // Planar: channel c's plane, pixel i; bit-identical to clip.cpp's float arithmetic.
      const float got = f.data[static_cast<size_t>(c) * 6 + i];
      uint32_t a, b;
      std::memcpy(&a, &got, 4);
      std::memcpy(&b, &want, 4);
      EXPECT_EQ(a, b) << c << " " << i;
    }
  // Mean and std 0.5: 0 -> -1, 255 -> 1 exactly.
  const ImageF32 h = normalize(img, PreprocessParams{});
  EXPECT_EQ(h.data[0], -1.0f);
  EXPECT_EQ(h.data[2], 1.0f);
}

TEST(VisionPreprocess, BadSizesAreErrors) {
  const PreprocessParams p;
  EXPECT_THROW(plan_slices(0, 10, p), les::Error);
  EXPECT_THROW(plan_slices(10, -1, p), les::Error);
  EXPECT_THROW(plan_slices(70000, 70000, p), les::Error);
  PreprocessParams bad;
  bad.n_merge = 0;
  EXPECT_THROW(plan_slices(10, 10, bad), les::Error);
  const ImageU8 img = synth_image(8, 8);
  EXPECT_THROW(resize_bicubic(img, 0, 8), les::Error);
  EXPECT_THROW(resize_bicubic(img, 8, 65537), les::Error);
  ImageU8 broken = img;
  broken.rgb.pop_back();
  EXPECT_THROW(resize_bicubic(broken, 4, 4), les::Error);
  EXPECT_THROW(preprocess_minicpmv(ImageU8{}, p), les::Error);
}
