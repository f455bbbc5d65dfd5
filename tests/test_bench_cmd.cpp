// `les bench` (les/bench/): the pure pieces (median, ceiling, rows, table and JSON writers, the
// forked runner) directly; then the command on the trained model with every row, checking the
// properties its table promises (equal hashes, consistent ratios, bytes per token, JSON = Markdown)
// and its errors for bad input.
#include <sys/mman.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "les/bench/child.h"
#include "les/bench/report.h"
#include "les/bench/rows.h"
#include "les/bench/stats.h"
#include "les/util/error.h"
#include "test_util.h"

namespace {

using namespace les;
using namespace les::bench;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(BenchStats, MedianOfOddEvenAndMissing) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_DOUBLE_EQ(median({5, kNaN, 1, kNaN, 3}), 3);  // NaN = the column does not apply to that repeat
  EXPECT_TRUE(std::isnan(median({})));
  EXPECT_TRUE(std::isnan(median({kNaN})));
}

TEST(BenchStats, CeilingIsTheSlowerOfDiskAndCompute) {
  // 2 MB per token at 1000 MB/s = 2 ms > 1 ms compute: disk bound, 500 tok/s.
  EXPECT_DOUBLE_EQ(ceiling_tps(2e6, 1e9, 1e-3), 500);
  // 0.5 MB per token = 0.5 ms < 4 ms compute: compute bound, 250 tok/s.
  EXPECT_DOUBLE_EQ(ceiling_tps(5e5, 1e9, 4e-3), 250);
  // Resident (no bytes): compute alone.
  EXPECT_DOUBLE_EQ(ceiling_tps(0, kNaN, 2e-3), 500);
  // Unknown compute: the disk alone; nothing known: NaN.
  EXPECT_DOUBLE_EQ(ceiling_tps(1e6, 1e9, kNaN), 1000);
  EXPECT_TRUE(std::isnan(ceiling_tps(0, kNaN, kNaN)));
  EXPECT_DOUBLE_EQ(ratio(3, 2), 1.5);
  EXPECT_TRUE(std::isnan(ratio(3, 0)));
  EXPECT_TRUE(std::isnan(ratio(kNaN, 2)));
}

TEST(BenchRows, ParseKeepsStagingOrderAndNamesUnknownRows) {
  const auto r = parse_rows("spec, baseline,lookahead,baseline");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], RowKind::baseline);
  EXPECT_EQ(r[1], RowKind::lookahead);
  EXPECT_EQ(r[2], RowKind::spec);
  EXPECT_EQ(parse_rows("all").size(), static_cast<size_t>(kRowKinds));
  try {
    parse_rows("baseline,turbo");
    FAIL() << "no error for an unknown row";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown row 'turbo'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loadopt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_rows(" , "), Error);
  EXPECT_DOUBLE_EQ(published_ratio(RowKind::loadopt), 3.36);
  EXPECT_DOUBLE_EQ(published_tps(RowKind::spec), 20.51);
  EXPECT_STREQ(row_label(RowKind::loadopt), "+load optimization");
}

BenchReport sample_report() {
  BenchReport r;
  r.model = "m.gguf";
  r.mem = 64ull << 20;
  r.cache_share = 0.25;
  r.threads = 2;
  r.n_prompt = 16;
  r.n_gen = 32;
  r.reps = 3;
  r.disk_mbs_original = 900;
  RowResult base;
  base.kind = RowKind::baseline;
  base.ran = true;
  base.decode_tps = 100;
  base.vs_baseline = 1;
  base.vs_prev = kNaN;
  base.hit = 0.5;
  base.prepared = 0.5;
  base.oracle_tps = base.of_oracle = kNaN;
  base.hash = 0x0123456789abcdefull;
  RowResult la = base;
  la.kind = RowKind::lookahead;
  la.decode_tps = 150;
  la.vs_baseline = la.vs_prev = 1.5;
  la.oracle_tps = 200;
  la.of_oracle = 0.75;
  RowResult mixed;
  mixed.kind = RowKind::mixed;
  mixed.note = "skipped: no --mixed file";
  r.rows = {base, la, mixed};
  r.notes = {"a note with \"quotes\" and a \\ backslash"};
  return r;
}

