// A fully resident model mapped from its file or read into memory (huge pages): the automatic
// choice, the names, and bit-identical logits either way (original and packed files).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "les/model/context.h"
#include "les/model/model.h"
#include "les/pack/pack.h"
#include "les/util/meminfo.h"
#include "model_edit.h"
#include "test_util.h"

using namespace les;

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Logits of every position of `prompt`, then of `n_gen` greedy steps, concatenated.
std::vector<float> run_logits(const Model& m, const std::vector<int32_t>& prompt, int n_gen) {
  const int nv = m.config().n_vocab;
  Context ctx(m, ContextParams{.n_ctx = 64, .n_threads = 2});
  ctx.eval(prompt, true);
  std::vector<float> out;
  for (int i = 0; i < ctx.n_outputs(); ++i) out.insert(out.end(), ctx.logits(i), ctx.logits(i) + nv);
  for (int g = 0; g < n_gen; ++g) {
    const float* lg = ctx.last_logits();
    const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + nv) - lg);
    ctx.eval(std::span<const int32_t>(&next, 1), false);
    out.insert(out.end(), ctx.last_logits(), ctx.last_logits() + nv);
  }
  return out;
}

void expect_same_logits_mapped_and_read(const std::string& path, const std::vector<int32_t>& prompt) {
  auto mapped = Model::load(path, LoadOptions{.map_experts = true, .resident = ResidentMemory::map});
  auto read = Model::load(path, LoadOptions{.map_experts = true, .resident = ResidentMemory::read});
  EXPECT_EQ(mapped->resident_memory(), ResidentMemory::map);
  EXPECT_EQ(read->resident_memory(), ResidentMemory::read);
  EXPECT_GT(read->resident_read_seconds(), 0.0);
  EXPECT_EQ(mapped->resident_read_seconds(), 0.0);
  const std::vector<float> a = run_logits(*mapped, prompt, 8), b = run_logits(*read, prompt, 8);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << path;
}

}  // namespace

TEST(ResidentMemory, ReadWhenTheFileFitsWithItsMargin) {
  // Margin: 1 GiB plus 1/16 of the file.
  const uint64_t file = 16 * kGiB, margin = kGiB + kGiB;
  EXPECT_TRUE(resident_fits(file, file + margin));
  EXPECT_FALSE(resident_fits(file, file + margin - 1));
  EXPECT_FALSE(resident_fits(file, file));
  EXPECT_FALSE(resident_fits(1, kGiB));        // below the fixed margin: no underflow
  EXPECT_FALSE(resident_fits(file, 0));        // MemAvailable unknown
  EXPECT_TRUE(resident_fits(1 << 20, 2 * kGiB));
  EXPECT_EQ(choose_resident_memory(file, file + margin, true), ResidentMemory::read);
  EXPECT_EQ(choose_resident_memory(file, file + margin - 1, true), ResidentMemory::map);
  EXPECT_EQ(choose_resident_memory(file, 4 * file, false), ResidentMemory::map);  // no huge pages: map
}

TEST(ResidentMemory, NamesParseAndBadNamesAreErrors) {
  for (ResidentMemory m : {ResidentMemory::automatic, ResidentMemory::map, ResidentMemory::read}) {
    EXPECT_EQ(parse_resident_memory(resident_memory_name(m)), m);
  }
  EXPECT_EQ(parse_resident_memory("auto"), ResidentMemory::automatic);
  EXPECT_EQ(parse_resident_memory("mmap"), ResidentMemory::map);
  const std::string msg = les::test::error_of([] { parse_resident_memory("hugepages"); });
  EXPECT_NE(msg.find("'hugepages'"), std::string::npos) << msg;
}

TEST(ResidentMemory, SysfsSelectedModeAndMemAvailable) {
  EXPECT_EQ(sysfs_selected_mode("always [madvise] never"), "madvise");
  EXPECT_EQ(sysfs_selected_mode("[always] madvise never"), "always");
  EXPECT_EQ(sysfs_selected_mode("always madvise [never]"), "never");
  EXPECT_EQ(sysfs_selected_mode("always madvise never"), "");
  EXPECT_EQ(sysfs_selected_mode("[unterminated"), "");
  EXPECT_GT(mem_available_bytes(), uint64_t{1} << 20);  // Linux: /proc/meminfo is there
}

TEST(ResidentMemory, MappedAndReadGiveBitIdenticalLogits) {
  LES_REQUIRE_FILE(les::test::tiny_moe_path());
  expect_same_logits_mapped_and_read(les::test::tiny_moe_path(), {1, 450, 2003, 77, 912, 3101, 15, 640, 5, 7777});
}

TEST(ResidentMemory, PackedFileMappedAndReadGiveBitIdenticalLogits) {
  les::test::ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf", "q8_0", 3);
  const std::string packed = d.file("m-packed.gguf");
  pack::pack_model(src, packed);
  expect_same_logits_mapped_and_read(src, {1, 2, 40, 100, 7, 250});
  expect_same_logits_mapped_and_read(packed, {1, 2, 40, 100, 7, 250});
  // Packed and original agree too.
  auto a = Model::load(src, LoadOptions{.map_experts = true, .resident = ResidentMemory::read});
  auto b = Model::load(packed, LoadOptions{.map_experts = true, .resident = ResidentMemory::read});
  const std::vector<float> la = run_logits(*a, {1, 2, 40, 100, 7, 250}, 4), lb = run_logits(*b, {1, 2, 40, 100, 7, 250}, 4);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
}

