// `les bench` (les/bench/): the pure pieces (median, ceiling, rows, table and JSON writers, the
// forked runner) directly; then the command on the trained model with every row, checking the
// properties its table promises (equal hashes, consistent ratios, bytes per token, JSON = Markdown)
// and its errors for bad input.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "les/bench/child.h"
#include "les/bench/report.h"
#include "les/bench/rows.h"
#include "les/bench/run_row.h"
#include "les/bench/stats.h"
#include "les/util/error.h"
#include "test_util.h"

namespace {

using namespace les;
using namespace les::bench;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using les::test::kSanitized;

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
  // With the disk's rate with idle cores: 1 MB, 0.5 MB of it beside 10 ms of compute at 50 MB/s,
  // the rest at 100 MB/s: 15 ms.
  EXPECT_NEAR(ceiling_tps(1e6, 50e6, 1e-2, 100e6), 1 / 0.015, 1e-9);
  EXPECT_NEAR(ceiling_tps(1e6, 50e6, 1e-2, kNaN), 50, 1e-9);
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
  r.disk_original = {900, 1200};
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

TEST(BenchReport, ChartIsAPngOrSaysWhyNot) {
  const std::string dir = test::temp_dir();
  const std::string png = dir + "/chart.png";
  std::string why;
  if (write_chart_png(sample_report(), png, &why)) {
    const auto b = test::read_bytes(png);
    ASSERT_GE(b.size(), 8u);
    EXPECT_EQ(b[1], 'P');
    EXPECT_EQ(b[2], 'N');
    EXPECT_EQ(b[3], 'G');
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_FALSE(test::file_exists(png));
  }
  std::filesystem::remove_all(dir);
}

// A run's result crosses the child's pipe with its tokens and a recorded routing; a payload of
// the wrong shape is an error, not a misread.
TEST(BenchChild, RunPayloadKeepsTokensAndRouting) {
  RunMeasure m;
  m.decode_tps = 12.5;
  m.logits_hash = 0x1234;
  const std::vector<int32_t> toks{5, 6, 7}, route{2, 1, 1, 9, -1};
  for (const auto& r : {route, std::vector<int32_t>{}}) {
    RunMeasure got;
    std::vector<int32_t> t, rr{42};
    decode_run(encode_run(m, toks, r), &got, &t, &rr);
    EXPECT_DOUBLE_EQ(got.decode_tps, 12.5);
    EXPECT_EQ(got.logits_hash, 0x1234u);
    EXPECT_EQ(t, toks);
    EXPECT_EQ(rr, r);
  }
  RunMeasure got;
  std::vector<int32_t> t;
  decode_run(encode_run(m, {}, route), &got, &t);  // routing not wanted: ignored
  EXPECT_TRUE(t.empty());
  std::string bad = encode_run(m, toks, route);
  bad.pop_back();
  EXPECT_THROW(decode_run(bad, &got, &t), Error);
  std::string short_tokens = encode_run(m, toks).substr(0, sizeof(RunMeasure) + 4 + 8);  // says 3 tokens, holds 2
  EXPECT_THROW(decode_run(short_tokens, &got, &t), Error);
  EXPECT_THROW(decode_run("xy", &got, &t), Error);
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

// A JSON number, NaN for null (a column that does not apply), so that a wrong null fails an
// expectation instead of throwing.
double num(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : kNaN; }

std::string slurp(const std::string& p) {
  const auto b = test::read_bytes(p);
  return std::string(b.begin(), b.end());
}

TEST(BenchCmd, EveryRowOnTheTrainedModel) {
  if (!have_cli()) LES_SKIP_PLATFORM("this build has no les program (LES_LIB_EXCLUDE)");
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const std::string dir = test::temp_dir();
  const std::string json = dir + "/bench.json", md = dir + "/bench.md";
  std::string err;
  // A Q3_K_M copy stands in for a mixed-precision file: the same model at other precisions (its
  // outputs differ from the Q4_K_M file's, so it has its own hash group).
  const std::string mixed = dir + "/tiny-moe-q3_k_m.gguf";
  ASSERT_EQ(test::run_les("quantize " + q(test::tiny_moe_path()) + " " + q(mixed) + " Q3_K_M", &err), 0) << err;
  // Sanitized builds run the same rows on fewer tokens (the program is several times slower there).
  const std::string tokens = kSanitized ? " -n 8 --prompt-tokens 8" : " -n 24 --prompt-tokens 24";
  // --mem 45M: the Q4_K_M file's cache holds about a third of its experts, the Q3_K_M file's a bit
  // more, so every streamed row reads experts while decoding.
  const int rc = test::run_les("bench --quick --mem 45M -m " + q(test::tiny_moe_path()) + " --mixed " + q(mixed) +
                                   " --spec-oracle 0.8" + tokens + " --reps 2 --prompt-file " +
                                   q(test::tiny_val_text_path()) + " --work-dir " + q(dir) +
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
  // Two repeats: the second runs the rows in reverse (the spec row and the routing oracles first,
  // on what the warm-up recorded), and says so.
  EXPECT_NE(table.find("in reverse order"), std::string::npos) << table;
  EXPECT_NE(table.find("the warm-up's first streamed row"), std::string::npos) << table;
  EXPECT_EQ(j["mem_bytes"].get<uint64_t>(), uint64_t(45) << 20);
  EXPECT_DOUBLE_EQ(num(j["cache_share"]), num(j["rows"][1]["cache_share"]));
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
    const double tps = num(r["decode_tps"]);
    EXPECT_GT(tps, 0);
    EXPECT_GT(num(r["prefill_tps"]), 0);
    EXPECT_GT(num(r["peak_rss_mib"]), 1);
    EXPECT_GE(num(r["ttft_s"]), num(r["load_s"]));
    const std::string h = r["logits_hash"];
    const int group = r["hash_group"];
    std::string& ref = group == 0 ? hash0 : hash1;
    if (ref.empty()) ref = h;
    EXPECT_EQ(h, ref) << "rows with the same weights must end with the same logits";
    if (i == 0) {
      EXPECT_EQ(num(r["mib_per_token"]), 0);  // resident: nothing streamed
      EXPECT_TRUE(r["hit"].is_null());
    } else {
      EXPECT_GT(num(r["mib_per_token"]), 0);
      const double hit = num(r["hit"]), prepared = num(r["prepared"]);
      EXPECT_GE(hit, 0);
      EXPECT_LE(hit, 1);
      EXPECT_GE(prepared, hit);
      EXPECT_LE(prepared, 1);
      EXPECT_GT(num(r["disk_busy_mb_s"]), 0);
    }
    if (i == 1) base_tps = tps;
    if (i >= 1) {
      EXPECT_NEAR(num(r["vs_baseline"]), tps / base_tps, 1e-4 * tps / base_tps);
    }
    if (i >= 2) {
      EXPECT_NEAR(num(r["vs_prev"]), tps / prev_tps, 1e-4 * tps / prev_tps);
    }
    if (i >= 1) prev_tps = tps;
    // The routing oracle beside the lookahead rows only.
    const bool lookahead_row = i == 2 || i == 3 || i == 4;
    EXPECT_EQ(r["oracle_tps"].is_null(), !lookahead_row);
    EXPECT_GT(num(r["ceiling_tps"]), 0);
    EXPECT_NEAR(num(r["of_ceiling"]), tps / num(r["ceiling_tps"]), 1e-3);
    // The Markdown row says the same (to its two decimals).
    const std::string line_start = "| " + r["label"].get<std::string>() + " | **";
    const size_t at = table.find(line_start);
    ASSERT_NE(at, std::string::npos) << line_start << "\n" << table;
    EXPECT_NEAR(std::strtod(table.c_str() + at + line_start.size(), nullptr), tps, 0.0051) << table;
    EXPECT_NE(table.find(h), std::string::npos);
  }
  EXPECT_NE(hash0, hash1) << "the Q3_K_M file cannot give the Q4_K_M file's logits";
  EXPECT_NE(table.find("3.36x"), std::string::npos);
  // The ceilings use each row's own loader: the naive buffered loader's probe for the baseline and
  // +lookahead rows, direct I/O for the packed rows.
  const double naive_mbs = num(j["disk_mb_s"]["original_naive"]), packed_mbs = num(j["disk_mb_s"]["packed"]);
  EXPECT_GT(naive_mbs, 0);
  EXPECT_NE(table.find("naive buffered loader"), std::string::npos) << table;
  const double compute_s = num(j["compute_ms_per_token"]) / 1e3;
  const double naive_idle = num(j["idle_disk_mb_s"]["original_naive"]), packed_idle = num(j["idle_disk_mb_s"]["packed"]);
  EXPECT_GE(naive_idle, naive_mbs);
  EXPECT_GE(packed_idle, packed_mbs);
  // Beside the compute at the loaded figure, the rest at the idle one (DeviceProbe.CeilingWithALoadedAndAnIdleRate).
  auto want_ceiling = [&](const nlohmann::json& r, double mbs, double idle) {
    const double mb = num(r["used_mb_per_token"]);
    return 1 / (mb <= mbs * compute_s ? compute_s : compute_s + (mb - mbs * compute_s) / idle);
  };
  for (int i : {1, 2}) {
    EXPECT_NEAR(num(rows[i]["ceiling_tps"]), want_ceiling(rows[i], naive_mbs, naive_idle), 1e-6 * num(rows[i]["ceiling_tps"]));
  }
  EXPECT_NEAR(num(rows[3]["ceiling_tps"]), want_ceiling(rows[3], packed_mbs, packed_idle), 1e-6 * num(rows[3]["ceiling_tps"]));
  std::filesystem::remove_all(dir);
}

TEST(BenchCmd, QuickDerivesTheBudgetOfAQuarterCache) {
  if (!have_cli()) LES_SKIP_PLATFORM("this build has no les program (LES_LIB_EXCLUDE)");
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const std::string dir = test::temp_dir();
  std::string err;
  ASSERT_EQ(test::run_les("bench --quick -m " + q(test::tiny_moe_path()) +
                              " --rows baseline -n 4 --prompt-tokens 4 --reps 1 --json " + q(dir + "/b.json"),
                          &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(slurp(dir + "/b.json"));
  EXPECT_NEAR(num(j["cache_share"]), 0.25, 0.01);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["name"], "baseline");
  EXPECT_DOUBLE_EQ(num(j["rows"][0]["vs_baseline"]), 1.0);
  // Without --mem (or with --mem auto) a model that fits in memory is measured at the same budget,
  // and the command says why.
  ASSERT_EQ(test::run_les("bench --quick-probe -m " + q(test::tiny_moe_path()) +
                              " --rows baseline -n 4 --prompt-tokens 4 --reps 1 --json " + q(dir + "/c.json"),
                          &err),
            0)
      << err;
  EXPECT_NE(err.find("fits in memory"), std::string::npos) << err;
  EXPECT_NEAR(num(nlohmann::json::parse(slurp(dir + "/c.json"))["cache_share"]), 0.25, 0.01);
  std::filesystem::remove_all(dir);
}

TEST(BenchCmd, BadInputGivesAClearError) {
  if (!have_cli()) LES_SKIP_PLATFORM("this build has no les program (LES_LIB_EXCLUDE)");
  LES_REQUIRE_FILE(test::tiny_moe_path());
  std::string err;
  EXPECT_EQ(test::run_les("bench -m /nonexistent/model.gguf --mem 1G", &err), 1);
  EXPECT_NE(err.find("/nonexistent/model.gguf"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 1G --rows baseline,warp", &err), 1);
  EXPECT_NE(err.find("unknown row 'warp'"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 2M --rows baseline", &err), 1);
  EXPECT_NE(err.find("too small"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 0", &err), 1);
  EXPECT_NE(err.find("--mem must be > 0"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("bench -m " + q(test::tiny_moe_path()) + " --mem 1G --draft /nonexistent/d.gguf", &err), 1);
  EXPECT_NE(err.find("/nonexistent/d.gguf"), std::string::npos) << err;
}

}  // namespace