TEST(BenchReport, MarkdownHasEveryRowAndThePublishedRatios) {
  const std::string md = format_markdown(sample_report());
  EXPECT_NE(md.find("| baseline | **100.00** | 1.00x | 3.38 (1.00x) | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| +lookahead | **150.00** | 1.50x | 6.57 (1.94x) | 1.50x |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 200.00 | 75% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| +mixed precision | skipped: no --mixed file | | 17.16 (5.08x) |"), std::string::npos) << md;
  EXPECT_NE(md.find("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(cell("%.2f", kNaN), "-");
  EXPECT_EQ(cell("%.2f", 1.234), "1.23");
}

TEST(BenchReport, JsonParsesWithNullsForMissingValues) {
  const auto j = nlohmann::json::parse(format_json(sample_report()));
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][0]["name"], "baseline");
  EXPECT_DOUBLE_EQ(j["rows"][1]["decode_tps"].get<double>(), 150);
  EXPECT_TRUE(j["rows"][0]["oracle_tps"].is_null());
  EXPECT_FALSE(j["rows"][2]["ran"].get<bool>());
  EXPECT_EQ(j["rows"][2]["note"], "skipped: no --mixed file");
  EXPECT_EQ(j["notes"][0], "a note with \"quotes\" and a \\ backslash");
  EXPECT_TRUE(j["hashes_ok"].get<bool>());
}

TEST(BenchChild, ReturnsThePayloadErrorsAndTheChildsOwnPeakRss) {
  const ChildOutcome ok = run_in_child([] {
    // 64 MiB touched in the child only: its peak RSS, not the test process's.
    const size_t n = size_t(64) << 20;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("mmap");
    std::memset(p, 1, n);
    ::munmap(p, n);
    return std::string("done\0with a zero", 16);
  });
  ASSERT_TRUE(ok.ok) << ok.error;
  EXPECT_EQ(ok.payload, std::string("done\0with a zero", 16));
  EXPECT_GE(ok.peak_rss, uint64_t(64) << 20);
  const ChildOutcome err = run_in_child([]() -> std::string { throw Error("the budget is too small"); });
  EXPECT_FALSE(err.ok);
  EXPECT_EQ(err.error, "the budget is too small");
  const ChildOutcome killed = run_in_child([]() -> std::string {
    std::raise(SIGKILL);
    return "";
  });
  EXPECT_FALSE(killed.ok);
  EXPECT_NE(killed.error.find("signal 9"), std::string::npos) << killed.error;
}

// --- the command ---

bool have_cli() { return test::file_exists(LES_CLI); }

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string slurp(const std::string& p) {
  const auto b = test::read_bytes(p);
  return std::string(b.begin(), b.end());
}