TEST(ResidentMemory, RunFlagsChooseTheModeAndGiveTheSameLogits) {
  LES_REQUIRE_FILE(les::test::tiny_moe_path());
  const std::string base = "run -m '" + les::test::tiny_moe_path() + "' -p 'Once upon a time' -n 8 --temp 0 -t 2";
  auto hash_of = [](const std::string& err) {
    const size_t p = err.find("final logits hash: ");
    return p == std::string::npos ? std::string() : err.substr(p + 19, 16);
  };
  std::string mapped, read;
  ASSERT_EQ(les::test::run_les(base + " --mmap", &mapped), 0) << mapped;
  ASSERT_EQ(les::test::run_les(base + " --no-mmap", &read), 0) << read;
  EXPECT_NE(mapped.find("resident (mapped): --mmap"), std::string::npos) << mapped;
  EXPECT_NE(mapped.find("mapped from the file (page cache)"), std::string::npos) << mapped;
  EXPECT_NE(read.find("read into memory (huge pages)"), std::string::npos) << read;
  ASSERT_FALSE(hash_of(mapped).empty()) << mapped;
  EXPECT_EQ(hash_of(mapped), hash_of(read));

  std::string err;
  EXPECT_EQ(les::test::run_les(base + " --mmap --no-mmap", &err), 1);
  EXPECT_NE(err.find("--mmap and --no-mmap exclude each other"), std::string::npos) << err;
  EXPECT_EQ(les::test::run_les(base + " --no-mmap --mem 60M", &err), 1);
  EXPECT_NE(err.find("--no-mmap keeps the whole model resident; it excludes --mem"), std::string::npos) << err;
  EXPECT_EQ(les::test::run_les(base + " --mmap --schedule ondemand", &err), 1);
  EXPECT_NE(err.find("--schedule applies to streamed experts, not with --mmap"), std::string::npos) << err;
}

namespace {

// A fake cgroup file system under a temporary directory (removed at scope exit).
struct FakeCgroupRoot {
  std::filesystem::path root = std::filesystem::path(les::test::temp_dir()) / "cgroup";
  FakeCgroupRoot() { std::filesystem::create_directories(root); }
  ~FakeCgroupRoot() {
    std::error_code ec;
    std::filesystem::remove_all(root.parent_path(), ec);
  }
  void put(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = root / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

}  // namespace

TEST(ResidentMemory, CgroupV2LimitIsTheSmallestHeadroomUpTheTree) {
  FakeCgroupRoot fs;
  fs.put("memory.max", "max\n");
  fs.put("a/memory.max", "4294967296\n");
  fs.put("a/memory.current", "1073741824\n");
  fs.put("a/memory.stat", "anon 1\nfile 600000000\ninactive_file 536870912\n");
  fs.put("a/b/memory.max", "max\n");
  fs.put("a/b/memory.current", "900\n");
  const std::string root = fs.root.string();
  // 4 GiB - (1 GiB - 0.5 GiB of inactive page cache) at /a; /a/b and the root have no limit.
  EXPECT_EQ(cgroup_memory_headroom_bytes("0::/a/b\n", root), 4294967296ull - 536870912ull);
  EXPECT_EQ(cgroup_memory_headroom_bytes("0::/\n", root), UINT64_MAX);
  fs.put("a/b/memory.max", "1000\n");  // a tighter limit below
  EXPECT_EQ(cgroup_memory_headroom_bytes("0::/a/b\n", root), 100u);
  fs.put("a/b/memory.current", "5000\n");  // over the limit: nothing left, no underflow
  EXPECT_EQ(cgroup_memory_headroom_bytes("0::/a/b\n", root), 0u);
}

TEST(ResidentMemory, CgroupV1MemoryControllerAndUnreadableFiles) {
  FakeCgroupRoot fs;
  fs.put("memory/memory.limit_in_bytes", "9223372036854771712\n");  // unlimited
  fs.put("memory/memory.usage_in_bytes", "123\n");
  fs.put("memory/x/memory.limit_in_bytes", "2147483648\n");
  fs.put("memory/x/memory.usage_in_bytes", "1073741824\n");
  fs.put("memory/x/memory.stat", "cache 5\ntotal_inactive_file 0\n");
  const std::string root = fs.root.string();
  EXPECT_EQ(cgroup_memory_headroom_bytes("9:name=systemd:/\n5:cpu,memory:/x\n0::/\n", root), 1073741824u);
  EXPECT_EQ(cgroup_memory_headroom_bytes("4:memory:/\n", root), UINT64_MAX);
  EXPECT_EQ(cgroup_memory_headroom_bytes("4:memory:/missing/dir\n", root), UINT64_MAX);
  EXPECT_EQ(cgroup_memory_headroom_bytes("", root), UINT64_MAX);
  EXPECT_EQ(cgroup_memory_headroom_bytes("garbage without colons", root), UINT64_MAX);
  fs.put("memory/x/memory.limit_in_bytes", "not a number\n");
  EXPECT_EQ(cgroup_memory_headroom_bytes("4:memory:/x\n", root), UINT64_MAX);
  // What the process can count on never exceeds MemAvailable. The two calls read /proc/meminfo
  // at different moments and MemAvailable moves in between (other processes allocate and free:
  // a clean-clone CI run saw it 148 KiB apart), so the comparison allows some drift.
  const uint64_t drift = 256ull << 20;
  EXPECT_LE(memory_available_to_process(), mem_available_bytes() + drift);
}