TEST(BenchCmd, EveryRowOnTheTrainedModel) {
  if (!have_cli()) GTEST_SKIP() << "the les program is not built here";
  LES_REQUIRE_FILE(test::tiny_moe_path());
  // The bundled q4_k_m file stands in for a mixed-precision file: the same model at other
  // precisions (its outputs differ from the F16 model's, so it has its own hash group).
  const std::string mixed = test::source_dir() + "/models/tiny-moe-q4_k_m.gguf";
  LES_REQUIRE_FILE(mixed);
  const std::string dir = test::temp_dir();
  const std::string json = dir + "/bench.json", md = dir + "/bench.md";
  std::string err;
  const int rc = test::run_les("bench --quick -m " + q(test::tiny_moe_path()) + " --mixed " + q(mixed) +
                                   " --spec-oracle 0.8 -n 24 --prompt-tokens 24 --reps 1 --prompt-file " +
                                   q(test::shared_models() + "/tiny-moe-val.txt") + " --work-dir " + q(dir) +
                                   " --json " + q(json) + " --md " + q(md),
                               &err);
  ASSERT_EQ(rc, 0) << err;
  // The temporary packed files are gone.
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().rfind("les-bench-", 0), std::string::npos) << e.path();
  }
  const auto j = nlohmann::json::parse(slurp(json));
  const std::string table = slurp(md);
  EXPECT_TRUE(j["hashes_ok"].get<bool>());
  EXPECT_NEAR(j["cache_share"].get<double>(), 0.25, 0.02);
  const auto& rows = j["rows"];
  const char* names[] = {"resident", "baseline", "lookahead", "loadopt", "mixed", "spec"};
  ASSERT_EQ(rows.size(), 6u);
  double base_tps = 0, prev_tps = 0;
  std::string hash0, hash1;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    SCOPED_TRACE(names[i]);
    ASSERT_EQ(r["name"], names[i]);
    ASSERT_TRUE(r["ran"].get<bool>()) << r["note"];
    const double tps = r["decode_tps"].get<double>();
    EXPECT_GT(tps, 0);
    EXPECT_GT(r["prefill_tps"].get<double>(), 0);
    EXPECT_GT(r["peak_rss_mib"].get<double>(), 1);
    EXPECT_GE(r["ttft_s"].get<double>(), r["load_s"].get<double>());
    const std::string h = r["logits_hash"];
    const int group = r["hash_group"];
    std::string& ref = group == 0 ? hash0 : hash1;
    if (ref.empty()) ref = h;
    EXPECT_EQ(h, ref) << "rows with the same weights must end with the same logits";
    if (i == 0) {
      EXPECT_EQ(r["mib_per_token"].get<double>(), 0);  // resident: nothing streamed
      EXPECT_TRUE(r["hit"].is_null());
    } else {
      EXPECT_GT(r["mib_per_token"].get<double>(), 0);
      const double hit = r["hit"], prepared = r["prepared"];
      EXPECT_GE(hit, 0);
      EXPECT_LE(hit, 1);
      EXPECT_GE(prepared, hit);
      EXPECT_LE(prepared, 1);
      EXPECT_GT(r["disk_busy_mb_s"].get<double>(), 0);
    }
    if (i == 1) base_tps = tps;
    if (i >= 1) {
      EXPECT_NEAR(r["vs_baseline"].get<double>(), tps / base_tps, 1e-4 * tps / base_tps);
    }
    if (i >= 2) {
      EXPECT_NEAR(r["vs_prev"].get<double>(), tps / prev_tps, 1e-4 * tps / prev_tps);
    }
    if (i >= 1) prev_tps = tps;
    // The routing oracle beside the lookahead rows only.
    const bool lookahead_row = i == 2 || i == 3 || i == 4;
    EXPECT_EQ(r["oracle_tps"].is_null(), !lookahead_row);
    EXPECT_GT(r["ceiling_tps"].get<double>(), 0);
    EXPECT_NEAR(r["of_ceiling"].get<double>(), tps / r["ceiling_tps"].get<double>(), 1e-3);
    // The Markdown row says the same.
    const std::string line_start = "| " + r["label"].get<std::string>() + " | **" + les::strfmt("%.2f", tps) + "** |";
    EXPECT_NE(table.find(line_start), std::string::npos) << line_start << "\n" << table;
    EXPECT_NE(table.find(h), std::string::npos);
  }
  EXPECT_NE(hash0, hash1) << "the q4_k_m file cannot give the F16 model's logits";
  EXPECT_NE(table.find("3.36x"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(BenchCmd, BadInputGivesAClearError) {
  if (!have_cli()) GTEST_SKIP() << "the les program is not built here";
  LES_REQUIRE_FILE(test::tiny_moe_path());
  std::string err;
  EXPECT_EQ(test::run_les("bench -m /nonexistent/model.gguf --mem 1G", &err), 1);
  EXPECT_NE(err.find("/nonexistent/model.gguf"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 1G --rows baseline,warp", &err), 1);
  EXPECT_NE(err.find("unknown row 'warp'"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 2M --rows baseline", &err), 1);
  EXPECT_NE(err.find("too small"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()), &err), 1);
  EXPECT_NE(err.find("--mem"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 1G --draft /nonexistent/d.gguf", &err), 1);
  EXPECT_NE(err.find("/nonexistent/d.gguf"), std::string::npos) << err;
}

}  // namespace
